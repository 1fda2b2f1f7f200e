"""The question store (``indexer.store``) and its connection (``indexer.database``), on SQLite and
PostgreSQL: questions and vectors written together, the generation that tells a FAISS file is
stale, the encoder and owner an index's database is bound to, and read-only opening."""

from __future__ import annotations

import numpy as np
import pytest

from core.model_dir import EncoderIdentity
from indexer.database import StoreError, lock_timeout_s, masked_url
from indexer.sources import SourceQuestion
from indexer.store import Store

DIM = 4
ENCODER = EncoderIdentity("models/x", "abc123", DIM)


def _questions(count: int, start: int = 0) -> list[SourceQuestion]:
    return [SourceQuestion(f"q{i}", f"subject {i}", f"body {i}", {"category": "Visas"})
            for i in range(start, start + count)]


def _vectors(count: int, seed: int = 0) -> np.ndarray:
    vectors = np.random.default_rng(seed).normal(size=(count, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_questions_and_vectors_are_written_and_read_back_exactly(database_url):
    with Store(database_url) as store:
        vectors = _vectors(3)
        ids = store.write("a.csv", _questions(3), vectors, [None, None, None])
        assert store.count() == 3 and store.generation() == 1
        found = store.fetch(ids)
        assert [found[i].external_id for i in ids] == ["q0", "q1", "q2"]
        assert found[ids[0]].metadata == {"category": "Visas"}
        stored = store.vectors_of(ids, DIM)
        assert all(np.array_equal(stored[i], vectors[n]) for n, i in enumerate(ids))
        chunks = list(store.vectors(DIM, chunk=2))
        assert [len(chunk_ids) for chunk_ids, _ in chunks] == [2, 1]
        assert store.counts_by_source() == {"a.csv": 3}


def test_every_vector_change_bumps_the_generation_and_field_edits_do_not(database_url):
    with Store(database_url) as store:
        ids = store.write("a.csv", _questions(2), _vectors(2), [None, None])
        edited = SourceQuestion("q0", "subject 0", "body 0", {"category": "Cars"})
        assert store.update_fields([(ids[0], edited)]) == 1
        assert store.generation() == 1
        assert store.fetch([ids[0]])[ids[0]].metadata == {"category": "Cars"}
        store.write("a.csv", [SourceQuestion("q1", "new", "text")], _vectors(1, seed=1), [ids[1]])
        assert store.generation() == 2
        assert store.delete([ids[0]]) == 1
        assert store.generation() == 3 and store.ids() == [ids[1]]


def test_an_update_of_a_row_no_longer_stored_rolls_back(database_url):
    with Store(database_url) as store:
        ids = store.write("a.csv", _questions(1), _vectors(1), [None])
        store.delete(ids)
        with pytest.raises(StoreError, match="no longer in the database"):
            store.update_fields([(ids[0], _questions(1)[0])])


def test_the_encoder_and_the_owner_are_bound_once(database_url):
    with Store(database_url) as store:
        store.bind_encoder(ENCODER)
        store.bind_encoder(EncoderIdentity("/elsewhere/x", "abc123", DIM))  # same weights
        with pytest.raises(StoreError, match="different encoder"):
            store.bind_encoder(EncoderIdentity("models/y", "fff999", DIM))
        store.claim("index-one")
        store.require_owner("index-one")
        with pytest.raises(StoreError, match="another index directory"):
            store.claim("index-two")
        with pytest.raises(StoreError, match="another index directory"):
            store.require_owner("index-two")


def test_reading_never_creates_a_database(tmp_path):
    with pytest.raises(StoreError, match="database file is missing"):
        Store(f"sqlite:///{tmp_path / 'none.sqlite3'}", read_only=True)
    assert not (tmp_path / "none.sqlite3").exists()
    Store(f"sqlite:///{tmp_path / 'empty.sqlite3'}").close()
    with Store(f"sqlite:///{tmp_path / 'empty.sqlite3'}", read_only=True) as store:
        assert store.count() == 0


def test_urls_are_masked_and_bad_timeouts_refused(monkeypatch):
    assert "secret" not in masked_url("postgresql+psycopg://bob:secret@db.example/askalike")
    assert masked_url("not a url bob:secret@host").endswith("***@host")
    monkeypatch.setenv("ASKALIKE_DB_TIMEOUT", "2.5")
    assert lock_timeout_s() == 2.5
    for bad in ("soon", "-1"):
        monkeypatch.setenv("ASKALIKE_DB_TIMEOUT", bad)
        with pytest.raises(StoreError, match="ASKALIKE_DB_TIMEOUT"):
            lock_timeout_s()
