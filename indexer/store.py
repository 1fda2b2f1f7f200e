"""The question store: questions, their vectors and the index's bookkeeping (schema version,
encoder, generation, owning index), through SQLAlchemy Core (not the ORM, whose import would cost
every one-shot search a tenth of a second); the connection itself is ``indexer.database``'s.

Vectors live in the database next to their question, so the database alone is the truth: each
write transaction keeps question and vector together, and the FAISS file is a cache that can
always be rebuilt from it (``askalike check --repair``). A ``generation`` counter, bumped by every
transaction that changes vectors, tells whether a FAISS file is up to date.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import (
    JSON,
    BigInteger,
    Column,
    Connection,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
    bindparam,
    delete,
    func,
    insert,
    inspect,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DatabaseError
from sqlalchemy.types import TypeEngine

from core.model_dir import EncoderIdentity, require_same_encoder
from core.text import join_subject_body
from indexer.database import Database, StoreError, database_reason, masked_url
from indexer.sources import EXTERNAL_ID_CHARS, SOURCE_CHARS, SourceQuestion

SCHEMA_VERSION = "1"
_ID = BigInteger().with_variant(Integer, "sqlite")  # SQLite only auto-increments INTEGER keys
_PARAMETERS_PER_QUERY = 10_000  # PostgreSQL takes at most 65,535 bound parameters a statement


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


_SCHEMA = MetaData()

_QUESTIONS = Table(
    "questions", _SCHEMA,
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
    UniqueConstraint("source", "external_id", name="uq_questions_source_id"),
)

# key-value bookkeeping: schema version, the encoder, the vector generation, the owning index
_SETTINGS = Table(
    "index_settings", _SCHEMA,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# an executemany update of whole rows: each parameter set names its row as "row_id"
_UPDATE_BY_ID = update(_QUESTIONS).where(_QUESTIONS.c.id == bindparam("row_id"))


@dataclass(frozen=True)
class StoredQuestion:
    """A question as the store holds it, without its vector."""

    id: int
    source: str
    external_id: str
    subject: str
    body: str
    metadata: dict[str, Any]
    content_hash: str

    def same_fields(self, question: SourceQuestion) -> bool:
        return (self.subject, self.body, self.metadata) == (question.subject, question.body,
                                                            question.metadata)


_QUESTION_COLUMNS = (_QUESTIONS.c.id, _QUESTIONS.c.source, _QUESTIONS.c.external_id, _QUESTIONS.c.subject,
                     _QUESTIONS.c.body, _QUESTIONS.c.metadata, _QUESTIONS.c.content_hash)


def _batches(values: Sequence[Any]) -> Iterator[list[Any]]:
    """``values`` (row ids, numpy integers included, or external ids) in lists small enough to
    bind in one statement."""
    for start in range(0, len(values), _PARAMETERS_PER_QUERY):
        yield [v if isinstance(v, str) else int(v) for v in values[start : start + _PARAMETERS_PER_QUERY]]


def source_named(name: str) -> str:
    """A source as a user names it to pick questions (``Store.ids_matching``): a path to an
    existing file means that file (resolved, as the store keeps sources by absolute path, so
    ``./q.csv`` works); anything else is matched as typed (a file name, or a whole path)."""
    return str(Path(name).resolve()) if Path(name).is_file() else name


def _day_after(text: str) -> str | None:
    """The next day of a bare ISO day ("2024-03-15" -> "2024-03-16"); None for anything else."""
    try:
        return (date.fromisoformat(text) + timedelta(days=1)).isoformat() if len(text) == 10 else None
    except ValueError:
        return None


class Store(Database):
    """The database of one index. ``read_only`` (a search, ``check``, ``index-info``) creates
    and writes nothing: a missing database is an error, not an empty index."""

    def __init__(self, url: str, busy_timeout_s: float | None = None, read_only: bool = False) -> None:
        super().__init__(url, busy_timeout_s, read_only)
        try:
            if read_only:
                self._require_schema()
            else:
                self._create_schema()
        except DatabaseError as err:
            self.engine.dispose()
            raise StoreError(f"cannot open the database {masked_url(url)}: {database_reason(err)}") from None
        except BaseException:
            self.engine.dispose()
            raise

    def _create_schema(self) -> None:
        _SCHEMA.create_all(self.engine)
        with self.transaction() as connection:
            version = self._setting(connection, "schema_version")
            if version is None:
                self._add_setting(connection, "schema_version", SCHEMA_VERSION)
            elif version != SCHEMA_VERSION:
                raise StoreError(f"{masked_url(self.url)}: schema version {version}, this "
                                 f"askalike reads {SCHEMA_VERSION}")

    def _require_schema(self) -> None:
        version = None
        if inspect(self.engine).has_table(_SETTINGS.name):
            with self.engine.connect() as connection:
                version = self._setting(connection, "schema_version")
        if version is None:
            raise StoreError(f"{masked_url(self.url)}: not an askalike database (no askalike "
                             "tables); build the index with `askalike index`")
        if version != SCHEMA_VERSION:
            raise StoreError(f"{masked_url(self.url)}: schema version {version}, this askalike "
                             f"reads {SCHEMA_VERSION}")

    # ------------------------------------------------------------------ settings

    def _setting(self, connection: Connection, key: str, for_update: bool = False) -> str | None:
        """A setting's value; ``for_update`` locks its row until the transaction ends."""
        query = select(_SETTINGS.c.value).where(_SETTINGS.c.key == key)
        return connection.scalar(query.with_for_update() if for_update else query)

    def _add_setting(self, connection: Connection, key: str, value: str) -> None:
        connection.execute(insert(_SETTINGS).values(key=key, value=value))

    def encoder(self) -> EncoderIdentity | None:
        with self.reading() as connection:
            value = self._setting(connection, "encoder")
        return EncoderIdentity(**json.loads(value)) if value else None

    def bind_encoder(self, identity: EncoderIdentity) -> str | None:
        """Record the encoder of the vectors; refuse one that differs from the recorded one. The
        same weights at another path (the model directory moved) are recorded at that path: the
        path recorded before is returned then, else None."""
        with self.transaction() as connection:
            value = self._setting(connection, "encoder", for_update=True)
            if value is None:
                self._add_setting(connection, "encoder", json.dumps(identity.__dict__))
                return None
            recorded = EncoderIdentity(**json.loads(value))
            if recorded.same_weights(identity) and recorded.model != identity.model:
                connection.execute(update(_SETTINGS).where(_SETTINGS.c.key == "encoder")
                                   .values(value=json.dumps(identity.__dict__)))
                return recorded.model
        require_same_encoder(recorded, identity, "this index",
                             f"use --model {recorded.model}, or index into a new --index directory",
                             StoreError)
        return None

    def claim(self, index_id: str) -> None:
        """Make this database the store of the index directory ``index_id``; refuse one that
        belongs to another (two indexes in one database would mix their questions)."""
        with self.transaction() as connection:
            owner = self._setting(connection, "index_id")
            if owner is None:
                self._add_setting(connection, "index_id", index_id)
        if owner is not None and owner != index_id:
            raise self._foreign(owner, index_id)

    def require_owner(self, index_id: str | None) -> None:
        """Refuse to serve another index directory's questions (None: an index from before
        databases were claimed, accepted as it is)."""
        with self.reading() as connection:
            owner = self._setting(connection, "index_id")
        if owner is not None and index_id is not None and owner != index_id:
            raise self._foreign(owner, index_id)

    def _foreign(self, owner: str, index_id: str) -> StoreError:
        return StoreError(f"{masked_url(self.url)} holds the questions of another index directory "
                          f"(index id {owner}; this directory's is {index_id}): give each index "
                          "directory its own database (--db)")

    def generation(self) -> int:
        with self.reading() as connection:
            return int(self._setting(connection, "generation") or 0)

    def _bump_generation(self, connection: Connection) -> None:
        value = self._setting(connection, "generation", for_update=True)
        if value is None:
            self._add_setting(connection, "generation", "1")
        else:
            connection.execute(update(_SETTINGS).where(_SETTINGS.c.key == "generation")
                               .values(value=str(int(value) + 1)))

    # ------------------------------------------------------------------ questions

    def count(self) -> int:
        with self.reading() as connection:
            return connection.scalar(select(func.count()).select_from(_QUESTIONS)) or 0

    def counts_by_source(self) -> dict[str, int]:
        with self.reading() as connection:
            rows = connection.execute(select(_QUESTIONS.c.source, func.count())
                                      .group_by(_QUESTIONS.c.source).order_by(_QUESTIONS.c.source))
            return {source: count for source, count in rows}

    def questions_of(self, source: str) -> dict[str, StoredQuestion]:
        """The stored questions of one source by external id."""
        with self.reading() as connection:
            rows = connection.execute(select(*_QUESTION_COLUMNS).where(_QUESTIONS.c.source == source))
            return {row.external_id: StoredQuestion(*row) for row in rows}

    def fetch(self, ids: Sequence[int]) -> dict[int, StoredQuestion]:
        """Questions by row id; ids no longer stored are simply absent."""
        found: dict[int, StoredQuestion] = {}
        with self.reading() as connection:
            for part in _batches(ids):
                rows = connection.execute(select(*_QUESTION_COLUMNS).where(_QUESTIONS.c.id.in_(part)))
                found.update((row.id, StoredQuestion(*row)) for row in rows)
        return found

    def ids_matching(self, sources: Sequence[str] = (), categories: Sequence[str] = (),
                     date_from: str | None = None, date_to: str | None = None) -> np.ndarray:
        """Ids of the questions from one of ``sources`` (a full path or a file name), in one of
        ``categories`` (any case), dated within [date_from, date_to] (ISO text; a bare day as
        ``date_to`` includes that whole day); an empty one restricts nothing. Values are bound
        parameters, never SQL."""
        condition = true()
        if sources:
            condition &= or_(*(or_(_QUESTIONS.c.source == name,
                                   _QUESTIONS.c.source.endswith("/" + name, autoescape=True))
                               for name in sources))
        if categories:
            condition &= func.lower(_QUESTIONS.c.metadata["category"].as_string()).in_(
                [category.lower() for category in categories])
        dated = _QUESTIONS.c.metadata["date"].as_string()
        if date_from:
            condition &= dated >= date_from
        if date_to:
            day_after = _day_after(date_to)
            condition &= dated < day_after if day_after else dated <= date_to
        with self.reading() as connection:
            return np.fromiter(connection.scalars(select(_QUESTIONS.c.id).where(condition)),
                               dtype=np.int64)

    def ids(self) -> list[int]:
        with self.reading() as connection:
            return list(connection.scalars(select(_QUESTIONS.c.id).order_by(_QUESTIONS.c.id)))

    def question_keys(self) -> list[tuple[int, str, str]]:
        """(row id, source, external id) of every stored question."""
        with self.reading() as connection:
            rows = connection.execute(select(_QUESTIONS.c.id, _QUESTIONS.c.source,
                                             _QUESTIONS.c.external_id))
            return [tuple(row) for row in rows]

    def vectors(self, dim: int, after_id: int = -1,
                chunk: int = 10_000) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, float32 vectors) of the stored questions with ids above ``after_id``, in id
        order, a chunk at a time."""
        with self.reading() as connection:
            result = connection.execute(select(_QUESTIONS.c.id, _QUESTIONS.c.vector)
                                        .where(_QUESTIONS.c.id > after_id).order_by(_QUESTIONS.c.id)
                                        .execution_options(yield_per=chunk))
            for part in result.partitions():
                ids = np.fromiter((row[0] for row in part), dtype=np.int64, count=len(part))
                matrix = np.frombuffer(b"".join(row[1] for row in part), dtype="<f4")
                yield ids, matrix.reshape(len(part), dim).astype(np.float32, copy=False)

    def vectors_of(self, ids: Sequence[int], dim: int) -> dict[int, np.ndarray]:
        """The stored (exact) vectors of the given questions; ids no longer stored are absent."""
        found: dict[int, np.ndarray] = {}
        with self.reading() as connection:
            for part in _batches(ids):
                rows = connection.execute(select(_QUESTIONS.c.id, _QUESTIONS.c.vector)
                                          .where(_QUESTIONS.c.id.in_(part)))
                found.update((row[0], np.frombuffer(row[1], dtype="<f4", count=dim).astype(np.float32))
                             for row in rows)
        return found

    def texts(self, after_id: int = -1, chunk: int = 10_000) -> Iterator[tuple[int, str]]:
        """(row id, embedded text: subject and body) of the stored questions with ids above
        ``after_id``, in id order, read a chunk at a time."""
        with self.reading() as connection:
            result = connection.execute(select(_QUESTIONS.c.id, _QUESTIONS.c.subject, _QUESTIONS.c.body)
                                        .where(_QUESTIONS.c.id > after_id).order_by(_QUESTIONS.c.id)
                                        .execution_options(yield_per=chunk))
            for row in result:
                yield row[0], join_subject_body(row[1], row[2])

    def write(self, source: str, questions: Sequence[SourceQuestion], vectors: np.ndarray,
              existing_ids: Sequence[int | None]) -> list[int]:
        """Insert new questions and replace changed ones, with their vectors, in one transaction.
        Returns the row ids of the inserted ones."""
        now = datetime.now(UTC)

        def values(question: SourceQuestion, vector: np.ndarray) -> dict[str, Any]:
            return {"subject": question.subject, "body": question.body, "metadata": question.metadata,
                    "content_hash": question.content_hash, "vector": vector.astype("<f4").tobytes(),
                    "updated_at": now}

        inserts, updates = [], []
        for question, vector, row_id in zip(questions, vectors, existing_ids, strict=True):
            if row_id is None:
                inserts.append({**values(question, vector), "source": source,
                                "external_id": question.external_id, "created_at": now})
            else:
                updates.append({**values(question, vector), "row_id": row_id})
        with self.transaction() as connection:
            inserted: list[int] = []
            if inserts:
                inserted = list(connection.scalars(insert(_QUESTIONS).returning(
                    _QUESTIONS.c.id, sort_by_parameter_order=True), inserts))
            if updates:
                self._update_rows(connection, updates)
            self._bump_generation(connection)
        return inserted

    def update_fields(self, changes: Iterable[tuple[int, SourceQuestion]]) -> int:
        """Metadata-only edits (the embedded text is unchanged): no new vector, same generation."""
        now = datetime.now(UTC)
        rows = [{"row_id": row_id, "subject": q.subject, "body": q.body, "metadata": q.metadata,
                 "updated_at": now} for row_id, q in changes]
        if rows:
            with self.transaction() as connection:
                self._update_rows(connection, rows)
        return len(rows)

    def _update_rows(self, connection: Connection, rows: list[dict[str, Any]]) -> None:
        """Set the given columns of the rows ``row_id`` names (all rows name the same columns);
        a row no longer stored fails the transaction rather than losing its question quietly."""
        matched = connection.execute(_UPDATE_BY_ID, rows).rowcount
        if connection.dialect.supports_sane_multi_rowcount and matched != len(rows):
            raise StoreError(f"{masked_url(self.url)}: {len(rows) - matched} of {len(rows)} questions "
                             "to update are no longer in the database (did another program change "
                             "it?); this transaction was rolled back, earlier ones are kept")

    def delete(self, ids: Sequence[int]) -> int:
        """Remove questions (and their vectors) in one transaction."""
        if not ids:
            return 0
        with self.transaction() as connection:
            for part in _batches(ids):
                connection.execute(delete(_QUESTIONS).where(_QUESTIONS.c.id.in_(part)))
            self._bump_generation(connection)
        return len(ids)

    def questions_with_ids(self, source: str, external_ids: Sequence[str]) -> dict[str, StoredQuestion]:
        """The stored questions of one source among ``external_ids``, by external id (what an
        index run compares each chunk of a source with, instead of loading the whole source)."""
        found: dict[str, StoredQuestion] = {}
        with self.reading() as connection:
            for part in _batches(external_ids):
                rows = connection.execute(select(*_QUESTION_COLUMNS).where(
                    _QUESTIONS.c.source == source, _QUESTIONS.c.external_id.in_(part)))
                found.update((row.external_id, StoredQuestion(*row)) for row in rows)
        return found
