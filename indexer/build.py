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

``--prune`` decides what it removes after the first pass, before anything is written: a run whose
sources hold no question removes nothing (it is refused), and one that would remove more than
``PRUNE_CONFIRM_SHARE`` of the index asks first (``IndexOptions.confirm_prune``), and is refused
where nobody can answer.
"""

from __future__ import annotations

import shutil
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from askalike.core.datasets import DataError
from askalike.core.dates import DateOrder
from askalike.core.encoder import Encoder
from askalike.core.errors import UserError
from askalike.core.loader import load_encoder
from askalike.core.model_dir import (
    PRETRAINED_PREFIX,
    EncoderIdentity,
    weights_fingerprint,
)
from askalike.indexer.choices import Engine, OnError
from askalike.indexer.database import StoreError, masked_url
from askalike.indexer.directory import model_for_index, resolve_database, resolved_index_type
from askalike.indexer.embedding import EmbeddingEngine, InProcessEngine
from askalike.indexer.index_type_choice import require_index_type, resolve_index_type
from askalike.indexer.index_types import IndexBuildError
from askalike.indexer.layout import (
    MANIFEST_FILE,
    IndexDirectoryError,
    default_database_url,
    ensure_index_id,
    holds_index,
    index_id,
    index_lock,
    not_an_index,
)
from askalike.indexer.manifest import read_manifest, write_manifest
from askalike.indexer.progress import index_progress
from askalike.indexer.source_identity import (
    Overlaps,
    aliased,
    distinct_sources,
    is_file_source,
    source_labels,
)
from askalike.indexer.sources import (
    CATEGORY_KEY,
    DATE_KEY,
    DATE_WARNINGS_KEPT,
    Columns,
    SourceFile,
    SourceQuestion,
    bad_rows,
    chunked,
)
from askalike.indexer.store import (
    CATEGORY_COLUMN_SETTING,
    DATE_COLUMN_SETTING,
    DATE_ORDER_SETTING,
    Store,
    source_named,
)
from askalike.indexer.sync import sync_vector_index

READ_CHUNK = 10_000  # source questions compared with the store at a time (one lookup)
PRUNE_CONFIRM_SHARE = 0.5  # a --prune that removes more of the index asks first


@dataclass
class IndexOptions:
    index_type: str | None = None  # None: the index's own type, auto for a new index
    on_error: OnError = OnError.stop
    prune: bool = False
    batch_size: int = 256
    commit_every: int = 2048  # questions per transaction: an interrupt loses two chunks' embedding at most
    show_progress: bool = True
    threads: int | None = None  # CPU threads for the encoder [default: all; a Ray task: 1]
    # the encoder of the run's model (the command's --device choice, e.g. torch on a GPU); it
    # must compute what load_encoder's does. None: load_encoder with ``threads``
    encoder_loader: Callable[[str], Encoder] | None = None
    engine: Engine = Engine.in_process
    ray_address: str | None = None  # --engine ray: None joins $RAY_ADDRESS or starts a local Ray
    date_order: DateOrder | None = None  # how to read 10/01/2024; None: only unambiguous dates
    columns: Columns = field(default_factory=Columns)  # which CSV/TSV/JSONL columns are what
    readmit: bool = False  # index again the questions of the sources deleted with --exclude
    # --replace: the stored source (file name or path) whose questions the one source of the run
    # takes over (kept where unchanged, embedded again where edited, removed where it lacks them)
    replaces: str | None = None
    # asked (with what --prune would remove) before a prune of more than PRUNE_CONFIRM_SHARE of
    # the index; None: nobody to ask, so such a prune is refused
    confirm_prune: Callable[[str], bool] | None = None


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
    excluded: int = 0  # left out: deleted from their source with --exclude
    renamed: int = 0  # ids made from text by an older askalike, given their new ids (not added again)
    sources: dict[str, int] = field(default_factory=dict)  # questions read from each source
    skipped: list[str] = field(default_factory=list)  # problems of rows left out (--on-error skip)
    warnings: list[str] = field(default_factory=list)  # sources and dates that may not be what was meant
    undated: int = 0  # questions whose date is not a date (the first DATE_WARNINGS_KEPT are in warnings)
    total: int = 0
    index_type: str = ""
    index_type_reason: str = ""  # why this type: given, the index's own, or auto by size
    parameters: dict[str, Any] = field(default_factory=dict)
    faiss_rebuilt: bool = False
    embed_seconds: float = 0.0
    dry_run: bool = False  # nothing was written: the counts say what a run would do
    would_remove: list[str] = field(default_factory=list)  # "source: id" of what --prune would remove
    model_moved_from: str = ""  # where the model was recorded before this run found it elsewhere
    replaced: str = ""  # the stored source that the run's source replaced (--replace)

    @property
    def questions_per_s(self) -> float:
        embedded = self.added + self.reembedded
        return embedded / self.embed_seconds if self.embed_seconds else 0.0


@dataclass
class _Pending:
    source: str
    question: SourceQuestion
    row_id: int | None  # set when the question exists with other text


def model_identity(spec: str, encoder: Encoder) -> EncoderIdentity:
    model = spec if spec.startswith(PRETRAINED_PREFIX) else str(Path(spec).resolve())
    return EncoderIdentity(model, weights_fingerprint(spec), encoder.dim)


@dataclass
class _Chunk:
    """What one chunk of a source needs: questions to embed, metadata-only edits, stored ids
    made from text the former way to renew (``renames``: nothing else changed; ``renamed``
    counts them all), and how many are stored as they are."""

    pending: list[_Pending]
    field_edits: list[tuple[int, SourceQuestion]]
    unchanged: int
    excluded: int = 0
    renames: list[tuple[int, SourceQuestion]] = field(default_factory=list)
    renamed: int = 0


def _plan(store: Store | None, source: str, questions: list[SourceQuestion], readmit: bool = False) -> _Chunk:
    """A chunk of ``source``'s questions compared with the store (None: an index not created yet);
    those deleted with --exclude are left out, unless ``readmit``. A question whose id is made
    from its text and stored under the id an older askalike made (``former_id``) is that stored
    question, which takes the new id."""
    ids = [q.external_id for q in questions] + [q.former_id for q in questions if q.former_id]
    stored = {} if store is None else store.questions_with_ids(source, ids)
    excluded = set() if store is None or readmit else store.excluded_ids(source, ids)
    chunk = _Chunk([], [], 0)
    for question in questions:
        existing = stored.get(question.external_id)
        renamed = existing is None and question.former_id in stored
        if renamed:
            existing = stored[question.former_id]
            chunk.renamed += 1
        if {question.external_id, question.former_id} & excluded:
            chunk.excluded += 1
        elif existing is None:
            chunk.pending.append(_Pending(source, question, None))
        elif existing.content_hash != question.content_hash:
            chunk.pending.append(_Pending(source, question, existing.id))
        elif not existing.same_fields(question):
            chunk.field_edits.append((existing.id, question))
        elif renamed:
            chunk.renames.append((existing.id, question))
        else:
            chunk.unchanged += 1
    return chunk


def _planned(store: Store, source: str, questions: Iterable[SourceQuestion],
             readmit: bool) -> Iterator[_Chunk]:
    """``questions`` of ``source`` compared with the store a chunk at a time."""
    return (_plan(store, source, chunk, readmit) for chunk in chunked(questions, READ_CHUNK))


def _survey(store: Store | None, files: list[tuple[str, SourceFile]], problems: list[DataError],
            report: IndexReport, options: IndexOptions) -> list[tuple[str, SourceFile]]:
    """The first pass: validate every source and count what a run would do into ``report``
    (read, added, reembedded, metadata_updated, unchanged, warnings, undated); nothing is written.
    Returns ``files`` with a path to a stored source's file named as that source."""
    stored = store.source_names() if store is not None else []
    remembered = store.setting(DATE_ORDER_SETTING) if store is not None else None
    if options.date_order is None and remembered in DateOrder.__members__:
        for _, source in files:  # the index's dates are read as its first runs read them
            source.date_order = DateOrder(remembered)
    files = aliased(files, stored, report.warnings)
    if options.replaces is not None:
        files = _replacing(files, stored, options.replaces)
    # a prune removes the files that the run does not name; the API's sources stay
    kept = [name for name in stored if not is_file_source(name)] if options.prune else stored
    overlaps = Overlaps(store, [name for name, _ in files], kept)
    failures: list[DataError] = []  # --on-error stop: every source's bad rows, reported together
    with index_progress(options.show_progress) as progress:
        task = progress.add_task("reading", total=None, unit="questions")
        for name, source in files:
            try:
                for questions in chunked(source.check(problems), READ_CHUNK):
                    overlaps.add(name, questions)
                    chunk = _plan(store, name, questions, options.readmit)
                    report.added += sum(p.row_id is None for p in chunk.pending)
                    report.reembedded += sum(p.row_id is not None for p in chunk.pending)
                    report.metadata_updated += len(chunk.field_edits)
                    report.unchanged += chunk.unchanged
                    report.excluded += chunk.excluded
                    report.renamed += chunk.renamed
                    progress.advance(task, len(questions))
            except DataError as err:
                if options.on_error is OnError.skip:
                    raise
                failures.append(err)
    if failures:
        raise bad_rows(failures)
    report.sources = {name: len(source.ids) for name, source in files}
    report.read = sum(report.sources.values())
    report.warnings += (overlaps.warnings(files) + _made_id_warnings(files) + _renamed_warnings(report)
                        + _date_warnings(files))
    report.undated = sum(source.undated for _, source in files)
    return files


