"""The question store (``indexer.store``) and its connection (``indexer.database``), on SQLite and
PostgreSQL: questions and vectors written together, the generation that tells a FAISS file is
stale, the encoder and owner an index's database is bound to, and read-only opening."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest
from helpers import as_first_schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from askalike.core.model_dir import EncoderIdentity
from askalike.indexer.database import StoreError, lock_timeout_s, masked_url
from askalike.indexer.migrations import SCHEMA_VERSION
from askalike.indexer.sources import SourceQuestion
from askalike.indexer.store import DamagedVectorsError, Store

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


def test_the_source_names_are_those_stored_sorted(database_url):
    with Store(database_url) as store:
        assert store.source_names() == []
        for source, count in [("b.csv", 2), ("api", 1), ("/x/a.csv", 3)]:
            store.write(source, _questions(count), _vectors(count), [None] * count)
        assert store.source_names() == sorted(store.counts_by_source()) == ["/x/a.csv", "api", "b.csv"]
        store.delete([question.id for question in store.questions_of("api").values()])
        assert store.source_names() == ["/x/a.csv", "b.csv"]


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


def _dated(external_id: str, when: datetime | None, category: str) -> SourceQuestion:
    metadata = {"category": category, **({"date": when.isoformat()} if when else {})}
    return SourceQuestion(external_id, f"subject {external_id}", "body", metadata, dated=when)


def test_filters_compare_parsed_dates_and_normalised_categories(database_url):
    questions = [_dated("utc", datetime(2024, 1, 5, 23, 30, tzinfo=UTC), " Visas "),
                 _dated("east", datetime(2024, 1, 6, 1, 0, tzinfo=timezone(timedelta(hours=5))), "VISAS"),
                 _dated("next", datetime(2024, 1, 6, tzinfo=UTC), "Stra\u00dfe"),
                 _dated("undated", None, "visas")]
    with Store(database_url) as store:
        ids = dict(zip([q.external_id for q in questions],
                       store.write("a.csv", questions, _vectors(4), [None] * 4), strict=True))

        def matching(**filters: object) -> set[str]:
            found = set(store.ids_matching(**filters).tolist())
            return {name for name, row_id in ids.items() if row_id in found}

        day = datetime(2024, 1, 5, tzinfo=UTC)
        assert matching(dated_from=day, dated_before=day + timedelta(days=1)) == {"utc", "east"}
        assert matching(dated_from=day + timedelta(days=1)) == {"next"}  # an undated one never passes
        assert matching(categories=["visas"]) == {"utc", "east", "undated"}
        assert matching(categories=["STRASSE "]) == {"next"}
        assert store.questions_with_ids("a.csv", ["east"])["east"].dated == questions[1].dated


def test_a_vector_that_is_not_of_unit_norm_is_never_stored(database_url):
    with Store(database_url) as store:
        vectors = _vectors(2)
        vectors[1] *= 3
        with pytest.raises(StoreError, match=r"question 'q1' of a\.csv a vector of norm 3, not 1"):
            store.write("a.csv", _questions(2), vectors, [None, None])
        vectors[1] = np.nan
        with pytest.raises(StoreError, match="not finite"):
            store.write("a.csv", _questions(2), vectors, [None, None])
        assert store.count() == 0


def _set_vector(store: Store, row_id: int, blob: bytes) -> None:
    """Write a vector's bytes behind the store's back, as damage on disk would."""
    with store.engine.begin() as connection:
        connection.execute(text("UPDATE questions SET vector = :blob WHERE id = :id"),
                           {"blob": blob, "id": row_id})


@pytest.mark.parametrize(("damage", "problem"), [
    (lambda blob: blob[:4] + b"\x00\x00\x80\x7f" + blob[8:], "its bytes do not match their checksum"),
    (lambda blob: blob[:-4], "12 bytes, a 4-dimensional vector has 16"),
])
def test_damaged_vectors_are_found_and_never_read(database_url, damage, problem):
    with Store(database_url) as store:
        ids = store.write("a.csv", _questions(3), _vectors(3), [None] * 3)
        _set_vector(store, ids[1], damage(store.vectors_of([ids[1]], DIM)[ids[1]].tobytes()))
        (damaged,) = store.damaged_vectors(DIM)
        assert (damaged.id, damaged.external_id, damaged.problem) == (ids[1], "q1", problem)
        with pytest.raises(DamagedVectorsError, match=r"1 stored vectors are damaged .*'q1' of a\.csv"):
            list(store.vectors(DIM))
        with pytest.raises(DamagedVectorsError):
            store.vectors_of(ids, DIM)
        assert len(store.vectors_of([ids[0], ids[2]], DIM)) == 2
        stored_hash = store.fetch([ids[1]])[ids[1]].content_hash
        store.replace_vectors({ids[1]: _vectors(1, seed=5)[0]}, {ids[1]: stored_hash})
        assert store.damaged_vectors(DIM) == [] and store.generation() == 2


@pytest.mark.reliability("a database of schema 1 (dates and categories as text, no vector checksums, "
                         "one vector already damaged), on SQLite and PostgreSQL",
                         "read as it is (a date or category filter refused, saying how to upgrade); "
                         "opened for writing, upgraded: dates parsed, checksums computed, the damaged "
                         "vector left without one so that check reports it")
def test_a_first_schema_database_is_read_and_upgraded(database_url):
    questions = [SourceQuestion("a", "s", "b", {"date": "5 Jan 2024", "category": " Visas"}),
                 SourceQuestion("b", "s", "b", {"date": "10/01/2024"}),
                 SourceQuestion("c", "s", "b", {})]
    with Store(database_url) as store:
        store.bind_encoder(ENCODER)
        ids = store.write("a.csv", questions, _vectors(3), [None] * 3)
        blob = store.vectors_of([ids[2]], DIM)[ids[2]] * 1e21
        _set_vector(store, ids[2], blob.astype("<f4").tobytes())
    as_first_schema(database_url)
    with Store(database_url, read_only=True) as old:
        assert old.schema_version == "1" and len(old.ids_matching(sources=["a.csv"])) == 3
        with pytest.raises(StoreError, match=r"built by an older askalike.*`askalike check --repair`"):
            old.ids_matching(dated_from=datetime(2024, 1, 1, tzinfo=UTC))
        assert [d.external_id for d in old.damaged_vectors(DIM)] == ["c"]  # norms are checked
    with Store(database_url) as store:
        assert store.schema_version == SCHEMA_VERSION
        assert store.ids_matching(dated_from=datetime(2024, 1, 5, tzinfo=UTC)).tolist() == [ids[0]]
        assert store.ids_matching(categories=["visas"]).tolist() == [ids[0]]
        (damaged,) = store.damaged_vectors(DIM)
        assert damaged.external_id == "c" and "no checksum" in damaged.problem
    with Store(database_url) as again:  # upgraded once
        assert again.schema_version == SCHEMA_VERSION and len(again.damaged_vectors(DIM)) == 1



_RNG = np.random.default_rng(3)
SPREAD = [None if i % 7 == 0 else  # dates about 2024 in zones from UTC-12 to UTC+13, some undated
          datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=int(_RNG.integers(-12, 14)))))
          + timedelta(hours=int(_RNG.integers(0, 9000))) for i in range(60)]
zones = st.sampled_from([UTC, timezone(timedelta(hours=-11)), timezone(timedelta(hours=5, minutes=45))])
# a bound anywhere, or within a day of a stored date (where a zone mistake would show)
bounds = st.one_of(
    st.datetimes(min_value=datetime(2023, 1, 1), max_value=datetime(2025, 12, 31), timezones=zones),
    st.builds(lambda when, minutes, zone: (when + timedelta(minutes=minutes)).astimezone(zone),
              st.sampled_from([when for when in SPREAD if when]), st.integers(-1440, 1440), zones))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(start=bounds, end=bounds)
def test_a_date_filter_passes_exactly_the_questions_dated_in_it(database_url, start, end):
    """Whatever the zones of the stored dates and of the bounds, [start, end) is compared as
    instants (hypothesis; the same SPREAD of stored questions for every example)."""
    with Store(database_url) as store:
        if not store.count():
            store.write("a.csv", [_dated(f"q{i}", when, "c") for i, when in enumerate(SPREAD)],
                        _vectors(len(SPREAD)), [None] * len(SPREAD))
        row_ids = {q.external_id: q.id for q in store.questions_with_ids(
            "a.csv", [f"q{i}" for i in range(len(SPREAD))]).values()}
        expected = {row_ids[f"q{i}"] for i, when in enumerate(SPREAD)
                    if when is not None and start <= when < end}
        assert set(store.ids_matching(dated_from=start, dated_before=end).tolist()) == expected


def test_category_counts_group_categories_as_filters_compare_them(database_url):
    questions = [SourceQuestion(f"q{i}", "s", "b", metadata) for i, metadata in enumerate(
        [{"category": "Visas"}, {"category": " visas "}, {"category": "Cars"}, {}, {"category": ""}])]
    with Store(database_url) as store:
        store.write("a.csv", questions, _vectors(5), [None] * 5)
        # spelt as the first question of each spells it; no category and an empty one left out
        assert store.category_counts() == {"Cars": 1, "Visas": 2}


def test_questions_deleted_with_exclude_are_named_until_readmitted(database_url):
    with Store(database_url) as store:
        ids = store.write("a.csv", _questions(3), _vectors(3), [None, None, None])
        assert store.delete(ids[:2], [("a.csv", "q0"), ("a.csv", "q1")]) == 2
        assert store.excluded_ids("a.csv", ["q0", "q1", "q2"]) == {"q0", "q1"}
        assert store.excluded_ids("b.csv", ["q0"]) == set()
        assert store.readmit(["a.csv"]) == 2 and store.excluded_ids("a.csv", ["q0", "q1"]) == set()


def test_live_ids_names_only_the_questions_still_stored(database_url):
    with Store(database_url) as store:
        ids = store.write("a.csv", _questions(3), _vectors(3), [None, None, None])
        store.delete(ids[:1])
        assert store.live_ids([*ids, max(ids) + 100]) == set(ids[1:])


def test_metadata_filters_roles_and_renamed_sources(database_url):
    """``where`` compares a metadata field trimmed and in any case (values of one key: any of
    them); a category read from another column (``category_field``) is what category filters
    compare; ``rename_source`` gives a source's questions to another name (``index --replace``)."""
    rows = [({"team": "Billing", "n": 1}, "C1"), ({"team": " billing "}, "C2"), ({"team": "Sales"}, "C3"),
            ({}, "C4")]
    questions = [SourceQuestion(external_id, "s", f"b {external_id}", metadata, category_field="team")
                 for metadata, external_id in rows]
    with Store(database_url) as store:
        ids = dict(zip([q.external_id for q in questions],
                       store.write("/a/w1.csv", questions, _vectors(4), [None] * 4), strict=True))

        def matching(**filters: object) -> set[str]:
            found = set(store.ids_matching(**filters).tolist())
            return {name for name, row_id in ids.items() if row_id in found}

        assert matching(where=[("team", "BILLING")]) == {"C1", "C2"}
        assert matching(where=[("team", "billing"), ("team", "sales")]) == {"C1", "C2", "C3"}
        assert matching(where=[("team", "billing"), ("n", "1")]) == {"C1"}
        assert matching(where=[("nothing", "x")]) == set()
        assert matching(categories=["billing"]) == {"C1", "C2"}
        assert store.category_counts() == {"Billing": 2, "Sales": 1}
        assert store.metadata_values("team") == {"Billing": 2, "Sales": 1}
        assert store.metadata_keys() == {"team", "n"}
        assert store.date_span() == (0, None, None)
        assert store.rename_source("/a/w1.csv", "/a/w2.csv") == 4
        assert store.counts_by_source() == {"/a/w2.csv": 4}
        store.remember("date_order", "dmy")
        assert store.setting("date_order") == "dmy"


def test_a_database_without_the_verdicts_table_has_none_and_gains_it_when_written(database_url):
    with Store(database_url) as store:
        first, second = store.fetch(store.write("a.csv", _questions(2), _vectors(2), [None, None])).values()
        store.add_verdict(first, second, True)
        with store.engine.begin() as connection:  # as an askalike before verdicts left it
            connection.execute(text("DROP TABLE verdicts"))
            connection.execute(text("UPDATE index_settings SET value = '2' WHERE key = 'schema_version'"))
    with Store(database_url, read_only=True) as old:
        assert old.verdicts() == []
    with Store(database_url) as store:  # opened for writing: the table is made
        assert store.schema_version == SCHEMA_VERSION
        store.add_verdict(second, first, False)
        (verdict,) = store.verdicts()
    assert (verdict.first.external_id, verdict.first.text, verdict.same) == ("q1", "subject 1 body 1", False)
