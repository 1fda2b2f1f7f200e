"""Bringing an index directory's FAISS and BM25 files up to its store (``indexer.sync``): an
add-only change extends the files, any other change (or a damaged file) rebuilds them from the
stored vectors and texts, and the manifest then describes exactly what the store holds."""

from __future__ import annotations

import numpy as np
import pytest

from askalike.core.lexical import LexicalIndex
from askalike.core.model_dir import EncoderIdentity
from askalike.indexer.layout import default_database_url
from askalike.indexer.manifest import load_faiss, load_lexical
from askalike.indexer.sources import SourceQuestion
from askalike.indexer.store import Store
from askalike.indexer.sync import sync_vector_index

DIM = 8
ENCODER = EncoderIdentity("m", "f", DIM)


def _add(store: Store, start: int, count: int) -> list[int]:
    vectors = np.random.default_rng(start).normal(size=(count, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)  # as every encoder gives them
    questions = [SourceQuestion(f"q{i}", f"question number {i}", "") for i in range(start, start + count)]
    return store.write("a.csv", questions, vectors, [None] * count)


def _synced(index_dir, store, manifest, **options):
    return sync_vector_index(index_dir, store, ENCODER, "flat", default_database_url(index_dir), manifest,
                             **options)


def _assert_matches_store(index_dir, manifest, store) -> None:
    assert manifest.generation == store.generation() and manifest.count == store.count()
    assert sorted(load_faiss(index_dir, manifest).ids()) == store.ids()
    assert load_lexical(index_dir, manifest).doc_ids.tolist() == store.ids()


def test_added_questions_extend_and_removed_ones_rebuild(tmp_path):
    with Store(default_database_url(tmp_path)) as store:
        ids = _add(store, 0, 10)
        manifest, rebuilt = _synced(tmp_path, store, None)
        assert rebuilt
        _assert_matches_store(tmp_path, manifest, store)
        _add(store, 10, 5)
        manifest, rebuilt = _synced(tmp_path, store, manifest, only_added=True)
        assert not rebuilt
        _assert_matches_store(tmp_path, manifest, store)
        store.delete(ids[:3])
        manifest, rebuilt = _synced(tmp_path, store, manifest)
        assert rebuilt
        _assert_matches_store(tmp_path, manifest, store)
        assert _synced(tmp_path, store, manifest) == (manifest, False)  # nothing to do


def test_a_damaged_faiss_file_is_rebuilt_instead_of_extended(tmp_path):
    with Store(default_database_url(tmp_path)) as store:
        _add(store, 0, 10)
        manifest, _ = _synced(tmp_path, store, None)
        (tmp_path / manifest.faiss_file).write_bytes(b"damaged")
        _add(store, 10, 5)
        manifest, rebuilt = _synced(tmp_path, store, manifest, only_added=True)
        assert rebuilt
        _assert_matches_store(tmp_path, manifest, store)


def test_the_index_this_process_wrote_is_extended_without_reading_its_file(tmp_path, monkeypatch):
    """A server writes again and again: the FAISS and BM25 indexes it wrote last are extended in
    memory (their files' checksums still verified), and the files written are those a read of the
    old files would give."""
    with Store(default_database_url(tmp_path)) as store:
        _add(store, 0, 10)
        manifest, _ = _synced(tmp_path, store, None)
        _add(store, 10, 5)
        with monkeypatch.context() as patched:
            patched.setattr("askalike.indexer.sync.load_faiss_to_extend", _refuse)
            patched.setattr("askalike.indexer.sync.load_lexical", lambda *_: pytest.fail("BM25 file read"))
            manifest, rebuilt = _synced(tmp_path, store, manifest, only_added=True)
        assert not rebuilt
        _assert_matches_store(tmp_path, manifest, store)
        _assert_scores_as_built(load_lexical(tmp_path, manifest), store)
        # another writer's manifest (a CLI run) names a file this process did not write: read
        other = tmp_path / "other"
        with Store(default_database_url(other)) as other_store:
            _add(other_store, 0, 3)
            _synced(other, other_store, None)
        _add(store, 15, 2)
        with monkeypatch.context() as patched:
            patched.setattr("askalike.indexer.sync.load_faiss_to_extend", _refuse)
            manifest, rebuilt = _synced(tmp_path, store, manifest, only_added=True)
        assert rebuilt  # the kept index was the other directory's: this file was read, and refused
        _assert_matches_store(tmp_path, manifest, store)


def _refuse(*_: object) -> None:
    from askalike.indexer.layout import IndexDirectoryError

    raise IndexDirectoryError("read")


def _assert_scores_as_built(lexical, store):
    """``lexical`` (the files' BM25 index, in segments) scores every term as an index built from
    the stored texts at once does, to the last bit."""
    fresh = LexicalIndex.build(store.texts())
    np.testing.assert_array_equal(lexical.doc_ids, fresh.doc_ids)
    for term in fresh.terms:
        np.testing.assert_array_equal(lexical.scores(term), fresh.scores(term))