def _replacing(files: list[tuple[str, SourceFile]], stored: list[str],
               replaces: str) -> list[tuple[str, SourceFile]]:
    """The one source of a ``--replace`` run named as the stored source it replaces (matched as
    search's --source matches), so that the run compares its questions with that source's."""
    if len(files) != 1:
        raise IndexBuildError(f"--replace {replaces}: give exactly one SOURCE to take its place "
                              f"(got {len(files)})")
    name, source = files[0]
    wanted = source_named(replaces)
    matches = [other for other in stored
               if any(other == one or other.endswith("/" + one) for one in wanted)]
    if not matches:
        labels = source_labels(dict.fromkeys(stored, 0))
        raise IndexBuildError(f"--replace {replaces}: the index has no such source (its sources: "
                              f"{', '.join(labels[other] for other in stored) or 'none'}); nothing was "
                              "changed")
    if len(matches) > 1:
        raise IndexBuildError(f"--replace {replaces}: {len(matches)} sources match ({', '.join(matches)}): "
                              "give its whole path; nothing was changed")
    if name != matches[0] and name in stored:
        raise IndexBuildError(f"--replace {replaces}: {name} is indexed already, next to {matches[0]}: "
                              f"index {source.path} alone with --prune to keep only its questions; "
                              "nothing was changed")
    return [(matches[0], source)]


