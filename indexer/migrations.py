"""The database schema as numbered steps: ``migration_N_...`` brings a database of schema N-1 to
schema N (0: an empty database). ``migrate`` runs the missing steps in order, each in a
transaction of its own that also records its number as the ``schema_version`` setting, so that
an interrupted step leaves the database at the version before it, to be done again whole.

A step is history: it says what changed then, and never changes after a release. A change to
the tables of ``indexer.tables`` is a new step at the end (and ``SCHEMA_VERSION`` its number).
Step 1 makes the tables as they were first: today's, less the columns later steps add.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Index, bindparam, inspect, select, update
from sqlalchemy.schema import CreateTable

from askalike.core.dates import DateValueError
from askalike.core.model_dir import EncoderIdentity
from askalike.indexer.database import Database, StoreError, masked_url
from askalike.indexer.sources import CATEGORY_KEY, DATE_KEY, date_of
from askalike.indexer.tables import EXCLUDED, QUESTIONS, SETTINGS, VERDICTS, filter_columns
from askalike.indexer.vector_checks import vector_problems

SCHEMA_VERSION = "3"
FIRST_SCHEMA = "1"  # without dates, categories and checksums as columns: read as it is, upgraded when written
VERSION_KEY = "schema_version"
_FILTER_COLUMNS = ("dated", "category_key", "vector_crc32")  # what step 2 adds to the questions
_CHUNK = 2000  # rows read at a time when a step fills a new column


def migration_1_questions_and_settings(connection: Connection) -> None:
    """The questions (without the columns later steps add) and the key-value settings."""
    SETTINGS.create(connection, checkfirst=True)
    if inspect(connection).has_table(QUESTIONS.name):
        return
    first = CreateTable(QUESTIONS)
    first.columns = [column for column in first.columns if column.element.name not in _FILTER_COLUMNS]
    connection.execute(first)
    for index in QUESTIONS.indexes:
        if not _on_filter_columns(index):
            index.create(connection)


def _on_filter_columns(index: Index) -> bool:
    return not set(_FILTER_COLUMNS).isdisjoint(index.columns.keys())


def migration_2_filter_columns_and_checksums(connection: Connection) -> None:
    """Dates parsed and categories normalised as columns of their own (indexed by date), and the
    CRC-32 of each vector, filled from what is stored: a date that is not one or is ambiguous is
    left null (until an index run reads its source with --date-format), and a vector that fails
    verification gets no checksum, so that ``check`` reports it."""
    present = {column["name"] for column in inspect(connection).get_columns(QUESTIONS.name)}
    for name in _FILTER_COLUMNS:
        if name not in present:
            kind = QUESTIONS.c[name].type.compile(dialect=connection.dialect)
            connection.exec_driver_sql(f"ALTER TABLE {QUESTIONS.name} ADD COLUMN {name} {kind}")
    for index in QUESTIONS.indexes:
        if _on_filter_columns(index):
            index.create(connection, checkfirst=True)
    encoder = connection.scalar(select(SETTINGS.c.value).where(SETTINGS.c.key == "encoder"))
    dim = EncoderIdentity(**json.loads(encoder)).dim if encoder else None
    fill = update(QUESTIONS).where(QUESTIONS.c.id == bindparam("row_id"))
    last = -1
    while rows := connection.execute(select(QUESTIONS.c.id, QUESTIONS.c.metadata, QUESTIONS.c.vector)
                                     .where(QUESTIONS.c.id > last).order_by(QUESTIONS.c.id)
                                     .limit(_CHUNK)).all():
        connection.execute(fill, [_filter_and_checksum(row, dim) for row in rows])
        last = rows[-1].id


def _filter_and_checksum(row: Any, dim: int | None) -> dict[str, Any]:
    """Step 2's columns of a row (id, metadata, vector)."""
    try:
        moment = date_of(row.metadata.get(DATE_KEY), None)
    except DateValueError:
        moment = None
    sound = dim is not None and vector_problems([row.vector], None, dim)[0] is None
    return {"row_id": row.id, **filter_columns(row.metadata.get(CATEGORY_KEY), moment),
            "vector_crc32": zlib.crc32(row.vector) if sound else None}


def migration_3_verdicts_and_exclusions(connection: Connection) -> None:
    """People's verdicts on pairs of questions, and the questions deleted with --exclude (tables
    that schema 2 gained later, made then whenever a database was opened for writing: a database
    may have them already)."""
    VERDICTS.create(connection, checkfirst=True)
    EXCLUDED.create(connection, checkfirst=True)


MIGRATIONS: tuple[Callable[[Connection], None], ...] = (
    migration_1_questions_and_settings,
    migration_2_filter_columns_and_checksums,
    migration_3_verdicts_and_exclusions,
)


def recorded_version(connection: Connection) -> str | None:
    """The schema version the database records; None without askalike tables or the setting."""
    if not inspect(connection).has_table(SETTINGS.name):
        return None
    return connection.scalar(select(SETTINGS.c.value).where(SETTINGS.c.key == VERSION_KEY))


def require_known(version: str, url: str) -> None:
    """A StoreError for a version this askalike does not know (a newer askalike's database)."""
    if version not in {str(number) for number in range(1, len(MIGRATIONS) + 1)}:
        raise StoreError(f"{masked_url(url)}: schema version {version}, this askalike reads "
                         f"{FIRST_SCHEMA} to {SCHEMA_VERSION}")


def migrate(database: Database, until: int | None = None) -> str:
    """Run the steps the database lacks (up to version ``until`` only, when given) in order,
    one transaction each; the schema version it is at after. SQLite's driver starts no
    transaction before a CREATE or ALTER by itself, so each step begins one explicitly."""
    target = len(MIGRATIONS) if until is None else until
    while True:
        with database.transaction() as connection:
            if connection.dialect.name == "sqlite":
                connection.exec_driver_sql("BEGIN IMMEDIATE")  # also takes the write lock first
            version = recorded_version(connection)
            if version is not None:
                require_known(version, database.url)
            done = int(version) if version is not None else 0
            if done >= target:
                return str(done)
            MIGRATIONS[done](connection)
            _record(connection, str(done + 1), first=version is None)


def _record(connection: Connection, version: str, first: bool) -> None:
    if first:
        connection.execute(SETTINGS.insert().values(key=VERSION_KEY, value=version))
    else:
        connection.execute(update(SETTINGS).where(SETTINGS.c.key == VERSION_KEY).values(value=version))
