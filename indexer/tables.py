"""The tables of an index's database as this askalike reads and writes them (the schema of
``migrations.SCHEMA_VERSION``; ``indexer.migrations`` brings a database to it), and the columns
that filters compare, computed from a question's category and date."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from askalike.indexer.sources import EXTERNAL_ID_CHARS, SOURCE_CHARS, category_key

_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite only auto-increments INTEGER keys


class _Json(TypeDecorator[Any]):
    """JSON, stored as JSONB on PostgreSQL. A variant (``JSON().with_variant(JSONB, ...)``) would
    import the PostgreSQL dialect, all its drivers' modules with it, into every search."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name != "postgresql":
            return self.impl_instance
        from sqlalchemy.dialects.postgresql import JSONB  # already imported by the engine's dialect

        return JSONB()


TABLES = MetaData()

QUESTIONS = Table(
    "questions", TABLES,
    Column("id", _ID, primary_key=True),  # also the question's FAISS id
    Column("source", String(SOURCE_CHARS), nullable=False, index=True),
    Column("external_id", String(EXTERNAL_ID_CHARS), nullable=False),
    Column("subject", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("metadata", _Json(), nullable=False),
    Column("content_hash", String(64), nullable=False),
    Column("vector", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # schema 2: metadata["date"] parsed, in UTC (None: none, or not a date); metadata["category"]
    # as compared (``category_key``); the CRC-32 of the vector's bytes (None: never verified)
    Column("dated", DateTime(timezone=True), nullable=True, index=True),
    Column("category_key", Text, nullable=True),
    Column("vector_crc32", BigInteger, nullable=True),
    UniqueConstraint("source", "external_id", name="uq_questions_source_id"),
)

# key-value bookkeeping: schema version, the encoder, the vector generation, the owning index
SETTINGS = Table(
    "index_settings", TABLES,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# a person's verdicts on two stored questions (the search page's "same question", "different"):
# each question by its source and id and the text judged (its subject and body then), so that a
# question edited or deleted since keeps the verdict it had; every verdict kept, the latest of a
# pair counts
VERDICTS = Table(
    "verdicts", TABLES,
    Column("id", _ID, primary_key=True),
    Column("first_source", String(SOURCE_CHARS), nullable=False),
    Column("first_id", String(EXTERNAL_ID_CHARS), nullable=False),
    Column("first_text", Text, nullable=False),
    Column("second_source", String(SOURCE_CHARS), nullable=False),
    Column("second_id", String(EXTERNAL_ID_CHARS), nullable=False),
    Column("second_text", Text, nullable=False),
    Column("same", Boolean, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
)

# questions deleted with --exclude: later index runs of their source leave them out
EXCLUDED = Table(
    "excluded_questions", TABLES,
    Column("source", String(SOURCE_CHARS), primary_key=True),
    Column("external_id", String(EXTERNAL_ID_CHARS), primary_key=True),
)


def filter_columns(category: Any, dated: datetime | None) -> dict[str, Any]:
    """The columns filters compare; the date in UTC (SQLite would keep its local time, not its zone)."""
    return {"dated": dated.astimezone(UTC) if dated is not None else None,
            "category_key": category_key(category)}