def _replaced_ids(store: Store, files: list[tuple[str, SourceFile]]) -> list[int]:
    """The questions of the replaced source (the run's one, as ``_replacing`` named it) that its
    new file lacks: a --replace removes them."""
    (name, source), = files
    return [row_id for row_id, stored, external_id in store.question_keys()
            if stored == name and not source.holds(external_id)]


def _made_id_warnings(files: list[tuple[str, SourceFile]]) -> list[str]:
    """Name the CSV/TSV sources without an id column, whose ids are made from their text."""
    return [f"{source.path}: no 'id' column, so each question's id is made from its text (the same "
            "on every run; an edited question gets a new one, which --prune tidies up); name the id "
            "column with --id-column" for _, source in files if source.makes_ids]


def _renamed_warnings(report: IndexReport) -> list[str]:
    """Say that ids made from text by an older askalike are given their new ids."""
    if not report.renamed:
        return []
    return [f"{report.renamed:,} questions of files without an id column had ids that an older askalike "
            "made from their text (subject and body hashed together, so that two texts could share "
            "one); they take the ids made now (subject and body hashed apart), keeping their vectors: "
            "`show`, `delete` and links need the new ids (`search` shows them)"]


def _date_warnings(files: list[tuple[str, SourceFile]]) -> list[str]:
    """The first DATE_WARNINGS_KEPT dates that are not dates, and how many more there are."""
    named = [warning for _, source in files for warning in source.date_warnings][:DATE_WARNINGS_KEPT]
    more = sum(source.undated for _, source in files) - len(named)
    return named + ([f"... and {more:,} more dates that are not dates (those questions are indexed "
                     "without a date, so that no date filter passes them)"] if more else [])


def _refuse_prune_of_nothing(removing: int, stored: int, read: int) -> None:
    """Refuse a prune that would empty the index because its sources hold no question (an empty
    file, a header alone)."""
    if removing and not read:
        raise IndexBuildError(f"the sources hold no questions: --prune would remove all {stored:,} "
                              "questions of the index; nothing was changed (name the sources to keep)")


