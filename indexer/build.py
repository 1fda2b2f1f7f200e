"""``askalike index``: sources into the store and the FAISS index, incrementally and crash-safely.

A run streams its sources, so that its memory grows with the FAISS index, not with the text of
the collection. A first pass reads and validates every source before anything is written,
keeping only ids, and compares each chunk of questions with the store (the counts, and the total
of the progress bar). A second pass reads the sources again and embeds only new or changed
questions (by content hash), committing question rows and their vectors together
``commit_every`` questions at a time, source by source, in source order: an interrupted run keeps
its finished chunks, and the re-run finds them stored and embeds the rest with the same chunk
boundaries, so it ends in the state an uninterrupted run reaches. The engine (``Engine``) only
embeds the chunks: in this process, or on a Ray cluster (``indexer.ray_engine``), with the same
chunks, vectors and writes. The FAISS and BM25 files are written last (``indexer.sync``), under
new names, and the manifest is switched to them atomically; until then searches use the previous
ones.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from core.datasets import DataError
from core.encoder import Encoder
from core.loader import load_encoder
from core.model_dir import DEFAULT_MODEL, PRETRAINED_PREFIX, EncoderIdentity, weights_fingerprint
from indexer.choices import Engine, OnError
from indexer.database import StoreError, masked_url
from indexer.directory import recorded_model, resolve_database
from indexer.embedding import Embedder, InProcessEmbedder
from indexer.layout import (
    MANIFEST_FILE,
    IndexDirectoryError,
    default_database_url,
    ensure_index_id,
    index_id,
    index_lock,
)
from indexer.manifest import read_manifest, write_manifest
from indexer.progress import index_progress
from indexer.sources import SOURCE_CHARS, SourceFile, SourceQuestion, chunked
from indexer.store import Store, source_named
from indexer.sync import sync_vector_index
from indexer.tuning import IndexBuildError, require_index_type, resolve_index_type

READ_CHUNK = 10_000  # source questions compared with the store at a time (one lookup)


@dataclass
class IndexOptions:
    index_type: str | None = None  # None: the index's own type, auto for a new index
    on_error: OnError = OnError.stop
    prune: bool = False
    batch_size: int = 256
    commit_every: int = 2048  # questions per transaction: the most an interrupt can cost
    show_progress: bool = True
    threads: int | None = None  # CPU threads for the encoder [default: all; a Ray task: 1]
    engine: Engine = Engine.in_process
    ray_address: str | None = None  # --engine ray: None joins $RAY_ADDRESS or starts a local Ray


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
    index_type_reason: str = ""  # why this type: given, the index's own, or auto by size
    parameters: dict[str, Any] = field(default_factory=dict)
    faiss_rebuilt: bool = False
    embed_seconds: float = 0.0
    dry_run: bool = False  # nothing was written: the counts say what a run would do
    would_remove: list[str] = field(default_factory=list)  # "source: id" of what --prune would remove
    model_moved_from: str = ""  # where the model was recorded before this run found it elsewhere

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


@dataclass
class _Chunk:
    """What one chunk of a source needs: questions to embed, metadata-only edits, and how many
    are stored as they are."""

    pending: list[_Pending]
    field_edits: list[tuple[int, SourceQuestion]]
    unchanged: int


def _planned(store: Store | None, source: str, questions: Iterable[SourceQuestion]) -> Iterator[_Chunk]:
    """``questions`` of ``source`` compared with the store (None: an index not created yet) a
    chunk at a time."""
    for questions_chunk in chunked(questions, READ_CHUNK):
        stored = ({} if store is None else
                  store.questions_with_ids(source, [q.external_id for q in questions_chunk]))
        chunk = _Chunk([], [], 0)
        for question in questions_chunk:
            existing = stored.get(question.external_id)
            if existing is None:
                chunk.pending.append(_Pending(source, question, None))
            elif existing.content_hash != question.content_hash:
                chunk.pending.append(_Pending(source, question, existing.id))
            elif not existing.same_fields(question):
                chunk.field_edits.append((existing.id, question))
            else:
                chunk.unchanged += 1
        yield chunk


def _survey(store: Store | None, files: list[tuple[str, SourceFile]], problems: list[DataError],
            report: IndexReport, show_progress: bool) -> None:
    """The first pass: validate every source and count what a run would do into ``report``
    (read, added, reembedded, metadata_updated, unchanged); nothing is written."""
    with index_progress(show_progress) as progress:
        task = progress.add_task("reading", total=None, unit="questions")
        for name, source in files:
            for chunk in _planned(store, name, source.check(problems)):
                report.added += sum(p.row_id is None for p in chunk.pending)
                report.reembedded += sum(p.row_id is not None for p in chunk.pending)
                report.metadata_updated += len(chunk.field_edits)
                report.unchanged += chunk.unchanged
                progress.advance(task, len(chunk.pending) + len(chunk.field_edits) + chunk.unchanged)
    report.read = sum(len(source.ids) for _, source in files)


def _chunks_to_embed(store: Store, files: list[tuple[str, SourceFile]], options: IndexOptions,
                     report: IndexReport) -> Iterator[list[_Pending]]:
    """The second pass: new and changed questions in chunks of ``commit_every`` (a chunk never
    spans two sources, so a re-run after an interruption embeds the rest in the same chunks);
    metadata-only edits are stored as they are read."""
    for name, source in files:
        waiting: list[_Pending] = []
        for chunk in _planned(store, name, source.questions()):
            report.metadata_updated += store.update_fields(chunk.field_edits)
            report.unchanged += chunk.unchanged
            waiting += chunk.pending
            while len(waiting) >= options.commit_every:
                yield waiting[: options.commit_every]
                del waiting[: options.commit_every]
        if waiting:
            yield waiting


def _embed_and_store(store: Store, embedder: Embedder, files: list[tuple[str, SourceFile]], total: int,
                     options: IndexOptions, report: IndexReport) -> None:
    """Embed each chunk and store it with its vectors in one transaction, in chunk order."""
    started = time.perf_counter()
    read_ahead: deque[list[_Pending]] = deque()  # chunks the embedder took, not stored yet

    def texts() -> Iterator[list[str]]:
        for chunk in _chunks_to_embed(store, files, options, report):
            read_ahead.append(chunk)
            yield [p.question.text for p in chunk]

    with index_progress(options.show_progress) as progress, closing(embedder.embed(texts())) as vectors:
        task = progress.add_task("embedding", total=total, unit="questions")
        for chunk_vectors in vectors:
            chunk = read_ahead.popleft()
            store.write(chunk[0].source, [p.question for p in chunk], chunk_vectors,
                        [p.row_id for p in chunk])
            report.added += sum(p.row_id is None for p in chunk)
            report.reembedded += sum(p.row_id is not None for p in chunk)
            progress.advance(task, len(chunk))
    report.embed_seconds = time.perf_counter() - started


def _engine_session(options: IndexOptions) -> AbstractContextManager[object]:
    """What the engine holds for the run: a Ray connection, or nothing."""
    if options.engine is Engine.ray:
        from indexer.ray_engine import ray_session

        return ray_session(options.ray_address)
    return nullcontext()


def _embedder(options: IndexOptions, identity: EncoderIdentity, encoder: Encoder) -> Embedder:
    if options.engine is Engine.ray:
        from indexer.ray_engine import RayEmbedder

        return RayEmbedder(identity.model, identity.fingerprint, options.batch_size, options.threads or 1)
    return InProcessEmbedder(encoder, options.batch_size)


def _stale_ids(store: Store, files: list[tuple[str, SourceFile]]) -> list[int]:
    """Stored questions that none of the sources has (what --prune removes)."""
    kept = dict(files)
    return [row_id for row_id, source, external_id in store.question_keys()
            if source not in kept or external_id not in kept[source].ids]


def _require_sources(index_dir: Path, sources: Sequence[Path], options: IndexOptions) -> None:
    """A run without sources only brings an existing index up to date (such as the new place of
    its model); it is refused for a new index, and with --prune (which would remove everything)."""
    if sources:
        return
    if options.prune:
        raise IndexBuildError("--prune without SOURCES would remove every question: name the "
                              "sources whose questions the index keeps")
    if read_manifest(index_dir) is None:
        raise IndexBuildError(f"{index_dir}: no index here yet; give the SOURCES to index")


def _source_files(sources: Sequence[Path], on_error: OnError) -> list[tuple[str, SourceFile]]:
    return [(name, SourceFile(path, on_error)) for name, path in distinct_sources(sources)]


def plan_sources(index_dir: Path, sources: Sequence[Path], database: str | None = None,
                 options: IndexOptions | None = None) -> IndexReport:
    """What ``index_sources`` would do (``--dry-run``): the sources are read and compared with
    the index, nothing is embedded or written, and nothing is created."""
    options = options or IndexOptions()
    require_index_type(options.index_type)
    _require_sources(index_dir, sources, options)
    files = _source_files(sources, options.on_error)
    problems: list[DataError] = []
    manifest = read_manifest(index_dir) if index_dir.is_dir() else None
    url = database or default_database_url(index_dir)
    report = IndexReport(str(index_dir), masked_url(url), manifest.encoder.model if manifest else "",
                         dry_run=True)
    if manifest is None:  # a new index: every question would be added
        _survey(None, files, problems, report, options.show_progress)
        report.total = report.added
    else:
        url = resolve_database(index_dir, database)
        report.database = masked_url(url)
        with Store(url, read_only=True) as store:
            store.require_owner(index_id(index_dir))
            _survey(store, files, problems, report, options.show_progress)
            if options.prune:
                stale = store.fetch(_stale_ids(store, files))
                report.would_remove = sorted(f"{q.source}: {q.external_id}" for q in stale.values())
                report.removed = len(stale)
            report.total = store.count() + report.added - report.removed
    report.skipped = [str(p) for p in problems]
    report.index_type, report.index_type_reason = resolve_index_type(
        options.index_type, manifest.index_type if manifest else None, report.total)
    return report


def delete_questions(index_dir: Path, external_ids: Sequence[str], source: str | None = None,
                     database: str | None = None) -> int:
    """Remove questions by the user's ids (from ``source`` only, a file name or path, when given)
    and update the index files. Every id must name exactly one stored question, else nothing is
    removed; returns how many were."""
    if read_manifest(index_dir) is None:  # checked before the lock, which would create the directory
        raise _nothing_to_delete(index_dir)
    with index_lock(index_dir):
        manifest = read_manifest(index_dir)
        if manifest is None:
            raise _nothing_to_delete(index_dir)
        url = resolve_database(index_dir, database)
        with Store(url) as store:
            store.require_owner(index_id(index_dir))
            # --source picks questions as search's --source does
            allowed = None if source is None else set(store.ids_matching((source_named(source),)).tolist())
            matches: dict[str, list[tuple[int, str]]] = {name: [] for name in external_ids}
            for row_id, stored_source, external_id in store.question_keys():
                if external_id in matches and (allowed is None or row_id in allowed):
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
            sync_vector_index(index_dir, store, manifest.encoder, manifest.index_type, url, manifest)
            return removed


def _nothing_to_delete(index_dir: Path) -> IndexDirectoryError:
    return IndexDirectoryError(f"{index_dir}: no index here to delete from (no {MANIFEST_FILE})")


def index_sources(index_dir: Path, sources: Sequence[Path], model: str | None,
                  database: str | None = None, options: IndexOptions | None = None) -> IndexReport:
    """Index ``sources`` into ``index_dir`` (see the module docstring for the guarantees)."""
    options = options or IndexOptions()
    require_index_type(options.index_type)  # before any work
    _require_sources(index_dir, sources, options)
    files = _source_files(sources, options.on_error)
    with index_lock(index_dir):
        database = resolve_database(index_dir, database)
        manifest_before = read_manifest(index_dir)
        this_index = ensure_index_id(index_dir)
        with Store(database) as store:
            store.claim(this_index)
            recorded = store.encoder()
            spec = model or (recorded_model(index_dir, recorded) if recorded else DEFAULT_MODEL)
            problems: list[DataError] = []
            survey = IndexReport(str(index_dir), masked_url(database), spec)
            _survey(store, files, problems, survey, options.show_progress)
            encoder = load_encoder(spec, threads=options.threads)
            identity = model_identity(spec, encoder)
            moved_from = store.bind_encoder(identity)
            report = IndexReport(str(index_dir), masked_url(database), identity.model, read=survey.read,
                                 skipped=[str(p) for p in problems], model_moved_from=moved_from or "")
            generation_before = store.generation()
            to_embed = survey.added + survey.reembedded
            if not to_embed:  # no cluster to start for nothing
                options = replace(options, engine=Engine.in_process)
            if to_embed or survey.metadata_updated:
                with _engine_session(options):  # once the sources are checked: a bad row stops the run first
                    _embed_and_store(store, _embedder(options, identity, encoder), files, to_embed, options,
                                     report)
            else:  # nothing to write: no second reading of the sources
                report.unchanged = survey.unchanged
            if options.prune:
                report.removed = store.delete(_stale_ids(store, files))
            only_added = (report.reembedded == 0 and report.removed == 0 and manifest_before is not None
                          and manifest_before.generation == generation_before)
            report.index_type, report.index_type_reason = resolve_index_type(
                options.index_type, manifest_before.index_type if manifest_before else None, store.count())
            with index_progress(options.show_progress) as progress:
                manifest, report.faiss_rebuilt = sync_vector_index(
                    index_dir, store, identity, report.index_type, database, manifest_before,
                    only_added=only_added, progress=progress)
            if manifest.encoder != identity:  # the model moved, and the files were current
                write_manifest(index_dir, replace(manifest, encoder=identity))
            report.total, report.parameters = manifest.count, manifest.parameters
            return report
