"""``askalike index``: sources into the store and the FAISS index, incrementally and crash-safely.

A run reads and validates every source before it writes anything. It then embeds only new or
changed questions (by content hash), committing question rows and their vectors together a chunk
at a time, in source order: an interrupted run keeps its finished chunks, and the re-run embeds
the rest with the same chunk boundaries, so it ends in the state an uninterrupted run reaches.
The FAISS file is written last, under a new name, and the manifest is switched to it atomically;
until then searches use the previous one.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from indexer.choices import DATABASE_ENV_VAR, INDEX_TYPES, OnError
from indexer.lexical import LexicalIndex
from indexer.manifest import (
    OWN_DATABASE,
    IndexDirectoryError,
    Manifest,
    ensure_index_id,
    faiss_file_name,
    index_id,
    index_lock,
    lexical_file_name,
    load_faiss,
    load_lexical,
    read_manifest,
    write_manifest,
)
from indexer.sources import SOURCE_CHARS, SourceQuestion, read_source
from indexer.store import (
    SQLITE_FILE,
    EncoderIdentity,
    Store,
    StoreError,
    default_database_url,
    masked_url,
)
from indexer.vector_index import (
    IndexBuildError,
    build_index,
    choose_parameters,
    configure_search,
    index_ids,
    write_index,
)
from train.datasets import DataError
from train.files import atomic_write, file_sha256
from train.inference import Encoder, load_encoder
from train.model_io import DEFAULT_MODEL, PRETRAINED_PREFIX, weights_fingerprint


@dataclass
class IndexOptions:
    index_type: str | None = None  # None: the index's own type, flat for a new index
    on_error: OnError = OnError.stop
    prune: bool = False
    batch_size: int = 256
    commit_every: int = 2048  # questions per transaction: the most an interrupt can cost
    show_progress: bool = True
    threads: int | None = None  # CPU threads for the encoder [default: all]


@dataclass
class IndexReport:
    index_dir: str
    database: str
    model: str
    read: int = 0
    added: int = 0
    reembedded: int = 0
    metadata_updated: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: list[str] = field(default_factory=list)  # problems of rows left out (--on-error skip)
    total: int = 0
    index_type: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    faiss_rebuilt: bool = False
    embed_seconds: float = 0.0
    dry_run: bool = False  # nothing was written: the counts say what a run would do
    would_remove: list[str] = field(default_factory=list)  # "source: id" of what --prune would remove

    @property
    def questions_per_s(self) -> float:
        embedded = self.added + self.reembedded
        return embedded / self.embed_seconds if self.embed_seconds else 0.0


@dataclass
class _Pending:
    source: str
    question: SourceQuestion
    row_id: int | None  # set when the question exists with other text


def source_name(path: Path) -> str:
    """How a source file is known in the store: its absolute path."""
    name = str(path.resolve())
    if len(name) > SOURCE_CHARS:
        raise DataError(path, f"the absolute path has {len(name)} characters, the index keeps at "
                              f"most {SOURCE_CHARS}: move or link the file to a shorter path")
    return name


def distinct_sources(sources: Sequence[Path]) -> list[tuple[str, Path]]:
    """(source name, path) of each source; one file named twice (by any path) is refused."""
    named: dict[str, Path] = {}
    for path in sources:
        name = source_name(path)
        if name in named:
            raise DataError(path, f"the same file as {named[name]}: name each source once")
        named[name] = path
    return list(named.items())


def model_identity(spec: str, encoder: Encoder) -> EncoderIdentity:
    model = spec if spec.startswith(PRETRAINED_PREFIX) else str(Path(spec).resolve())
    return EncoderIdentity(model, weights_fingerprint(spec), encoder.dim)


def _names_own_database(database: str, index_dir: Path) -> bool:
    """Does a manifest's database mean the index directory's own SQLite file? Yes for
    OWN_DATABASE, and for an older manifest's absolute URL of an ``askalike.sqlite3`` that is
    no longer there (the directory was moved or copied) while this directory has its own."""
    if database in (OWN_DATABASE, default_database_url(index_dir)):
        return True
    prefix = "sqlite:///"
    return (database.startswith(prefix) and database.endswith("/" + SQLITE_FILE)
            and not Path(database.removeprefix(prefix)).exists()
            and (index_dir / SQLITE_FILE).is_file())


def resolve_database(index_dir: Path, explicit: str | None) -> str:
    """--db, else the database the manifest names (when it names it whole), else SQLite in the
    index directory."""
    if explicit:
        return explicit
    manifest = read_manifest(index_dir)
    if manifest is None or _names_own_database(manifest.database, index_dir):
        return default_database_url(index_dir)
    if "***" in manifest.database:
        raise IndexDirectoryError(f"{index_dir} uses the database {manifest.database}: pass "
                                  f"its URL with the password by --db or ${DATABASE_ENV_VAR}")
    return manifest.database


def manifest_database(index_dir: Path, database: str) -> str:
    """How the manifest names ``database``: OWN_DATABASE for the directory's own SQLite file,
    else the URL with its password hidden."""
    return OWN_DATABASE if database == default_database_url(index_dir) else masked_url(database)


def _plan(store: Store, sources: list[tuple[str, list[SourceQuestion]]],
          report: IndexReport) -> tuple[list[_Pending], list[tuple[int, SourceQuestion]]]:
    pending: list[_Pending] = []
    field_edits: list[tuple[int, SourceQuestion]] = []
    for source, questions in sources:
        stored = store.questions_of(source)
        for question in questions:
            existing = stored.get(question.external_id)
            if existing is None:
                pending.append(_Pending(source, question, None))
            elif existing.content_hash != question.content_hash:
                pending.append(_Pending(source, question, existing.id))
            elif not existing.same_fields(question):
                field_edits.append((existing.id, question))
            else:
                report.unchanged += 1
    return pending, field_edits


def _progress(enabled: bool) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[rate]}"), TimeRemainingColumn(), disable=not enabled)


def _embed_and_store(store: Store, encoder: Encoder, pending: list[_Pending],
                     options: IndexOptions, report: IndexReport) -> None:
    started = time.perf_counter()
    with _progress(options.show_progress) as progress:
        task = progress.add_task("embedding", total=len(pending), rate="")
        for start in range(0, len(pending), options.commit_every):
            chunk = pending[start : start + options.commit_every]
            vectors = encoder.encode([p.question.text for p in chunk], batch_size=options.batch_size)
            # one transaction per source within the chunk (rows are keyed by source)
            for source in dict.fromkeys(p.source for p in chunk):
                part = [i for i, p in enumerate(chunk) if p.source == source]
                store.write(source, [chunk[i].question for i in part], vectors[part],
                            [chunk[i].row_id for i in part])
            done = start + len(chunk)
            rate = done / (time.perf_counter() - started)
            progress.update(task, completed=done, rate=f"{rate:,.0f} questions/s")
    report.embed_seconds = time.perf_counter() - started
    report.added = sum(p.row_id is None for p in pending)
    report.reembedded = len(pending) - report.added


def _stale_ids(store: Store, read: list[tuple[str, list[SourceQuestion]]]) -> list[int]:
    """Stored questions that none of the sources read has (what --prune removes)."""
    keep = {(source, q.external_id) for source, questions in read for q in questions}
    return [row_id for row_id, source, external_id in store.question_keys()
            if (source, external_id) not in keep]


def sync_vector_index(index_dir: Path, store: Store, encoder: EncoderIdentity, index_type: str,
                      database: str, only_added: bool = False,
                      rebuild: bool = False) -> tuple[Manifest, bool]:
    """Bring the FAISS file and the BM25 file up to the store's generation. When the manifest's
    files were current before this run and the run only added questions, the new vectors and
    texts are appended; otherwise (and always with ``rebuild``) both are rebuilt from the store.
    Returns the manifest and whether the FAISS file was rebuilt."""
    manifest = read_manifest(index_dir)
    generation, count = store.generation(), store.count()
    index = None
    if not rebuild and manifest is not None and manifest.index_type == index_type:
        try:  # the file is verified against its checksum before it is kept or extended
            index = load_faiss(index_dir, manifest)
        except IndexDirectoryError:  # missing or damaged: rebuilt from the database below
            index = None
    if index is not None and manifest.generation == generation and manifest.lexical_file:
        return manifest, False
    if index is not None and not (only_added and count <= 2 * manifest.parameters.get("chosen_for", count)):
        index = None  # changed or removed questions, or grown past what the parameters suit
    if index is not None:
        known = index_ids(index)
        for ids, vectors in store.vectors(encoder.dim, after_id=int(known.max()) if len(known) else -1):
            index.add_with_ids(vectors, ids)
        parameters = manifest.parameters
        if index.ntotal != count:  # the file did not hold what the manifest said: start over
            index = None
    rebuilt = index is None
    if index is None:
        parameters = {**choose_parameters(index_type, count, encoder.dim), "chosen_for": count}
        parts = list(store.vectors(encoder.dim))
        ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        vectors = (np.concatenate([p[1] for p in parts]) if parts
                   else np.zeros((0, encoder.dim), np.float32))
        index = build_index(index_type, parameters, encoder.dim, ids, vectors)
    configure_search(index, index_type, parameters)
    name = faiss_file_name(generation)
    digest = write_index(index, index_dir / name)
    lexical = _synced_lexical(index_dir, store, manifest if only_added and not rebuild else None)
    lexical_name = lexical_file_name(generation)
    with atomic_write(index_dir / lexical_name) as temporary:
        temporary.write_bytes(lexical.to_bytes())
    manifest = Manifest(encoder=encoder, database=manifest_database(index_dir, database),
                        index_type=index_type,
                        parameters=parameters, count=int(index.ntotal), generation=generation,
                        faiss_file=name, faiss_sha256=digest,
                        faiss_bytes=(index_dir / name).stat().st_size,
                        lexical_file=lexical_name, lexical_sha256=file_sha256(index_dir / lexical_name),
                        lexical_bytes=(index_dir / lexical_name).stat().st_size)
    write_manifest(index_dir, manifest)
    return manifest, rebuilt


def _synced_lexical(index_dir: Path, store: Store, previous: Manifest | None) -> LexicalIndex:
    """The BM25 index of the stored questions: ``previous``'s file extended with the questions
    added since (only when that run added questions alone: ids then only grow), else built anew."""
    if previous is not None and previous.lexical_file:
        try:
            lexical = load_lexical(index_dir, previous)
        except IndexDirectoryError:  # missing or damaged: built anew below
            pass
        else:
            known = int(lexical.doc_ids.max()) if len(lexical) else -1
            return lexical.updated(store.texts(after_id=known), ())
    return LexicalIndex.build(store.texts())


def plan_sources(index_dir: Path, sources: Sequence[Path], database: str | None = None,
                 options: IndexOptions | None = None) -> IndexReport:
    """What ``index_sources`` would do (``--dry-run``): the sources are read and compared with
    the index, nothing is embedded or written, and nothing is created."""
    options = options or IndexOptions()
    named = distinct_sources(sources)
    problems: list[DataError] = []
    read = [(name, read_source(path, options.on_error, problems)) for name, path in named]
    manifest = read_manifest(index_dir) if index_dir.is_dir() else None
    url = database or default_database_url(index_dir)
    report = IndexReport(str(index_dir), masked_url(url), manifest.encoder.model if manifest else "",
                         read=sum(len(q) for _, q in read), skipped=[str(p) for p in problems],
                         index_type=options.index_type or (manifest.index_type if manifest else "flat"),
                         dry_run=True)
    if manifest is None:  # a new index: every question would be added
        report.added = report.total = report.read
        return report
    url = resolve_database(index_dir, database)
    report.database = masked_url(url)
    with Store(url, read_only=True) as store:
        store.require_owner(index_id(index_dir))
        pending, field_edits = _plan(store, read, report)
        report.added = sum(p.row_id is None for p in pending)
        report.reembedded = len(pending) - report.added
        report.metadata_updated = len(field_edits)
        if options.prune:
            stale = store.fetch(_stale_ids(store, read))
            report.would_remove = sorted(f"{q.source}: {q.external_id}" for q in stale.values())
            report.removed = len(stale)
        report.total = store.count() + report.added - report.removed
    return report


def delete_questions(index_dir: Path, external_ids: Sequence[str], source: str | None = None,
                     database: str | None = None) -> int:
    """Remove questions by the user's ids (from ``source`` only, a file name or path, when given)
    and update the index files. Every id must name exactly one stored question, else nothing is
    removed; returns how many were."""
    with index_lock(index_dir):
        manifest = read_manifest(index_dir)
        if manifest is None:
            raise IndexDirectoryError(f"{index_dir}: no index here to delete from")
        url = resolve_database(index_dir, database)
        with Store(url) as store:
            store.require_owner(index_id(index_dir))
            matches: dict[str, list[tuple[int, str]]] = {name: [] for name in external_ids}
            for row_id, stored_source, external_id in store.question_keys():
                if external_id in matches and (source is None or stored_source == source
                                               or stored_source.endswith("/" + source)):
                    matches[external_id].append((row_id, stored_source))
            missing = [name for name, rows in matches.items() if not rows]
            if missing:
                raise StoreError(f"no question with id {', '.join(map(repr, missing))} in {index_dir}"
                                 + (f" from {source}" if source else "") + "; nothing deleted")
            ambiguous = {name: rows for name, rows in matches.items() if len(rows) > 1}
            if ambiguous:
                name, rows = next(iter(ambiguous.items()))
                raise StoreError(f"id {name!r} is in {len(rows)} sources ({', '.join(s for _, s in rows)}): "
                                 "name one with --source; nothing deleted")
            removed = store.delete([rows[0][0] for rows in matches.values()])
            sync_vector_index(index_dir, store, manifest.encoder, manifest.index_type, url)
            return removed


def index_sources(index_dir: Path, sources: Sequence[Path], model: str | None,
                  database: str | None = None, options: IndexOptions | None = None) -> IndexReport:
    """Index ``sources`` into ``index_dir`` (see the module docstring for the guarantees)."""
    options = options or IndexOptions()
    if options.index_type is not None and options.index_type not in INDEX_TYPES:  # before any work
        raise IndexBuildError(f"unknown index type {options.index_type!r} (known: {', '.join(INDEX_TYPES)})")
    named = distinct_sources(sources)
    with index_lock(index_dir):
        database = resolve_database(index_dir, database)
        manifest_before = read_manifest(index_dir)
        index_type = options.index_type or (manifest_before.index_type if manifest_before else "flat")
        this_index = ensure_index_id(index_dir)
        with Store(database) as store:
            store.claim(this_index)
            recorded = store.encoder()
            spec = model or (recorded.model if recorded else DEFAULT_MODEL)
            problems: list[DataError] = []
            read = [(name, read_source(path, options.on_error, problems)) for name, path in named]
            encoder = load_encoder(spec, threads=options.threads)
            identity = model_identity(spec, encoder)
            store.bind_encoder(identity)
            report = IndexReport(str(index_dir), masked_url(database), identity.model,
                                 read=sum(len(q) for _, q in read),
                                 skipped=[str(p) for p in problems], index_type=index_type)
            generation_before = store.generation()
            pending, field_edits = _plan(store, read, report)
            report.metadata_updated = store.update_fields(field_edits)
            _embed_and_store(store, encoder, pending, options, report)
            if options.prune:
                report.removed = store.delete(_stale_ids(store, read))
            only_added = (report.reembedded == 0 and report.removed == 0 and manifest_before is not None
                          and manifest_before.generation == generation_before)
            manifest, report.faiss_rebuilt = sync_vector_index(
                index_dir, store, identity, index_type, database, only_added)
            report.total, report.parameters = manifest.count, manifest.parameters
            return report