def _require_safe_prune(removing: int, stored: int, read: int,
                        confirm: Callable[[str], bool] | None) -> None:
    """``_refuse_prune_of_nothing``, and ask before a prune of more than PRUNE_CONFIRM_SHARE of
    the index (refused where ``confirm`` is None: nobody to ask)."""
    _refuse_prune_of_nothing(removing, stored, read)
    if removing <= PRUNE_CONFIRM_SHARE * stored:
        return
    what = f"--prune would remove {removing:,} of the {stored:,} questions in the index"
    if confirm is None:
        raise IndexBuildError(f"{what} (more than {PRUNE_CONFIRM_SHARE:.0%}): pass --yes to "
                              "confirm; nothing was changed")
    if not confirm(f"{what}. Remove them?"):
        raise IndexBuildError(f"{what}: not confirmed; nothing was changed")


def _chunks_to_embed(store: Store, files: list[tuple[str, SourceFile]], options: IndexOptions,
                     report: IndexReport) -> Iterator[list[_Pending]]:
    """The second pass: new and changed questions in chunks of ``commit_every`` (a chunk never
    spans two sources, so a re-run after an interruption embeds the rest in the same chunks);
    metadata-only edits are stored as they are read."""
    for name, source in files:
        waiting: list[_Pending] = []
        for chunk in _planned(store, name, source.questions(), options.readmit):
            report.metadata_updated += store.update_fields(chunk.field_edits)
            store.update_fields(chunk.renames)
            report.unchanged += chunk.unchanged
            waiting += chunk.pending
            while len(waiting) >= options.commit_every:
                yield waiting[: options.commit_every]
                del waiting[: options.commit_every]
        if waiting:
            yield waiting


def _embed_and_store(store: Store, engine: EmbeddingEngine, files: list[tuple[str, SourceFile]], total: int,
                     options: IndexOptions, report: IndexReport) -> None:
    """Embed each chunk and store it with its vectors in one transaction, in chunk order."""
    started = time.perf_counter()
    read_ahead: deque[list[_Pending]] = deque()  # chunks the engine took, not stored yet

    def texts() -> Iterator[list[str]]:
        for chunk in _chunks_to_embed(store, files, options, report):
            read_ahead.append(chunk)
            yield [p.question.text for p in chunk]

    with index_progress(options.show_progress) as progress, closing(engine.embed(texts())) as vectors:
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
        from askalike.indexer.ray_engine import ray_session

        return ray_session(options.ray_address)
    return nullcontext()


def _embedding_engine(options: IndexOptions, identity: EncoderIdentity, encoder: Encoder) -> EmbeddingEngine:
    if options.engine is Engine.ray:
        from askalike.indexer.ray_engine import RayEngine

        return RayEngine(identity.model, identity.fingerprint, options.batch_size, options.threads or 1)
    return InProcessEngine(encoder, options.batch_size)


def _stale_ids(store: Store, files: list[tuple[str, SourceFile]]) -> list[int]:
    """Stored questions of files that none of the sources has (what --prune removes); those
    written through the API belong to no file and stay."""
    kept = dict(files)
    return [row_id for row_id, source, external_id in store.question_keys()
            if is_file_source(source) and (source not in kept or not kept[source].holds(external_id))]


def _require_sources(index_dir: Path, sources: Sequence[Path], options: IndexOptions) -> None:
    """A run without sources only brings an existing index up to date (such as the new place of
    its model); it is refused for a new index, and with --prune (which would remove everything).
    A directory of other files is no index to write into."""
    if not _is_empty(index_dir) and not holds_index(index_dir):
        raise not_an_index(index_dir)
    if sources:
        return
    if options.prune:
        raise IndexBuildError("--prune without SOURCES would remove every question: name the "
                              "sources whose questions the index keeps")
    if read_manifest(index_dir) is None:
        raise IndexBuildError(f"{index_dir}: no index here yet; give the SOURCES to index")


def _source_files(sources: Sequence[Path], options: IndexOptions) -> list[tuple[str, SourceFile]]:
    return [(name, SourceFile(path, options.on_error, options.date_order, options.columns))
            for name, path in distinct_sources(sources)]


