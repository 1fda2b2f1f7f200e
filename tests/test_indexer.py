"""The indexer: round trip, incremental runs, prune, encoder mismatch, index types, check/repair,
the writer lock, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import threading

import faiss
import numpy as np
import pytest
from helpers import (
    ASKS,
    PLACES,
    QUIET,
    TOPICS,
    collection,
    make_tiny_model,
    search_ids,
    stored_state,
    write_jsonl,
)

from askalike.core.datasets import DataError
from askalike.core.loader import load_encoder
from askalike.indexer.build import IndexOptions, index_sources
from askalike.indexer.choices import OnError
from askalike.indexer.database import StoreError
from askalike.indexer.directory import check_index, index_info, open_index, repair_index
from askalike.indexer.embedding import InProcessEngine
from askalike.indexer.index_types import IndexBuildError
from askalike.indexer.layout import IndexDirectoryError, index_lock
from askalike.indexer.manifest import read_manifest
from askalike.indexer.store import Store


def test_round_trip_finds_a_question_first(tmp_path, tiny_model, database_url):
    records = collection()
    source = write_jsonl(tmp_path / "questions.jsonl", records)
    report = index_sources(tmp_path / "index", [source], str(tiny_model), database_url, QUIET)
    assert (report.added, report.total) == (len(records), len(records))
    target = records[17]
    found = search_ids(tmp_path / "index", f"{target['subject']} {target['body']}", 5, "--db", database_url)
    assert found[0] == "q17"
    assert check_index(tmp_path / "index", database_url).ok
    info = index_info(tmp_path / "index", database_url)
    assert info["questions"] == info["vectors"] == len(records) and info["up_to_date"]


def test_metadata_is_kept_as_json(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", [{"id": 1, "title": "visa fees", "body": "how much",
                                                 "tags": ["visa", "fees"], "votes": 3}])
    index_sources(tmp_path / "index", [source], str(tiny_model), options=QUIET)
    opened = open_index(tmp_path / "index")
    try:
        (question,) = opened.store.fetch(opened.store.ids()).values()
    finally:
        opened.close()
    assert question.external_id == "1" and question.subject == "visa fees"
    assert question.metadata == {"tags": ["visa", "fees"], "votes": 3}


def test_incremental_runs_embed_only_what_changed(tmp_path, tiny_model, database_url):
    records = collection()
    source = write_jsonl(tmp_path / "questions.jsonl", records)
    index_dir = tmp_path / "index"
    index_sources(index_dir, [source], str(tiny_model), database_url, QUIET)

    again = index_sources(index_dir, [source], None, database_url, QUIET)  # model from the index
    assert (again.added, again.reembedded, again.unchanged) == (0, 0, len(records))
    assert not again.faiss_rebuilt

    records[3]["body"] = "a completely different question about camels"
    records[4]["category"] = "moved"  # metadata only: no new vector
    records.append({"id": "new", "subject": "brand new question", "body": ""})
    write_jsonl(source, records)
    changed = index_sources(index_dir, [source], None, database_url, QUIET)
    assert (changed.added, changed.reembedded, changed.metadata_updated) == (1, 1, 1)
    assert changed.total == len(records)
    assert check_index(index_dir, database_url).ok
    assert search_ids(index_dir, "a completely different question about camels", 5,
                      "--db", database_url)[0] == "q3"


def test_appending_questions_extends_the_faiss_file(tmp_path, tiny_model):
    records = collection(40)
    source = write_jsonl(tmp_path / "q.jsonl", records[:30])
    index_sources(tmp_path / "index", [source], str(tiny_model), options=QUIET)
    write_jsonl(source, records)
    report = index_sources(tmp_path / "index", [source], None, options=QUIET)
    assert report.added == 10 and not report.faiss_rebuilt and report.total == 40
    assert check_index(tmp_path / "index").ok


def test_prune_removes_questions_no_longer_in_the_sources(tmp_path, tiny_model, database_url):
    records = collection()
    first = write_jsonl(tmp_path / "a.jsonl", records[:40])
    second = write_jsonl(tmp_path / "b.jsonl", records[40:])
    index_dir = tmp_path / "index"
    index_sources(index_dir, [first, second], str(tiny_model), database_url, QUIET)
    write_jsonl(first, records[:35])

    kept = index_sources(index_dir, [first, second], None, database_url, QUIET)
    assert kept.removed == 0 and kept.total == 60  # without --prune nothing goes

    options = IndexOptions(prune=True, show_progress=False)
    pruned = index_sources(index_dir, [first], None, database_url, options)
    assert pruned.removed == 25 and pruned.total == 35
    assert sum(index_info(index_dir, database_url)["sources"].values()) == 35
    assert check_index(index_dir, database_url).ok
    assert "q36" not in search_ids(index_dir, records[36]["body"], 5, "--db", database_url)


def test_a_different_encoder_is_refused(tmp_path, tiny_model, database_url):
    source = write_jsonl(tmp_path / "q.jsonl", collection(10))
    index_sources(tmp_path / "index", [source], str(tiny_model), database_url, QUIET)
    other = make_tiny_model(tmp_path / "other", seed=1)
    with pytest.raises(StoreError, match="different encoder"):
        index_sources(tmp_path / "index", [source], str(other), database_url, QUIET)
    assert check_index(tmp_path / "index", database_url).ok


@pytest.mark.parametrize("index_type", ["hnsw", "ivf", "ivfpq"])
def test_approximate_index_types(tmp_path, tiny_model, index_type):
    records = [{"id": f"q{i}", "subject": f"{a} {t} {p} number {i}", "body": ""}
               for i, (a, t, p) in enumerate(itertools.product(ASKS * 7, TOPICS * 4, PLACES))]
    source = write_jsonl(tmp_path / "q.jsonl", records)
    options = IndexOptions(index_type=index_type, show_progress=False)
    report = index_sources(tmp_path / "index", [source], str(tiny_model), options=options)
    assert report.total == len(records) and report.index_type == index_type
    if index_type != "hnsw":
        assert report.parameters["lists"] >= 1 and report.parameters["probes"] >= 1
    manifest = read_manifest(tmp_path / "index")
    assert manifest is not None and manifest.parameters == report.parameters
    found = search_ids(tmp_path / "index", records[100]["subject"], 10)
    assert "q100" in found
    assert check_index(tmp_path / "index").ok


def test_ivfpq_on_a_tiny_collection_says_why_not(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection(20))
    with pytest.raises(IndexBuildError, match="at least"):
        index_sources(tmp_path / "index", [source], str(tiny_model),
                      options=IndexOptions(index_type="ivfpq", show_progress=False))


def test_changing_the_index_type_rebuilds(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection())
    index_sources(tmp_path / "index", [source], str(tiny_model), options=QUIET)
    report = index_sources(tmp_path / "index", [source], None,
                           options=IndexOptions(index_type="hnsw", show_progress=False))
    assert report.faiss_rebuilt and report.added == 0
    assert isinstance(faiss.downcast_index(open_index(tmp_path / "index").faiss.main.index),
                      faiss.IndexHNSWFlat)


def test_bad_row_stops_the_run_and_keeps_what_was_stored(tmp_path, tiny_model):
    records = collection(10)
    source = write_jsonl(tmp_path / "q.jsonl", records)
    index_dir = tmp_path / "index"
    index_sources(index_dir, [source], str(tiny_model), options=QUIET)
    before = stored_state(index_dir, f"sqlite:///{index_dir / 'askalike.sqlite3'}")
    write_jsonl(source, [*records[:5], {"id": "q99", "subject": "", "body": "  "}, *records[5:]])
    source.write_text(source.read_text().replace(records[0]["body"], "changed text"))
    with pytest.raises(DataError, match=r"q\.jsonl:6: question 'q99' is empty"):
        index_sources(index_dir, [source], None, options=QUIET)
    assert stored_state(index_dir, f"sqlite:///{index_dir / 'askalike.sqlite3'}") == before


def test_skip_goes_on_with_the_good_rows(tmp_path, tiny_model):
    records = collection(10)
    source = write_jsonl(tmp_path / "q.jsonl", records)
    with open(source, "a") as handle:
        handle.write('["not", "an", "object"]\n{"id": "q1", "subject": "duplicate"}\n')
    options = IndexOptions(on_error=OnError.skip, show_progress=False)
    report = index_sources(tmp_path / "index", [source], str(tiny_model), options=options)
    assert report.total == 10
    assert len(report.skipped) == 2
    assert "q.jsonl:11: expected a JSON object" in report.skipped[0]
    assert "q.jsonl:12: duplicate id 'q1' (first at line 2)" in report.skipped[1]


def test_corrupted_faiss_file_is_detected_and_repaired(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection())
    index_dir = tmp_path / "index"
    index_sources(index_dir, [source], str(tiny_model), options=QUIET)
    manifest = read_manifest(index_dir)
    assert manifest is not None
    path = index_dir / manifest.faiss_file
    path.write_bytes(path.read_bytes()[: manifest.faiss_bytes // 2])
    with pytest.raises(IndexDirectoryError, match=r"truncated or damaged.*check --repair"):
        open_index(index_dir)
    report = check_index(index_dir)
    assert not report.ok and "checksum" in report.problems[0]
    repair_index(index_dir)
    assert check_index(index_dir).ok
    assert search_ids(index_dir, collection()[5]["body"])[0] == "q5"


def test_an_unreadable_manifest_is_rebuilt_by_repair(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection())
    index_dir = tmp_path / "index"
    index_sources(index_dir, [source], str(tiny_model), options=QUIET)
    (index_dir / "manifest.json").write_text("{broken")
    with pytest.raises(IndexDirectoryError, match=r"unreadable manifest.*check --repair"):
        open_index(index_dir)
    repair_index(index_dir)
    assert check_index(index_dir).ok
    assert search_ids(index_dir, collection()[5]["body"])[0] == "q5"


def test_check_reports_an_index_behind_its_database(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection())
    index_dir = tmp_path / "index"
    index_sources(index_dir, [source], str(tiny_model), options=QUIET)
    with Store(f"sqlite:///{index_dir / 'askalike.sqlite3'}") as store:
        store.delete(store.ids()[:3])  # as an interrupted prune would have committed
    report = check_index(index_dir)
    assert not report.ok
    assert any("generation" in p for p in report.problems)
    assert any("3 indexed ids are not in the database" in p for p in report.problems)
    repair_index(index_dir)
    assert check_index(index_dir).ok and len(open_index(index_dir).faiss.ids()) == 57


def test_a_second_writer_is_refused(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection(5))
    with index_lock(tmp_path / "index"), pytest.raises(IndexDirectoryError, match="being written"):
        index_sources(tmp_path / "index", [source], str(tiny_model), options=QUIET)


def test_missing_and_empty_index_messages(tmp_path):
    with pytest.raises(IndexDirectoryError, match=r"no index here.*askalike index"):
        open_index(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(IndexDirectoryError, match=r"no manifest\.json"):
        open_index(tmp_path / "empty")


def test_vectors_are_stored_exactly(tmp_path, tiny_model):
    records = collection(8)
    source = write_jsonl(tmp_path / "q.jsonl", records)
    index_sources(tmp_path / "index", [source], str(tiny_model), options=QUIET)
    opened = open_index(tmp_path / "index")
    try:
        ids, vectors = next(opened.store.vectors(opened.manifest.encoder.dim))
        expected = load_encoder(tiny_model).encode([f"{r['subject']} {r['body']}" for r in records])
        np.testing.assert_array_equal(np.sort(ids), ids)
        np.testing.assert_allclose(vectors, expected, atol=1e-6)
    finally:
        opened.close()


def test_dry_run_says_what_a_run_would_do_and_writes_nothing(tmp_path, tiny_model):
    from askalike.indexer.build import plan_sources

    records = collection(20)
    index_dir = tmp_path / "index"
    assert plan_sources(index_dir, [write_jsonl(tmp_path / "q.jsonl", records)]).added == 20
    assert not index_dir.exists()  # a dry run creates nothing
    index_sources(index_dir, [tmp_path / "q.jsonl"], str(tiny_model), options=QUIET)
    before = stored_state(index_dir, f"sqlite:///{index_dir / 'askalike.sqlite3'}")
    files = {path.name: path.stat().st_mtime_ns for path in index_dir.iterdir()}
    records[3]["body"] = "changed text"
    write_jsonl(tmp_path / "q.jsonl", [*records[:15], {"id": "new", "subject": "new one", "body": ""}])
    report = plan_sources(index_dir, [tmp_path / "q.jsonl"], options=IndexOptions(prune=True))
    assert (report.added, report.reembedded, report.removed, report.total) == (1, 1, 5, 16)
    assert report.dry_run and report.would_remove == sorted(
        f"{(tmp_path / 'q.jsonl').resolve()}: q{i}" for i in range(15, 20))
    assert stored_state(index_dir, f"sqlite:///{index_dir / 'askalike.sqlite3'}") == before
    assert {path.name: path.stat().st_mtime_ns for path in index_dir.iterdir()} == files


def test_delete_by_the_users_ids_is_all_or_nothing(tmp_path, tiny_model):
    from askalike.indexer.build import delete_questions

    index_dir = tmp_path / "index"
    sources = [write_jsonl(tmp_path / "a.jsonl", collection(10)),
               write_jsonl(tmp_path / "b.jsonl", collection(3))]
    index_sources(index_dir, sources, str(tiny_model), options=QUIET)
    with pytest.raises(StoreError, match=r"'nope'.*nothing deleted"):
        delete_questions(index_dir, ["q5", "nope"])
    with pytest.raises(StoreError, match=r"'q1' is in 2 sources.*--source"):
        delete_questions(index_dir, ["q1"])
    assert index_info(index_dir)["questions"] == 13
    assert delete_questions(index_dir, ["q5", "q7"]) == 2  # only in a.jsonl
    assert delete_questions(index_dir, ["q1"], source="b.jsonl") == 1
    assert check_index(index_dir).ok and index_info(index_dir)["questions"] == 10
    assert "q5" not in search_ids(index_dir, collection(10)[5]["body"], 10)


def test_the_in_process_engine_encodes_the_next_chunk_while_the_last_is_stored():
    """Each chunk's vectors come back in order, as ``encode`` gives them; the next chunk is
    already encoding while the caller holds (stores) the last; a run closed early reads no
    further chunk."""
    started = [threading.Event() for _ in range(3)]

    class Recording:
        def encode(self, texts, batch_size=256, normalize=True):
            started[int(texts[0])].set()
            return np.full((len(texts), 2), float(texts[0]), dtype=np.float32)

    def chunks():
        return ([str(number)] * (number + 1) for number in range(3))

    engine = InProcessEngine(Recording(), 8)
    assert [v.tolist() for v in engine.embed(chunks())] == [[[float(n)] * 2] * (n + 1) for n in range(3)]
    for event in started:
        event.clear()
    vectors = engine.embed(chunks())
    assert next(vectors).tolist() == [[0.0, 0.0]]
    assert started[1].wait(timeout=60)  # chunk 1 encodes while the caller stores chunk 0
    vectors.close()
    assert not started[2].is_set()


def test_a_chunk_that_fails_to_encode_fails_the_run_at_its_turn():
    """The chunks before it come back; its error comes when the caller asks for its vectors; no
    chunk is read beyond the one read ahead."""
    read = []

    class FailingOnOne:
        def encode(self, texts, batch_size=256, normalize=True):
            if texts[0] == "1":
                raise ValueError("chunk 1 cannot be encoded")
            return np.zeros((len(texts), 2), dtype=np.float32)

    def chunks():
        for number in range(4):
            read.append(number)
            yield [str(number)]

    vectors = InProcessEngine(FailingOnOne(), 8).embed(chunks())
    assert next(vectors).shape == (1, 2)
    with pytest.raises(ValueError, match="chunk 1 cannot be encoded"):
        next(vectors)
    assert read == [0, 1, 2]  # chunk 2 was read ahead while chunk 1 was asked for; 3 never
