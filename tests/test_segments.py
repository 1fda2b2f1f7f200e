"""Questions added since the main FAISS file live in a small flat file of their own (the
manifest's ``added_file``), searched beside the main one and folded into it past a share of it:
a write of a few questions no longer rewrites the whole index. Their texts do the same in the
BM25 files (``lexical_added_file``)."""

from __future__ import annotations

import time
from pathlib import Path

import faiss
import numpy as np
import pytest
from helpers import collection

from askalike.core.files import TIMESTAMP_RESOLUTION_NS, known_sha256
from askalike.core.loader import load_encoder
from askalike.indexer import sync
from askalike.indexer.build import delete_questions
from askalike.indexer.directory import check_index, open_index, repair_index
from askalike.indexer.layout import IndexDirectoryError
from askalike.indexer.manifest import load_faiss, load_lexical, read_manifest
from askalike.indexer.upsert import upsert_questions, validated_questions
from askalike.indexer.vector_index import (
    HeldVectors,
    SegmentedIndex,
    added_index,
    build_index,
    index_ids,
)
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.searcher import Searcher

DIM = 16


def _unit(count: int, seed: int) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, DIM)).astype(np.float32)
    faiss.normalize_L2(vectors)
    return vectors


def _flat(ids: np.ndarray, vectors: np.ndarray) -> faiss.Index:
    return build_index("flat", {}, DIM, iter([(ids, vectors)]))


def test_a_segmented_index_answers_as_one_index_of_all_its_vectors():
    vectors, ids = _unit(300, 0), np.arange(300, dtype=np.int64) * 3
    added = added_index(DIM)
    added.add_with_ids(vectors[240:], ids[240:])
    segmented, whole = SegmentedIndex(_flat(ids[:240], vectors[:240]), added), _flat(ids, vectors)
    queries, allowed = _unit(5, 1), np.sort(ids[::7])
    assert segmented.ntotal == 300 and segmented.added_count == 60
    assert np.array_equal(np.sort(segmented.ids()), ids)
    for k in (1, 10, 400):  # 400: more than it holds, padded with -1 as FAISS pads
        for found, expected in [
            (segmented.search(queries, k), whole.search(queries, k)),
            (segmented.scan(queries, k, allowed),
             whole.search(queries, k, params=faiss.SearchParameters(sel=faiss.IDSelectorBatch(allowed)))),
            (segmented.approximate(queries, k, None, {}), whole.search(queries, k)),
        ]:
            assert np.array_equal(found[1], expected[1])
            held = expected[1] >= 0
            np.testing.assert_allclose(found[0][held], expected[0][held], rtol=1e-6)
    held = HeldVectors.of(segmented)
    wanted = [int(ids[5]), int(ids[250]), 1]  # one of each part, one not held
    got = held.get(wanted)
    assert sorted(got) == sorted(wanted[:2])
    assert np.array_equal(got[int(ids[250])], vectors[250]) and np.array_equal(got[int(ids[5])], vectors[5])
    folded = segmented.folded()
    assert folded.added is None and folded.ntotal == 300
    assert np.array_equal(folded.search(queries, 10)[1], whole.search(queries, 10)[1])


def _write(index_dir, model, records, source: str = "api"):
    manifest = read_manifest(index_dir)
    questions, _ = validated_questions(records)
    return upsert_questions(index_dir, questions, load_encoder(str(model)), manifest.encoder, source)


def _new(first: int, count: int) -> list[dict]:
    return [dict(record, id=f"new{i}") for i, record in enumerate(collection(first + count)[first:], first)]


