"""The numbered schema steps (``indexer.migrations``), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
import zlib
from datetime import UTC, datetime

import numpy as np
import pytest
from sqlalchemy import MetaData, insert, select, text

from askalike.core.model_dir import EncoderIdentity
from askalike.indexer import migrations
from askalike.indexer.database import Database, StoreError
from askalike.indexer.migrations import MIGRATIONS, SCHEMA_VERSION, migrate, recorded_version
from askalike.indexer.store import Store
from askalike.indexer.tables import QUESTIONS, SETTINGS, TABLES

ENCODER = EncoderIdentity("models/x", "abc123", 4)


def _shape(database: Database) -> dict[str, tuple[set[str], set[str]]]:
    """Each table's columns and index names, as the database has them."""
    tables = MetaData()
    tables.reflect(database.engine)
    return {name: ({column.name for column in table.columns}, {index.name for index in table.indexes})
            for name, table in tables.tables.items()}


def test_the_steps_are_numbered_one_to_the_schema_version_without_gaps():
    numbers = [re.fullmatch(r"migration_(\d+)_\w+", step.__name__) for step in MIGRATIONS]
    assert [int(number[1]) if number else None for number in numbers] == list(range(1, len(MIGRATIONS) + 1))
    assert str(len(MIGRATIONS)) == SCHEMA_VERSION


def test_each_step_in_turn_brings_a_first_schema_database_to_the_tables_of_the_store(database_url, tmp_path):
    vector = np.array([0.5, 0.5, 0.5, 0.5], dtype="<f4").tobytes()
    with Database(database_url) as database:
        assert migrate(database, until=1) == "1"
        assert {"dated", "vector_crc32"}.isdisjoint(_shape(database)[QUESTIONS.name][0])
        with database.transaction() as connection:
            connection.execute(insert(SETTINGS).values(key="encoder", value=json.dumps(ENCODER.__dict__)))
            now = datetime.now(UTC)
            connection.execute(insert(QUESTIONS).values(
                source="a.csv", external_id="q", subject="s", body="b", metadata={"date": "5 Jan 2024"},
                content_hash="h", vector=vector, created_at=now, updated_at=now))
        for version in range(2, len(MIGRATIONS) + 1):
            assert migrate(database, until=version) == str(version)
            with database.reading() as connection:
                assert recorded_version(connection) == str(version)
        with database.reading() as connection:
            row = connection.execute(select(QUESTIONS.c.dated, QUESTIONS.c.vector_crc32)).one()
        assert row.vector_crc32 == zlib.crc32(vector) and row.dated.date().isoformat() == "2024-01-05"
        migrated = _shape(database)
    with Database(f"sqlite:///{tmp_path / 'made.sqlite3'}") as made:  # the tables made at once
        TABLES.create_all(made.engine)
        assert migrated == _shape(made)


def test_a_step_that_fails_leaves_the_database_at_the_version_before(database_url, monkeypatch):
    with Database(database_url) as database:
        migrate(database, until=1)

        def failing(connection):
            MIGRATIONS[1](connection)
            raise RuntimeError("interrupted")

        monkeypatch.setattr(migrations, "MIGRATIONS", (MIGRATIONS[0], failing, *MIGRATIONS[2:]))
        with pytest.raises(RuntimeError, match="interrupted"):
            migrate(database)
        with database.reading() as connection:
            assert recorded_version(connection) == "1"
        assert "dated" not in _shape(database)[QUESTIONS.name][0]


@pytest.mark.parametrize("read_only", [False, True])
def test_a_newer_schema_is_refused(database_url, read_only):
    with Store(database_url) as store, store.engine.begin() as connection:
        connection.execute(text("UPDATE index_settings SET value = '99' WHERE key = 'schema_version'"))
    with pytest.raises(StoreError, match=rf"schema version 99, this askalike reads 1 to {SCHEMA_VERSION}"):
        Store(database_url, read_only=read_only)