def plan_sources(index_dir: Path, sources: Sequence[Path], database: str | None = None,
                 options: IndexOptions | None = None, model: str | None = None) -> IndexReport:
    """What ``index_sources`` would do (``--dry-run``): the sources are read and compared with
    the index, nothing is embedded or written, and nothing is created. What the run would refuse
    it refuses too, with the same message: a ``model`` whose weights are not the index's, a
    --replace that names no source."""
    options = options or IndexOptions()
    if model is not None:
        weights_fingerprint(model)  # a model that is not there: the run's ModelError
    require_index_type(options.index_type)
    _require_sources(index_dir, sources, options)
    files = _source_files(sources, options)
    problems: list[DataError] = []
    manifest = read_manifest(index_dir) if index_dir.is_dir() else None
    url = database or default_database_url(index_dir)
    spec = model_for_index(index_dir, model, manifest.encoder if manifest else None)
    report = IndexReport(str(index_dir), masked_url(url), spec, dry_run=True)
    if manifest is None:  # a new index: every question would be added
        if options.replaces is not None:
            _replacing(files, [], options.replaces)
        _survey(None, files, problems, report, options)
        report.total = report.added
        report.index_type, report.index_type_reason = resolve_index_type(options.index_type, None,
                                                                          report.total)
    else:
        url = resolve_database(index_dir, database)
        report.database = masked_url(url)
        with Store(url, read_only=True) as store:
            store.require_owner(index_id(index_dir))
            recorded = store.encoder()
            if model is not None and recorded is not None:  # the run's check (bind_encoder's)
                store.require_encoder(EncoderIdentity(model, weights_fingerprint(model), recorded.dim))
            named = files
            files = _survey(store, files, problems, report, options)
            stale_ids = _stale_ids(store, files) if options.prune else []
            if options.replaces is not None:
                stale_ids += _replaced_ids(store, files)
                report.replaced = files[0][0]
                report.sources = {named[0][0]: report.sources.pop(files[0][0])}
            if stale_ids:
                stale = store.fetch(sorted(set(stale_ids)))
                if options.prune:
                    _refuse_prune_of_nothing(len(stale), store.count(), report.read)
                report.would_remove = sorted(f"{q.source}: {q.external_id}" for q in stale.values())
                report.removed = len(stale)
            report.total = store.count() + report.added - report.removed
            report.index_type, report.index_type_reason = resolved_index_type(
                store, options.index_type, manifest, report.total)
    report.skipped = [str(p) for p in problems]
    return report



def delete_questions(index_dir: Path, external_ids: Sequence[str], source: str | None = None,
                     database: str | None = None, exclude: bool = False,
                     commit_guard: Callable[[], AbstractContextManager[object]] | None = None) -> int:
    """Remove questions by the user's ids (from ``source`` only, a file name or path, when given)
    and update the index files. Every id must name exactly one stored question, else nothing is
    removed; returns how many were. ``exclude``: later index runs of their source leave them out
    (else a run of a file that still holds them adds them again). ``commit_guard()`` is held, once
    the index lock is, from the commit until the manifest is switched (as ``upsert_questions``'s)."""
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
            allowed = None if source is None else set(store.ids_matching(source_named(source)).tolist())
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
                labels = source_labels(store.source_names())
                named = ", ".join(labels[source_of] for _, source_of in rows)
                raise StoreError(f"id {name!r} is in {len(rows)} sources ({named}): name one with --source; "
                                 "nothing deleted")
            chosen = {name: rows[0] for name, rows in matches.items()}  # (row id, source) by id
            kept_out = [(source_of, name) for name, (_, source_of) in chosen.items()] if exclude else []
            with nullcontext() if commit_guard is None else commit_guard():
                removed = store.delete([row_id for row_id, _ in chosen.values()], kept_out)
                sync_vector_index(index_dir, store, manifest.encoder, manifest.index_type, url, manifest)
            return removed


def _nothing_to_delete(index_dir: Path) -> IndexDirectoryError:
    return IndexDirectoryError(f"{index_dir}: no index here to delete from (no {MANIFEST_FILE})")


def index_sources(index_dir: Path, sources: Sequence[Path], model: str | None,
                  database: str | None = None, options: IndexOptions | None = None) -> IndexReport:
    """Index ``sources`` into ``index_dir`` (see the module docstring for the guarantees). A first
    run that fails before storing a question leaves no index directory behind."""
    options = options or IndexOptions()
    require_index_type(options.index_type)  # before any work
    _require_sources(index_dir, sources, options)
    files = _source_files(sources, options)
    existed = index_dir.is_dir()
    fresh = _is_empty(index_dir)
    with index_lock(index_dir):
        try:
            return _index_locked(index_dir, files, model, database, options)
        except Exception:
            if fresh:
                _remove_unfinished_first_run(index_dir, database, keep_directory=existed)
            raise