def test_a_write_of_a_few_questions_leaves_the_main_file_as_it_is(built, tiny_model):
    index_dir, _ = built
    before = read_manifest(index_dir)
    main_file = index_dir / before.faiss_file
    main_stat = main_file.stat()
    assert not before.added_file
    _write(index_dir, tiny_model, _new(200, 3))
    first = read_manifest(index_dir)
    assert (first.faiss_file, first.faiss_sha256) == (before.faiss_file, before.faiss_sha256)
    unchanged = main_file.stat()
    assert (unchanged.st_ino, unchanged.st_mtime_ns) == (main_stat.st_ino, main_stat.st_mtime_ns)
    assert first.added_file and first.count == 203 and (index_dir / first.added_file).is_file()
    assert (first.lexical_file, first.lexical_sha256) == (before.lexical_file, before.lexical_sha256)
    assert first.lexical_added_file and not before.lexical_added_file
    opened_first, lexical_first = open_index(index_dir), load_lexical(index_dir, first)
    _write(index_dir, tiny_model, _new(203, 2))
    second = read_manifest(index_dir)
    assert second.faiss_file == before.faiss_file and second.count == 205
    assert not (index_dir / first.added_file).exists()  # replaced by the next write's
    assert second.lexical_file == before.lexical_file and second.lexical_added_file
    assert not (index_dir / first.lexical_added_file).exists()
    lexical = load_lexical(index_dir, second)
    assert len(lexical.main) == 200 and len(lexical.added) == 5
    assert lexical.main is lexical_first.main  # a process opening the next state reads it once
    opened = open_index(index_dir)
    try:
        assert opened.faiss.added_count == 5 and opened.faiss.ntotal == 205
        assert opened.faiss.main is opened_first.faiss.main  # the same: not read again
    finally:
        opened.close()
        opened_first.close()
    with Searcher(index_dir) as searcher:
        new_text = _new(204, 1)[0]["body"]
        for mode in (SearchMode.dense, SearchMode.hybrid):
            assert searcher.search(new_text, 3, mode=mode)[0].external_id == "new204"
        only_api = searcher.filters(sources=["api"])
        assert {r.external_id for r in searcher.search(new_text, 10, only_api, SearchMode.dense)} == {
            f"new{i}" for i in range(200, 205)}
        assert len(searcher.search(new_text, 300, mode=SearchMode.dense)) == 205  # k past the count
    assert check_index(index_dir).ok
    assert delete_questions(index_dir, ["new204"]) == 1  # not only added: both rebuilt, in one file
    after_delete = read_manifest(index_dir)
    assert not after_delete.added_file and after_delete.count == 204
    assert check_index(index_dir).ok


def test_a_main_file_put_back_under_its_name_is_read_again(built):
    """A main file replaced by another with the same name and checksum (``check --repair``
    after it was damaged in place) is another file: a state opened then reads it, and does not
    share what a state still open made of the one it replaced (a mapping of a damaged file)."""
    index_dir, _ = built
    manifest = read_manifest(index_dir)
    opened_first = open_index(index_dir)
    try:
        main_file = index_dir / manifest.faiss_file
        copy = main_file.with_name("copy")
        copy.write_bytes(main_file.read_bytes())
        copy.replace(main_file)  # the same bytes, another inode
        opened = open_index(index_dir)
        try:
            assert opened.faiss.main is not opened_first.faiss.main
            assert opened.faiss.ntotal == opened_first.faiss.ntotal
        finally:
            opened.close()
    finally:
        opened_first.close()


def test_added_questions_are_folded_into_the_main_file_past_their_share(built, tiny_model, monkeypatch):
    index_dir, _ = built
    before = read_manifest(index_dir)
    monkeypatch.setattr(sync, "ADDED_FLOOR", 4)
    monkeypatch.setattr(sync, "ADDED_SHARE", 1000)
    _write(index_dir, tiny_model, _new(200, 4))
    kept = read_manifest(index_dir)
    assert kept.faiss_file == before.faiss_file and kept.added_file
    assert kept.lexical_file == before.lexical_file and kept.lexical_added_file
    _write(index_dir, tiny_model, _new(204, 1))  # 5 added: past the floor of 4
    folded = read_manifest(index_dir)
    assert folded.faiss_file != before.faiss_file and not folded.added_file and folded.count == 205
    assert not (index_dir / before.faiss_file).exists() and not (index_dir / kept.added_file).exists()
    assert folded.lexical_file != before.lexical_file and not folded.lexical_added_file
    assert not (index_dir / before.lexical_file).exists()
    assert not (index_dir / kept.lexical_added_file).exists()
    assert load_lexical(index_dir, folded).added is None
    opened = open_index(index_dir)
    try:
        assert opened.faiss.added is None
        assert np.array_equal(np.sort(index_ids(opened.faiss.main)), np.sort(opened.store.ids()))
    finally:
        opened.close()
    assert check_index(index_dir).ok


