"""The question store: questions, their vectors and the index's bookkeeping (schema version,
encoder, generation, owning index), through SQLAlchemy Core (not the ORM, whose import would cost
every one-shot search a tenth of a second); the connection itself is ``indexer.database``'s.

Vectors live in the database next to their question, so the database alone is the truth: each
write transaction keeps question and vector together, and the FAISS file is a cache that can
always be rebuilt from it (``askalike check --repair``). A ``generation`` counter, bumped by every
transaction that changes vectors, tells whether a FAISS file is up to date.

Every vector is stored with the CRC-32 of its bytes and verified whenever it is read (its length,
checksum, finiteness and unit norm): bytes damaged on disk, which SQLite's own integrity check does
not see, are reported (``DamagedVectorsError``) and never indexed or scored. The date and category
that searches filter on are columns of their own, parsed and normalised when a question is
written, so that a filter compares dates and names rather than text.

The tables are ``indexer.tables``'; opening a database for writing brings it to this askalike's
schema (``indexer.migrations``). A schema-1 database (before those columns) is read as it is
otherwise, with searches that filter on dates or categories refused until it is upgraded.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from sqlalchemy import (
    Connection,
    Select,
    bindparam,
    delete,
    func,
    insert,
    inspect,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.exc import DatabaseError

from askalike.core.dates import DateOrder
from askalike.core.model_dir import EncoderIdentity, require_same_encoder
from askalike.core.text import join_subject_body
from askalike.indexer.database import Database, StoreError, database_reason, masked_url
from askalike.indexer.migrations import FIRST_SCHEMA, migrate, recorded_version, require_known
from askalike.indexer.sources import CATEGORY_KEY, DATE_KEY, SourceQuestion, category_key, content_hash
from askalike.indexer.tables import EXCLUDED, QUESTIONS, SETTINGS, VERDICTS, filter_columns
from askalike.indexer.vector_checks import norm_problems, vector_problems

REPAIR = "run `askalike check --repair` to embed them again"
DATE_ORDER_SETTING = "date_order"  # how the index's dates were read (--date-format)
DATE_COLUMN_SETTING = "date_column"  # the column its dates were read from (--date-column)
CATEGORY_COLUMN_SETTING = "category_column"  # the column its categories were read from
_PARAMETERS_PER_QUERY = 10_000  # PostgreSQL takes at most 65,535 bound parameters a statement

# an executemany update of whole rows: each parameter set names its row as "row_id"
_UPDATE_BY_ID = update(QUESTIONS).where(QUESTIONS.c.id == bindparam("row_id"))


@dataclass(frozen=True)
class StoredQuestion:
    """A question as the store holds it, without its vector. ``dated`` and ``category_key`` are
    None in a database of schema 1, not yet upgraded."""

    id: int
    source: str
    external_id: str
    subject: str
    body: str
    metadata: dict[str, Any]
    content_hash: str
    dated: datetime | None = None
    category_key: str | None = None  # as filters compare it (read with ``dated``)

    def same_fields(self, question: SourceQuestion) -> bool:
        """Equal in all but the id and the vector (a date parsed by another --date-format, or
        read from another --date-column, differs; so does a category from another column)."""
        return (self.subject, self.body, self.metadata, self.dated, self.category_key) == (
            question.subject, question.body, question.metadata, question.dated,
            category_key(question.category))

    @property
    def date(self) -> str | None:
        """Its date, from whichever column the index run read it (``--date-column``), as ISO
        8601 in UTC: the day alone at midnight (``2024-01-05``), else the instant
        (``2024-01-05T09:30:00+00:00``); None without one."""
        if self.dated is None:
            return None
        moment = self.dated.astimezone(UTC)
        return moment.date().isoformat() if moment.time() == time() else moment.isoformat()


@dataclass(frozen=True)
class JudgedQuestion:
    """One of the two questions of a verdict: its source and id, and its text when judged."""

    source: str
    external_id: str
    text: str  # its subject and body, as they were embedded when the verdict was given

    @classmethod
    def of(cls, question: StoredQuestion) -> JudgedQuestion:
        return cls(question.source, question.external_id, join_subject_body(question.subject, question.body))


@dataclass(frozen=True)
class Verdict:
    """A person's verdict on two stored questions: the same question, or not."""

    first: JudgedQuestion
    second: JudgedQuestion
    same: bool
    recorded_at: datetime

    @property
    def pair(self) -> frozenset[tuple[str, str]]:
        """The two questions, in either order."""
        return frozenset({(self.first.source, self.first.external_id),
                          (self.second.source, self.second.external_id)})

    def as_json(self, source_label: Callable[[str], str] = str) -> dict[str, Any]:
        """The verdict as JSON; sources named by ``source_label`` (the whole stored name unless told)."""
        return {**{name: {"id": judged.external_id, "source": source_label(judged.source)}
                   for name, judged in (("first", self.first), ("second", self.second))},
                "same": self.same, "recorded_at": self.recorded_at.astimezone(UTC).isoformat()}