def _is_empty(index_dir: Path) -> bool:
    """Is there nothing at ``index_dir`` yet (no directory, or an empty one)? An unreadable one
    is taken as not empty."""
    try:
        return not index_dir.is_dir() or not any(index_dir.iterdir())
    except OSError:
        return False


def _remove_unfinished_first_run(index_dir: Path, database: str | None, keep_directory: bool) -> None:
    """Remove what a failed first run made (a bad row, a bad --model, a database refused), so
    that no directory is left that looks like an index; a run that stored questions keeps them,
    for its re-run to go on from."""
    if read_manifest(index_dir) is not None:
        return
    try:
        with Store(resolve_database(index_dir, database), read_only=True) as store:
            store.require_owner(index_id(index_dir))
            if store.count():
                return
    except UserError:  # no database made, none reachable, or another index's: nothing stored
        pass
    for entry in index_dir.iterdir() if keep_directory else [index_dir]:
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def _index_locked(index_dir: Path, files: list[tuple[str, SourceFile]], model: str | None,
                  database: str | None, options: IndexOptions) -> IndexReport:
    """``index_sources`` once the index directory is locked."""
    database = resolve_database(index_dir, database)
    manifest_before = read_manifest(index_dir)
    this_index = ensure_index_id(index_dir)
    with Store(database) as store:
        store.require_owner(this_index)  # claimed once the run can go ahead
        recorded = store.encoder()
        spec = model_for_index(index_dir, model, recorded)
        problems: list[DataError] = []
        survey = IndexReport(str(index_dir), masked_url(database), spec)
        named = files
        files = _survey(store, files, problems, survey, options)
        stale = _stale_ids(store, files) if options.prune else []
        if options.prune:
            _require_safe_prune(len(stale), store.count(), survey.read, options.confirm_prune)
        if options.replaces is not None:
            stale = sorted({*stale, *_replaced_ids(store, files)})
        encoder = (options.encoder_loader(spec) if options.encoder_loader is not None
                   else load_encoder(spec, threads=options.threads))
        identity = model_identity(spec, encoder)
        store.claim(this_index)
        moved_from = store.bind_encoder(identity)
        if options.index_type is not None:
            store.record_index_type(options.index_type)
        report = IndexReport(str(index_dir), masked_url(database), identity.model, read=survey.read,
                             excluded=survey.excluded, renamed=survey.renamed, sources=survey.sources,
                             skipped=[str(p) for p in problems], warnings=survey.warnings,
                             undated=survey.undated, model_moved_from=moved_from or "")
        generation_before = store.generation()
        to_embed = survey.added + survey.reembedded
        if not to_embed:  # no cluster to start for nothing
            options = replace(options, engine=Engine.in_process)
        if to_embed or survey.metadata_updated or survey.renamed:
            with _engine_session(options):  # once the sources are checked: a bad row stops the run first
                engine = _embedding_engine(options, identity, encoder)
                _embed_and_store(store, engine, files, to_embed, options, report)
        else:  # nothing to write: no second reading of the sources
            report.unchanged = survey.unchanged
        report.removed = store.delete(stale)
        if options.readmit:
            store.readmit([name for name, _ in files])
        if options.replaces is not None:  # last: a run interrupted before is run again as it was
            store.rename_source(files[0][0], named[0][0])
            report.replaced = files[0][0]
            report.sources = {named[0][0]: report.sources.pop(files[0][0])}
        if options.date_order is not None:
            store.remember(DATE_ORDER_SETTING, options.date_order.value)
        for setting, column, default in ((DATE_COLUMN_SETTING, options.columns.date, DATE_KEY),
                                         (CATEGORY_COLUMN_SETTING, options.columns.category, CATEGORY_KEY)):
            if column != default:  # so that the API reads a question as the runs did
                store.remember(setting, column)
        only_added = (report.reembedded == 0 and report.removed == 0 and manifest_before is not None
                      and manifest_before.generation == generation_before)
        report.index_type, report.index_type_reason = resolved_index_type(
            store, options.index_type, manifest_before, store.count())
        with index_progress(options.show_progress) as progress:
            manifest, report.faiss_rebuilt = sync_vector_index(
                index_dir, store, identity, report.index_type, database, manifest_before,
                only_added=only_added, progress=progress)
        store.record_index_type(report.index_type)
        if manifest.encoder != identity:  # the model moved, and the files were current
            write_manifest(index_dir, replace(manifest, encoder=identity))
        report.total, report.parameters = manifest.count, manifest.parameters
        return report