def test_a_write_reads_the_main_faiss_file_writable_only_to_fold_into_it(built, tiny_model, monkeypatch):
    """A write that only adds extends the added file beside the main one mapped, as searches
    have it (reading it writable was most of a server's first write, and kept its memory); one
    that folds reads it writable, once."""
    from askalike.indexer import manifest as manifest_module

    index_dir, _ = built
    monkeypatch.setattr(sync, "ADDED_FLOOR", 4)
    monkeypatch.setattr(sync, "ADDED_SHARE", 1000)
    monkeypatch.setattr(sync, "_last_written", None)  # as a server's first write: nothing kept
    reads: list[tuple[str, bool]] = []
    read = manifest_module.read_index
    monkeypatch.setattr(manifest_module, "read_index",
                        lambda path, mapped=False: reads.append((path.name, mapped)) or read(path, mapped))
    main = read_manifest(index_dir).faiss_file
    _write(index_dir, tiny_model, _new(200, 2))
    _write(index_dir, tiny_model, _new(202, 2))
    assert read_manifest(index_dir).faiss_file == main and (main, False) not in reads
    reads.clear()
    _write(index_dir, tiny_model, _new(204, 1))  # 5 added: past the floor of 4, folded
    folded = read_manifest(index_dir)
    assert folded.faiss_file != main and folded.count == 205
    assert reads.count((main, False)) == 1
    assert check_index(index_dir).ok


def _damaged(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("kind", ["added_file", "lexical_added_file"])
def test_a_damaged_added_file_is_found_and_repaired(built, tiny_model, kind):
    index_dir, _ = built
    _write(index_dir, tiny_model, _new(200, 3))
    manifest = read_manifest(index_dir)
    damaged = getattr(manifest, kind)
    _damaged(index_dir / damaged)
    with pytest.raises(IndexDirectoryError, match=f"{damaged}: its checksum"):
        open_index(index_dir, lexical=True)
    report = check_index(index_dir)
    assert not report.ok and any(damaged in problem for problem in report.problems)
    repair_index(index_dir)
    repaired = read_manifest(index_dir)
    assert not getattr(repaired, kind) and repaired.count == 203 and check_index(index_dir).ok


def test_a_file_hashed_once_is_not_read_again_while_it_is_unchanged(tmp_path, monkeypatch):
    """Another worker of a server opens the main FAISS file at each write that leaves it as it
    is: it hashes it once. A file changed since, or read within a clock tick of its last change,
    is read again."""
    path = tmp_path / "file"
    path.write_bytes(b"contents")
    reads = []
    monkeypatch.setattr("askalike.core.files.file_sha256", lambda p: reads.append(p) or f"read {len(reads)}")
    assert known_sha256(path) == "read 1" and known_sha256(path) == "read 2"  # just written: not kept
    time.sleep(2 * TIMESTAMP_RESOLUTION_NS / 1e9)
    assert known_sha256(path) == "read 3" and known_sha256(path) == "read 3"
    path.write_bytes(b"other contents")
    assert known_sha256(path) == "read 4"


def test_a_main_file_removed_while_another_state_holds_it_is_said_missing(built):
    """A process keeps the main FAISS file it has open for its next state; if a writer removed
    the file meanwhile, the next opening of that manifest is refused as any missing file is (an
    IndexDirectoryError, on which an opening reads the new manifest), not a raw OSError."""
    index_dir, _ = built
    manifest = read_manifest(index_dir)
    held = open_index(index_dir)
    try:
        (index_dir / manifest.faiss_file).unlink()
        with pytest.raises(IndexDirectoryError, match="missing"):
            load_faiss(index_dir, manifest, mapped=True)
    finally:
        held.close()