@dataclass(frozen=True)
class DamagedVector:
    id: int
    source: str
    external_id: str
    problem: str

    def __str__(self) -> str:
        return f"{self.external_id!r} of {self.source} ({self.problem})"


class DamagedVectorsError(StoreError):
    """Stored vectors that fail verification; they are never indexed or scored."""

    def __init__(self, damaged: Sequence[DamagedVector]) -> None:
        self.damaged = list(damaged)
        super().__init__(f"{len(damaged)} stored vectors are damaged (the first: question {damaged[0]}); "
                         f"none of them is used: {REPAIR}")


_QUESTION_COLUMNS = (QUESTIONS.c.id, QUESTIONS.c.source, QUESTIONS.c.external_id, QUESTIONS.c.subject,
                     QUESTIONS.c.body, QUESTIONS.c.metadata, QUESTIONS.c.content_hash)


def _batches(values: Sequence[Any]) -> Iterator[list[Any]]:
    """``values`` (row ids, numpy integers included, or external ids) in lists small enough to
    bind in one statement."""
    for start in range(0, len(values), _PARAMETERS_PER_QUERY):
        yield [v if isinstance(v, str) else int(v) for v in values[start : start + _PARAMETERS_PER_QUERY]]


def source_named(name: str) -> tuple[str, ...]:
    """What a source as a user names it matches (``Store.ids_matching``): the name as typed (a
    file name, a label such as ``a/c200.csv``, or a whole path: matched whole or as the end of a
    source's path) and, where it is a path to an existing file, that file (resolved, as the store
    keeps sources by absolute path, so ``./q.csv`` works)."""
    return (name, str(Path(name).resolve())) if Path(name).is_file() else (name,)


def _in_utc(moment: datetime | None) -> datetime | None:
    """A stored date as written: SQLite gives it back without its zone (UTC)."""
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


def _stored(row: Any) -> StoredQuestion:
    """A row of ``Store._whole_questions`` as a StoredQuestion."""
    return StoredQuestion(*row[:-2], _in_utc(row.dated), row.category_key)


def _vector_columns(vectors: np.ndarray, names: Sequence[str]) -> list[dict[str, Any]]:
    """The stored form (bytes and checksum) of vectors an encoder just gave; a StoreError naming
    the question (``names``) of one that is not finite and of unit norm: nothing is stored."""
    blobs = [vector.astype("<f4").tobytes() for vector in vectors]
    for name, problem in zip(names, norm_problems(blobs, vectors.shape[1]), strict=True):
        if problem is not None:
            raise StoreError(f"the model gave question {name} a vector of {problem}; nothing of its "
                             "chunk was stored (earlier chunks are kept)")
    return [{"vector": blob, "vector_crc32": zlib.crc32(blob)} for blob in blobs]


def _fields(question: SourceQuestion) -> dict[str, Any]:
    """A question's stored columns but its row id, source, hash and vector (its external id
    too: a stored id made from text the former way takes the new one)."""
    return {"external_id": question.external_id, "subject": question.subject, "body": question.body,
            "metadata": question.metadata, **filter_columns(question.category, question.dated)}


def _require_encoder(recorded: EncoderIdentity, identity: EncoderIdentity) -> None:
    fix = (f"use --model {recorded.model}, or index into a new --index directory"
           if recorded.model != identity.model else  # the model at that path changed
           "the model there has other weights (or another export) now: index into a new --index directory")
    require_same_encoder(recorded, identity, "this index", fix, StoreError)


