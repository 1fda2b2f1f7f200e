"""Questions written one request at a time (``askalike serve``): validated as ``askalike index``
validates a row, embedded, and committed through the same path as an index run, under the same
writer lock: the rows and their vectors in one transaction (all of a request, or nothing), then
the FAISS and BM25 files brought up to the store (``indexer.sync``: extended when questions were
only added) and the manifest switched to them atomically. A searcher that follows the manifest
(``retrieval.live``) sees the write once it is switched.

The writer lock is the one an index run takes; a write that finds it held waits for it up to
``lock_wait_s`` and is then refused with ``IndexBusyError``, so that a server and a CLI run never
write at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from askalike.core.data_dir import DataError
from askalike.core.encoder import Encoder
from askalike.core.model_dir import EncoderIdentity, require_same_encoder
from askalike.indexer.build import delete_questions
from askalike.indexer.database import StoreError
from askalike.indexer.directory import resolve_database
from askalike.indexer.layout import IndexBusyError, IndexDirectoryError, index_id, index_lock
from askalike.indexer.manifest import read_manifest
from askalike.indexer.source_identity import is_file_source
from askalike.indexer.sources import SourceQuestion, dated, record_question
from askalike.indexer.store import IndexReading, Store, StoredQuestion, Verdict
from askalike.indexer.sync import sync_vector_index

API_SOURCE = "api"  # the source of questions written through the API, unless one is named
REQUEST = Path("questions")  # how errors name the request's items: "questions:2: ..."
LOCK_POLL_S = 0.05
T = TypeVar("T")
Runner = Callable[[Callable[[], T]], T]  # runs a part of a write (elsewhere) and returns its result


def _here(part: Callable[[], T]) -> T:
    return part()


@dataclass
class UpsertReport:
    added: int = 0
    reembedded: int = 0  # stored questions whose text changed
    metadata_updated: int = 0
    unchanged: int = 0
    total: int = 0  # questions in the index afterwards
    ids: list[str] = field(default_factory=list)  # the request's ids, in its order
    warnings: list[str] = field(default_factory=list)  # dates that are not dates (stored undated)

    def as_json(self) -> dict[str, Any]:
        return {"added": self.added, "reembedded": self.reembedded,
                "metadata_updated": self.metadata_updated, "unchanged": self.unchanged,
                "total": self.total, "ids": self.ids, "warnings": self.warnings}


DEFAULT_READING = IndexReading()  # an index without remembered settings


def validated_questions(records: Sequence[Any], reading: IndexReading = DEFAULT_READING,
                        order_option: str = "date_format") -> tuple[list[SourceQuestion], list[str]]:
    """``records`` (JSON objects with ``id``, ``subject`` or ``title``..., ``body`` and any
    metadata) as questions, checked as an index run checks a row and read as ``reading`` says;
    the first bad one (or a repeated id) raises a DataError naming its place (``questions:N``),
    so that a request is stored whole or not at all. Also returns the warnings for dates that
    are not dates (those questions are stored undated, as an index run stores them; an
    ambiguous one names ``order_option``, the request parameter that says how to read it)."""
    questions: list[SourceQuestion] = []
    warnings: list[str] = []
    seen: set[str] = set()
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict):
            raise DataError(REQUEST, f"expected a JSON object, got {type(record).__name__}", number)
        row = record_question(REQUEST, number, record)
        if isinstance(row, DataError):
            raise row
        if row.external_id in seen:
            raise DataError(REQUEST, f"duplicate id {row.external_id!r}", number)
        seen.add(row.external_id)
        row = replace(row, date_field=reading.date_column, category_field=reading.category_column)
        question, warning = dated(row, reading.date_order, REQUEST, order_option)
        questions.append(question)
        warnings += [warning] if warning else []
    return questions, warnings


@contextmanager
def writer_lock(index_dir: Path, wait_s: float) -> Iterator[None]:
    """The index directory's writer lock, waited for up to ``wait_s`` (an index run may hold
    it); IndexBusyError after that."""
    with ExitStack() as held:
        _waiting(lambda: held.enter_context(index_lock(index_dir)), wait_s)
        yield


def _waiting(action: Callable[[], T], wait_s: float) -> T:
    """``action`` (which takes the writer lock), tried again while the lock is held elsewhere,
    up to ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return action()
        except IndexBusyError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(LOCK_POLL_S)


def stored_source(sources: Collection[str], name: str) -> str:
    """The stored source (of ``sources``) that ``name`` means: a source's whole name, or its file
    name (as ``search --source`` matches); ``name`` itself for a source not stored yet, which must
    not be a path (a file's source is made by ``askalike index``; index runs leave the API's alone)."""
    matches = [source for source in sources if source == name or source.endswith("/" + name)]
    if len(matches) > 1 and name not in matches:
        raise StoreError(f"source {name!r} matches {len(matches)} sources: give its whole path")
    if not matches and is_file_source(name):
        raise StoreError(f"source {name!r} is no indexed file: name the API's own sources without "
                         "a leading / (index a file with `askalike index`)")
    return name if name in matches or not matches else matches[0]