def _metadata_text(key: str) -> Any:
    """The metadata field ``key`` of a question as text, in SQL (NULL where it has none)."""
    return QUESTIONS.c.metadata[key].as_string()


@dataclass(frozen=True)
class IndexReading:
    """How the index's runs read a question, as its store remembers it: the date format
    (``--date-format``) and the columns of the date and the category (``--date-column``,
    ``--category-column``); a question written through the API is read the same way."""

    date_order: DateOrder | None = None
    date_column: str = DATE_KEY
    category_column: str = CATEGORY_KEY

    @classmethod
    def of(cls, store: Store) -> IndexReading:
        order = store.setting(DATE_ORDER_SETTING)
        return cls(DateOrder(order) if order in DateOrder.__members__ else None,
                   store.setting(DATE_COLUMN_SETTING) or DATE_KEY,
                   store.setting(CATEGORY_COLUMN_SETTING) or CATEGORY_KEY)


class Store(Database):
    """The database of one index. ``read_only`` (a search, ``check``, ``index-info``) creates
    and writes nothing: a missing database is an error, not an empty index."""

    def __init__(self, url: str, busy_timeout_s: float | None = None, read_only: bool = False) -> None:
        super().__init__(url, busy_timeout_s, read_only)
        try:
            # read once as it is, so that a bad address or a damaged file is said as such
            with self.engine.connect() as connection:
                version = recorded_version(connection)
            self.schema_version = self._require_schema(version) if read_only else migrate(self)
        except DatabaseError as err:
            self.engine.dispose()
            raise StoreError(f"cannot open the database {masked_url(url)}: {database_reason(err)}") from None
        except BaseException:
            self.engine.dispose()
            raise

    def _require_schema(self, version: str | None) -> str:
        """The schema version of a database read as it is (one of this askalike's versions)."""
        if version is None:
            raise StoreError(f"{masked_url(self.url)}: not an askalike database (no askalike "
                             "tables); build the index with `askalike index`")
        require_known(version, self.url)
        return version

    # ------------------------------------------------------------------ settings

    def _setting(self, connection: Connection, key: str, for_update: bool = False) -> str | None:
        """A setting's value; ``for_update`` locks its row until the transaction ends."""
        query = select(SETTINGS.c.value).where(SETTINGS.c.key == key)
        return connection.scalar(query.with_for_update() if for_update else query)

    def _add_setting(self, connection: Connection, key: str, value: str) -> None:
        connection.execute(insert(SETTINGS).values(key=key, value=value))

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
                connection.execute(update(SETTINGS).where(SETTINGS.c.key == "encoder")
                                   .values(value=json.dumps(identity.__dict__)))
                return recorded.model
        _require_encoder(recorded, identity)
        return None

    def require_encoder(self, identity: EncoderIdentity) -> None:
        """Refuse, as ``bind_encoder`` does, an encoder whose weights are not the index's (a dry
        run's check: nothing is recorded)."""
        recorded = self.encoder()
        if recorded is not None:
            _require_encoder(recorded, identity)

    def index_type(self) -> str | None:
        """The FAISS index type recorded for this index (``record_index_type``); None: none yet."""
        with self.reading() as connection:
            return self._setting(connection, "index_type")

    def record_index_type(self, index_type: str) -> None:
        """Record the index type a run was asked for (``auto`` too) before its first commit, and
        the type built once it is done, so that a run interrupted in between, run again or
        repaired, builds the type asked for rather than the default."""
        with self.transaction() as connection:
            if self._setting(connection, "index_type", for_update=True) is None:
                self._add_setting(connection, "index_type", index_type)
            else:
                connection.execute(update(SETTINGS).where(SETTINGS.c.key == "index_type")
                                   .values(value=index_type))

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
            connection.execute(update(SETTINGS).where(SETTINGS.c.key == "generation")
                               .values(value=str(int(value) + 1)))

    # ------------------------------------------------------------------ questions

    def count(self) -> int:
        with self.reading() as connection:
            return connection.scalar(select(func.count()).select_from(QUESTIONS)) or 0

    def counts_by_source(self) -> dict[str, int]:
        with self.reading() as connection:
            rows = connection.execute(select(QUESTIONS.c.source, func.count())
                                      .group_by(QUESTIONS.c.source).order_by(QUESTIONS.c.source))
            return {source: count for source, count in rows}

    def source_names(self) -> list[str]:
        """The stored sources' names, sorted, by a loose index scan: one index lookup a source
        (the next name above the last) instead of a read of every row's (at 100,000 questions,
        0.01 ms against 5; a server asks at every state it opens)."""
        names = select(func.min(QUESTIONS.c.source).label("name")).cte("names", recursive=True)
        following = select(func.min(QUESTIONS.c.source)).where(QUESTIONS.c.source > names.c.name)
        names = names.union_all(select(following.scalar_subquery()).where(names.c.name.is_not(None)))
        with self.reading() as connection:
            return list(connection.scalars(select(names.c.name).where(names.c.name.is_not(None))))

    def category_counts(self) -> dict[str, int]:
        """Questions per category (what a filter offers), each category spelt as the first
        question in it spells it; a StoreError on a database of schema 1 (not yet upgraded)."""
        self._requirefilter_columns()
        with self.reading() as connection:
            key = QUESTIONS.c.category_key
            rows = connection.execute(select(func.min(QUESTIONS.c.id), func.count(), key)
                                      .where(QUESTIONS.c.category_key.is_not(None))
                                      .group_by(QUESTIONS.c.category_key)).all()
        first = self.fetch([row[0] for row in rows])

        def spelt(row_id: int, key: str) -> str:  # the metadata value the key was made from
            values = first[row_id].metadata.values() if row_id in first else ()
            return next((str(v).strip() for v in values if category_key(v) == key), key)

        return dict(sorted((spelt(i, key), count) for i, count, key in rows))

    def date_span(self) -> tuple[int, datetime | None, datetime | None]:
        """How many questions have a date (what date filters can pass), and the first and last
        of those dates (UTC)."""
        self._requirefilter_columns()
        with self.reading() as connection:
            count, first, last = connection.execute(
                select(func.count(), func.min(QUESTIONS.c.dated), func.max(QUESTIONS.c.dated))
                .where(QUESTIONS.c.dated.is_not(None))).one()
        return count, _in_utc(first), _in_utc(last)

    def metadata_values(self, key: str, limit: int = 20) -> dict[str, int]:
        """Questions per value of the metadata field ``key`` (trimmed, as ``--where`` compares
        them, spelt as the first question with it spells it), the ``limit`` commonest."""
        value = _metadata_text(key)
        with self.reading() as connection:
            rows = connection.execute(select(func.min(QUESTIONS.c.id), func.count())
                                      .where(value.is_not(None)).group_by(func.lower(func.trim(value)))
                                      .order_by(func.count().desc()).limit(limit)).all()
        first = self.fetch([row[0] for row in rows])
        return {str(first[i].metadata.get(key)).strip(): count for i, count in rows if i in first}

    def metadata_keys(self) -> set[str]:
        """Every metadata field some stored question has (what --fields and --where may name)."""
        with self.reading() as connection:
            if connection.dialect.name == "postgresql":
                query = "SELECT DISTINCT jsonb_object_keys(metadata) FROM questions"
            else:
                query = "SELECT DISTINCT j.key FROM questions, json_each(questions.metadata) AS j"
            return set(connection.exec_driver_sql(query).scalars())

    def setting(self, key: str) -> str | None:
        """A remembered setting of the index (``remember``), such as its date format."""
        with self.reading() as connection:
            return self._setting(connection, key)

    def remember(self, key: str, value: str) -> None:
        """Record a setting of the index (``date_order``: how its sources' dates were read)."""
        with self.transaction() as connection:
            if self._setting(connection, key, for_update=True) is None:
                self._add_setting(connection, key, value)
            else:
                connection.execute(update(SETTINGS).where(SETTINGS.c.key == key).values(value=value))

    @cached_property
    def _whole_questions(self) -> Select[Any]:
        """The select of StoredQuestion's columns (``_stored`` reads its rows): the date and
        category key null in schema 1."""
        first = self.schema_version == FIRST_SCHEMA
        return select(*_QUESTION_COLUMNS, null().label("dated") if first else QUESTIONS.c.dated,
                      null().label("category_key") if first else QUESTIONS.c.category_key)

    def questions_of(self, source: str) -> dict[str, StoredQuestion]:
        """The stored questions of one source by external id."""
        with self.reading() as connection:
            rows = connection.execute(self._whole_questions.where(QUESTIONS.c.source == source))
            return {row.external_id: _stored(row) for row in rows}

    @cached_property
    def _questions_by_id(self) -> Select[Any]:
        """``fetch``'s statement, built once: a search fetches its hits' rows, and building the
        statement took half of that (0.2 of 0.4 ms at 100,000 questions)."""
        return self._whole_questions.where(QUESTIONS.c.id.in_(bindparam("ids", expanding=True)))

    def fetch(self, ids: Sequence[int]) -> dict[int, StoredQuestion]:
        """Questions by row id; ids no longer stored are simply absent."""
        found: dict[int, StoredQuestion] = {}
        with self.reading() as connection:
            for part in _batches(ids):
                rows = connection.execute(self._questions_by_id, {"ids": part})
                found.update((row.id, _stored(row)) for row in rows)
        return found

    def live_ids(self, ids: Sequence[int]) -> set[int]:
        """Those of ``ids`` still stored: what a search checks of its candidates before it
        fetches the rows of the few it shows."""
        live: set[int] = set()
        with self.reading() as connection:
            for part in _batches(ids):
                live.update(connection.execute(select(QUESTIONS.c.id).where(QUESTIONS.c.id.in_(part)))
                            .scalars().all())
        return live

    def ids_matching(self, sources: Sequence[str] = (), categories: Sequence[str] = (),
                     dated_from: datetime | None = None, dated_before: datetime | None = None,
                     where: Sequence[tuple[str, str]] = ()) -> np.ndarray:
        """Ids of the questions from one of ``sources`` (a full path or a file name), in one of
        ``categories`` (trimmed, any case), dated in [dated_from, dated_before) (a question
        without a date passes no date bound), and whose metadata field KEY is VALUE for each
        (KEY, VALUE) of ``where`` (trimmed, any case; several values of one key: any of them);
        an empty one restricts nothing. Values are bound parameters, never SQL."""
        condition = true()
        if sources:
            condition &= or_(*(or_(QUESTIONS.c.source == name,
                                   QUESTIONS.c.source.endswith("/" + name, autoescape=True))
                               for name in sources))
        if categories or dated_from or dated_before:
            self._requirefilter_columns()
        if categories:
            condition &= QUESTIONS.c.category_key.in_([category_key(name) for name in categories])
        if dated_from:
            condition &= QUESTIONS.c.dated >= dated_from.astimezone(UTC)
        if dated_before:
            condition &= QUESTIONS.c.dated < dated_before.astimezone(UTC)
        wanted: dict[str, list[str]] = {}
        for key, value in where:
            wanted.setdefault(key, []).append(value.strip().lower())
        for key, values in wanted.items():
            condition &= func.lower(func.trim(_metadata_text(key))).in_(values)
        with self.reading() as connection:
            return np.fromiter(connection.scalars(select(QUESTIONS.c.id).where(condition)),
                               dtype=np.int64)

    def _requirefilter_columns(self) -> None:
        if self.schema_version == FIRST_SCHEMA:
            raise StoreError(f"{masked_url(self.url)}: this index was built by an older askalike, "
                             "which stored dates and categories as text: filtering on them needs "
                             "an upgrade: run `askalike index` with its sources, or `askalike check "
                             "--repair`")

    def ids(self) -> list[int]:
        with self.reading() as connection:
            return list(connection.scalars(select(QUESTIONS.c.id).order_by(QUESTIONS.c.id)))

    def question_keys(self) -> list[tuple[int, str, str]]:
        """(row id, source, external id) of every stored question."""
        with self.reading() as connection:
            rows = connection.execute(select(QUESTIONS.c.id, QUESTIONS.c.source,
                                             QUESTIONS.c.external_id))
            return [tuple(row) for row in rows]

    def _vector_query(self) -> Any:
        """(id, vector, checksum) of the stored questions (the checksum null in schema 1)."""
        checksum = null() if self.schema_version == FIRST_SCHEMA else QUESTIONS.c.vector_crc32
        return select(QUESTIONS.c.id, QUESTIONS.c.vector, checksum)

    def _problems(self, rows: Sequence[Any], dim: int) -> list[str | None]:
        checksums = None if self.schema_version == FIRST_SCHEMA else [row[2] for row in rows]
        return vector_problems([row[1] for row in rows], checksums, dim)

    def _damaged(self, rows: Sequence[Any], problems: Sequence[str | None]) -> list[DamagedVector]:
        """The rows whose vectors have a problem, named by source and id."""
        named = {row[0]: problem for row, problem in zip(rows, problems, strict=True) if problem}
        stored = self.fetch(list(named))
        return [DamagedVector(row_id, stored[row_id].source, stored[row_id].external_id, problem)
                if row_id in stored else DamagedVector(row_id, "(deleted since)", f"row {row_id}", problem)
                for row_id, problem in named.items()]

    def _require_sound(self, rows: Sequence[Any], dim: int) -> None:
        problems = self._problems(rows, dim)
        if any(problems):
            raise DamagedVectorsError(self._damaged(rows, problems))

    def vectors(self, dim: int, after_id: int = -1, chunk: int = 10_000,
                skip_damaged: bool = False) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(ids, float32 vectors) of the stored questions with ids above ``after_id``, in id
        order, a chunk at a time, each verified: a damaged one raises DamagedVectorsError (or,
        with ``skip_damaged``, is left out: ``check`` names those apart)."""
        with self.reading() as connection:
            result = connection.execute(self._vector_query().where(QUESTIONS.c.id > after_id)
                                        .order_by(QUESTIONS.c.id).execution_options(yield_per=chunk))
            for part in result.partitions():
                if skip_damaged:
                    problems = self._problems(part, dim)
                    part = [row for row, problem in zip(part, problems, strict=True) if problem is None]
                else:
                    self._require_sound(part, dim)
                ids = np.fromiter((row[0] for row in part), dtype=np.int64, count=len(part))
                matrix = np.frombuffer(b"".join(row[1] for row in part), dtype="<f4")
                yield ids, matrix.reshape(len(part), dim).astype(np.float32, copy=False)

    def vectors_of(self, ids: Sequence[int], dim: int) -> dict[int, np.ndarray]:
        """The stored (exact) vectors of the given questions, verified (DamagedVectorsError); ids
        no longer stored are absent."""
        found: dict[int, np.ndarray] = {}
        with self.reading() as connection:
            for part in _batches(ids):
                rows = connection.execute(self._vector_query().where(QUESTIONS.c.id.in_(part))).all()
                self._require_sound(rows, dim)
                found.update((row[0], np.frombuffer(row[1], dtype="<f4", count=dim).astype(np.float32))
                             for row in rows)
        return found

    def damaged_vectors(self, dim: int, chunk: int = 10_000) -> list[DamagedVector]:
        """Every stored vector that fails verification (what ``check`` reports and
        ``check --repair`` embeds again)."""
        damaged: list[DamagedVector] = []
        with self.reading() as connection:
            result = connection.execute(self._vector_query().execution_options(yield_per=chunk))
            for part in result.partitions():
                problems = self._problems(part, dim)
                if any(problems):
                    damaged += self._damaged(part, problems)
        return damaged

    def edited_texts(self, chunk: int = 10_000) -> list[DamagedVector]:
        """The questions whose stored text no longer hashes to their content hash: text changed
        in the database without being embedded again, so that their vector is another text's."""
        found: list[DamagedVector] = []
        with self.reading() as connection:
            result = connection.execute(select(*_QUESTION_COLUMNS).execution_options(yield_per=chunk))
            found += [DamagedVector(row.id, row.source, row.external_id, "its text was changed without "
                                    "being embedded again (it does not match its content hash)")
                      for row in result if content_hash(row.subject, row.body) != row.content_hash]
        return found

    def texts(self, after_id: int = -1, chunk: int = 10_000) -> Iterator[tuple[int, str]]:
        """(row id, embedded text: subject and body) of the stored questions with ids above
        ``after_id``, in id order, read a chunk at a time."""
        with self.reading() as connection:
            result = connection.execute(select(QUESTIONS.c.id, QUESTIONS.c.subject, QUESTIONS.c.body)
                                        .where(QUESTIONS.c.id > after_id).order_by(QUESTIONS.c.id)
                                        .execution_options(yield_per=chunk))
            for row in result:
                yield row[0], join_subject_body(row[1], row[2])

    def write(self, source: str, questions: Sequence[SourceQuestion], vectors: np.ndarray,
              existing_ids: Sequence[int | None],
              field_edits: Sequence[tuple[int, SourceQuestion]] = ()) -> list[int]:
        """Insert new questions and replace changed ones, with their vectors, and store the
        metadata-only ``field_edits`` (row id, question), in one transaction. Returns the row ids
        of the inserted ones."""
        now = datetime.now(UTC)
        stored_vectors = _vector_columns(vectors, [f"{q.external_id!r} of {source}" for q in questions])

        def values(question: SourceQuestion, vector: dict[str, Any]) -> dict[str, Any]:
            return {**_fields(question), **vector, "content_hash": question.content_hash,
                    "updated_at": now}

        inserts, updates = [], []
        for question, vector, row_id in zip(questions, stored_vectors, existing_ids, strict=True):
            if row_id is None:
                inserts.append({**values(question, vector), "source": source, "created_at": now})
            else:
                updates.append({**values(question, vector), "row_id": row_id})
        with self.transaction() as connection:
            inserted: list[int] = []
            if inserts:
                inserted = list(connection.scalars(insert(QUESTIONS).returning(
                    QUESTIONS.c.id, sort_by_parameter_order=True), inserts))
            if updates:
                self._update_rows(connection, updates)
            if field_edits:
                self._update_rows(connection, [{"row_id": row_id, **_fields(q), "updated_at": now}
                                               for row_id, q in field_edits])
            self._bump_generation(connection)
        return inserted

    def update_fields(self, changes: Iterable[tuple[int, SourceQuestion]]) -> int:
        """Metadata-only edits (the embedded text is unchanged): no new vector, same generation."""
        now = datetime.now(UTC)
        rows = [{"row_id": row_id, **_fields(q), "updated_at": now} for row_id, q in changes]
        if rows:
            with self.transaction() as connection:
                self._update_rows(connection, rows)
        return len(rows)

    def replace_vectors(self, vectors: dict[int, np.ndarray], hashes: dict[int, str]) -> None:
        """New vectors for stored questions, embedded from their stored text, with that text's
        content hash (``check --repair``'s for the vectors it cannot trust), in one transaction."""
        if not vectors:
            return
        row_ids = list(vectors)
        stored = _vector_columns(np.stack([vectors[i] for i in row_ids]), [f"row {i}" for i in row_ids])
        now = datetime.now(UTC)
        with self.transaction() as connection:
            self._update_rows(connection, [{"row_id": row_id, **columns, "content_hash": hashes[row_id],
                                            "updated_at": now}
                                           for row_id, columns in zip(row_ids, stored, strict=True)])
            self._bump_generation(connection)

    def _update_rows(self, connection: Connection, rows: list[dict[str, Any]]) -> None:
        """Set the given columns of the rows ``row_id`` names (all rows name the same columns);
        a row no longer stored fails the transaction rather than losing its question quietly."""
        matched = connection.execute(_UPDATE_BY_ID, rows).rowcount
        if connection.dialect.supports_sane_multi_rowcount and matched != len(rows):
            raise StoreError(f"{masked_url(self.url)}: {len(rows) - matched} of {len(rows)} questions "
                             "to update are no longer in the database (did another program change "
                             "it?); this transaction was rolled back, earlier ones are kept")

    def delete(self, ids: Sequence[int], excluding: Sequence[tuple[str, str]] = ()) -> int:
        """Remove questions (and their vectors) in one transaction; ``excluding``: the (source,
        external id) of those that later index runs leave out (``delete --exclude``)."""
        if not ids:
            return 0
        with self.transaction() as connection:
            for part in _batches(ids):
                connection.execute(delete(QUESTIONS).where(QUESTIONS.c.id.in_(part)))
            if excluding:
                connection.execute(insert(EXCLUDED), [{"source": source, "external_id": external_id}
                                                       for source, external_id in excluding])
            self._bump_generation(connection)
        return len(ids)

    def rename_source(self, old: str, new: str) -> int:
        """Give the questions (and the exclusions) of the source ``old`` to ``new`` (``index
        --replace``), in one transaction; how many questions."""
        if old == new:
            return 0
        with self.transaction() as connection:
            moved = connection.execute(update(QUESTIONS).where(QUESTIONS.c.source == old)
                                       .values(source=new)).rowcount
            if inspect(connection).has_table(EXCLUDED.name):
                connection.execute(update(EXCLUDED).where(EXCLUDED.c.source == old).values(source=new))
        return moved

    def readmit(self, sources: Sequence[str]) -> int:
        """Forget the exclusions of ``sources`` (their questions are indexed again); how many."""
        if not sources or not inspect(self.engine).has_table(EXCLUDED.name):
            return 0
        with self.transaction() as connection:
            return connection.execute(delete(EXCLUDED).where(EXCLUDED.c.source.in_(list(sources)))).rowcount

    def excluded_ids(self, source: str, external_ids: Sequence[str]) -> set[str]:
        """Those of ``external_ids`` that were deleted from ``source`` with --exclude (none in a
        database from before exclusions, opened read-only)."""
        if not inspect(self.engine).has_table(EXCLUDED.name):
            return set()
        found: set[str] = set()
        with self.reading() as connection:
            for part in _batches(external_ids):
                found.update(connection.scalars(select(EXCLUDED.c.external_id).where(
                    EXCLUDED.c.source == source, EXCLUDED.c.external_id.in_(part))))
        return found

    def questions_with_ids(self, source: str, external_ids: Sequence[str]) -> dict[str, StoredQuestion]:
        """The stored questions of one source among ``external_ids``, by external id (what an
        index run compares each chunk of a source with, instead of loading the whole source)."""
        found: dict[str, StoredQuestion] = {}
        with self.reading() as connection:
            for part in _batches(external_ids):
                rows = connection.execute(self._whole_questions.where(
                    QUESTIONS.c.source == source, QUESTIONS.c.external_id.in_(part)))
                found.update((row.external_id, _stored(row)) for row in rows)
        return found

    def shared_ids(self, external_ids: Sequence[str], among: Collection[str]) -> list[tuple[str, str, str]]:
        """(source, external id, content hash) of the stored questions of the sources ``among``
        that have one of ``external_ids``."""
        found: list[tuple[str, str, str]] = []
        if not among:
            return found
        with self.reading() as connection:
            for part in _batches(external_ids):
                rows = connection.execute(select(QUESTIONS.c.source, QUESTIONS.c.external_id,
                                                 QUESTIONS.c.content_hash).where(
                    QUESTIONS.c.source.in_(list(among)), QUESTIONS.c.external_id.in_(part)))
                found += [tuple(row) for row in rows]
        return found

    # ------------------------------------------------------------------ verdicts

    def add_verdict(self, first: StoredQuestion, second: StoredQuestion, same: bool) -> Verdict:
        """Record that ``first`` and ``second`` are the same question (``same``), or not."""
        verdict = Verdict(JudgedQuestion.of(first), JudgedQuestion.of(second), same, datetime.now(UTC))
        with self.transaction() as connection:
            connection.execute(insert(VERDICTS).values(
                first_source=verdict.first.source, first_id=verdict.first.external_id,
                first_text=verdict.first.text, second_source=verdict.second.source,
                second_id=verdict.second.external_id, second_text=verdict.second.text,
                same=same, recorded_at=verdict.recorded_at))
        return verdict

    def verdicts(self) -> list[Verdict]:
        """The latest verdict on each pair of questions (given in either order), in the order
        they were given; none where no askalike that records verdicts has written the database."""
        if not inspect(self.engine).has_table(VERDICTS.name):
            return []
        latest: dict[frozenset[tuple[str, str]], Verdict] = {}
        with self.reading() as connection:
            for row in connection.execute(select(VERDICTS).order_by(VERDICTS.c.id)):
                verdict = Verdict(JudgedQuestion(row.first_source, row.first_id, row.first_text),
                                  JudgedQuestion(row.second_source, row.second_id, row.second_text),
                                  row.same, _in_utc(row.recorded_at))
                latest.pop(verdict.pair, None)  # the later verdict counts, listed where it was given
                latest[verdict.pair] = verdict
        return list(latest.values())