def upsert_questions(index_dir: Path, questions: Sequence[SourceQuestion], encoder: Encoder,
                     identity: EncoderIdentity, source: str = API_SOURCE, database: str | None = None,
                     lock_wait_s: float = 10.0,
                     commit_guard: Callable[[bool], AbstractContextManager[object]] | None = None,
                     unwaited: Runner = _here) -> UpsertReport:
    """Add ``questions`` to ``source`` of an existing index, or replace those it has (by id):
    new and changed texts are embedded by ``encoder`` (the index's, ``identity``), metadata-only
    edits keep their vectors; all are committed in one transaction, then the index files follow.
    ``commit_guard(changes_text)`` is held from the commit until the manifest is switched (a
    server's ``LiveSearcher.committing``, exclusive where stored text changes). ``unwaited`` runs
    the parts that no search waits for (a server's thread below its searches' priority): the
    embedding, and the commit of a write that changes no stored text; the commit of one that
    does holds the searches (``commit_guard``) and runs in the caller's thread."""
    report = UpsertReport(ids=[q.external_id for q in questions])
    with writer_lock(index_dir, lock_wait_s):
        manifest = read_manifest(index_dir)
        if manifest is None:
            raise IndexDirectoryError(f"{index_dir}: no index here yet; build one with `askalike index`")
        url = resolve_database(index_dir, database)
        with Store(url) as store:
            store.require_owner(index_id(index_dir))
            recorded = store.encoder()
            if recorded is not None:
                require_same_encoder(recorded, identity, str(index_dir),
                                     "write with the index's own model", IndexDirectoryError)
            sources = store.source_names()
            source = stored_source(sources, source)
            stored = store.questions_with_ids(source, [q.external_id for q in questions])
            pending, row_ids, field_edits = [], [], []
            for question in questions:
                existing = stored.get(question.external_id)
                if existing is None or existing.content_hash != question.content_hash:
                    pending.append(question)
                    row_ids.append(None if existing is None else existing.id)
                elif not existing.same_fields(question):
                    field_edits.append((existing.id, question))
                else:
                    report.unchanged += 1
            report.added = sum(row_id is None for row_id in row_ids)
            report.warnings = _ids_of_other_sources(store, source, sources, [
                question.external_id for question, row_id in zip(pending, row_ids, strict=True)
                if row_id is None])
            report.reembedded = len(row_ids) - report.added
            report.metadata_updated = len(field_edits)
            if not pending and not field_edits:
                report.total = store.count()
                return report
            generation_before = store.generation()
            vectors = (unwaited(lambda: encoder.encode([q.text for q in pending])) if pending
                       else np.zeros((0, identity.dim), dtype=np.float32))
            changes_text = report.reembedded > 0

            def commit() -> int:
                with commit_guard(changes_text) if commit_guard else nullcontext():
                    store.write(source, pending, vectors, row_ids, field_edits)
                    only_added = not changes_text and manifest.generation == generation_before
                    written, _ = sync_vector_index(index_dir, store, manifest.encoder, manifest.index_type,
                                                   url, manifest, only_added=only_added)
                return written.count

            report.total = commit() if changes_text else unwaited(commit)
    return report


def _ids_of_other_sources(store: Store, source: str, sources: Collection[str],
                          added: Sequence[str]) -> list[str]:
    """Warnings for ids just added to ``source`` that other stored ``sources`` hold too: a write
    meant to replace one of those questions added a second one instead."""
    others = [name for name in sources if name != source] if added else []
    shared: dict[str, list[str]] = {}
    for other, external_id, _ in store.shared_ids(added, others):  # a file by its name, as search shows it
        shared.setdefault(Path(other).name if is_file_source(other) else other, []).append(external_id)
    return [f"{len(ids)} of the ids added to source {source!r} are also ids of {other!r} (e.g. "
            f"{', '.join(map(repr, ids[:3]))}): to replace those, send the questions with "
            f"source={other}; reads and deletes of these ids now need source= to pick one"
            for other, ids in shared.items()]


def delete_question(index_dir: Path, external_id: str, source: str | None = None,
                    database: str | None = None, lock_wait_s: float = 10.0,
                    commit_guard: Callable[[], AbstractContextManager[object]] | None = None) -> int:
    """``askalike delete`` of one question, waiting for the writer lock up to ``lock_wait_s``;
    ``commit_guard()`` as ``upsert_questions``'s."""
    return _waiting(lambda: delete_questions(index_dir, [external_id], source, database,
                                             commit_guard=commit_guard), lock_wait_s)


def record_verdict(index_dir: Path, first: StoredQuestion, second: StoredQuestion, same: bool,
                   database: str | None = None, lock_wait_s: float = 10.0) -> Verdict:
    """A person's verdict that two stored questions are the same question (``same``) or not,
    stored in the index's database under the writer lock (which may make the verdicts' table)."""
    with writer_lock(index_dir, lock_wait_s), Store(resolve_database(index_dir, database)) as store:
        store.require_owner(index_id(index_dir))
        return store.add_verdict(first, second, same)
