"""Bringing an index directory's FAISS and BM25 files up to its store's generation.

The files are caches of the store: they are extended with the questions added since they were
written when that is safe (new vectors to the added FAISS file, new texts to the added BM25
file, see ``ADDED_SHARE``), else
rebuilt from the stored vectors and texts, read a chunk at a time, so that a rebuild holds the
FAISS index and one chunk, never every vector twice. Each file is written under a new name and
the manifest is switched to them atomically.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import faiss

from askalike.core.files import atomic_write, file_sha256, remember_sha256
from askalike.core.lexical import LexicalIndex, LexicalSegments
from askalike.core.model_dir import EncoderIdentity
from askalike.indexer.database import masked_url
from askalike.indexer.index_types import named_index_type
from askalike.indexer.layout import (
    IndexDirectoryError,
    added_file_name,
    database_entry,
    faiss_file_name,
    lexical_added_file_name,
    lexical_file_name,
)
from askalike.indexer.manifest import (
    Manifest,
    load_faiss_to_extend,
    load_lexical,
    main_faiss,
    remember_lexical_main,
    verified_added_faiss,
    verified_lexical_files,
    write_manifest,
)
from askalike.indexer.store import Store
from askalike.indexer.vector_index import (
    Chunks,
    SegmentedIndex,
    added_index,
    build_index,
    training_sample,
    training_size,
    write_index,
)

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


# Questions added since the main FAISS file go to a flat file of their own (the manifest's
# added_file), so that a write of a few questions writes a file the size of what was added since
# the main file rather than the whole index; past this share of the main index (and this floor)
# they are folded into it, the one write whose cost grows with the collection. At 100,000
# questions that is every 6,250 added: the added file is 9.6 MB at most. Its exact search reads
# every added vector again from memory (the main index's search has pushed them out of the
# caches): at 4,000 added, 0.25 ms of a 1.9 ms hybrid search, the price of folding less often
# (docs/benchmarks.md, "models/fast with a writer, re-measured").
ADDED_SHARE = 16
ADDED_FLOOR = 1_000


@dataclass(frozen=True)
class _Written:
    index_dir: Path
    manifest: Manifest
    added: faiss.Index | None  # the added FAISS index (the main one is mapped, as searches map it)
    lexical: LexicalSegments


# The added FAISS index and the BM25 indexes this process last wrote, kept in memory: a server
# that takes write after write extends them again without reading the files it has just written
# (their checksums are still verified: at 100,000 questions reading the BM25 file and its terms
# was 0.03 s of a write). The main FAISS file is not kept: a write maps it as searches do
# (``load_faiss_to_extend``), and a mapping kept here would outlive the states that use it (one
# of a file damaged in place and then repaired would be found again by name and checksum, and
# read past its end). Taken out while a write uses them, put back once the manifest names their
# files: a write that fails leaves nothing.
_last_written: _Written | None = None


def _take_written(index_dir: Path, manifest: Manifest) -> _Written | None:
    """What this process wrote last, if it is what ``manifest`` names."""
    global _last_written
    kept, _last_written = _last_written, None
    if kept is None or kept.index_dir != index_dir.resolve() or _files(kept.manifest) != _files(manifest):
        return None
    return kept


def _files(manifest: Manifest) -> tuple[str, str, str, str]:
    return (manifest.faiss_sha256, manifest.added_sha256, manifest.lexical_sha256,
            manifest.lexical_added_sha256)


def _advancing(chunks: Chunks, progress: Progress | None, task: TaskID | None) -> Chunks:
    for ids, vectors in chunks:
        yield ids, vectors
        if progress is not None and task is not None:
            progress.advance(task, len(ids))


def _task(progress: Progress | None, description: str, total: int) -> TaskID | None:
    return None if progress is None else progress.add_task(description, total=total, unit="vectors")


def _parameters_current(manifest: Manifest, dim: int) -> bool:
    """Does the manifest hold every parameter this askalike chooses for its index type? (One
    written by an older askalike may not: an ivfpq index without its refinement step.)"""
    chosen_for = manifest.parameters.get("chosen_for", manifest.count)
    return set(named_index_type(manifest.index_type).parameters(chosen_for, dim)) <= set(manifest.parameters)


def _built_from_store(store: Store, index_type: str, dim: int, count: int,
                      progress: Progress | None) -> tuple[faiss.Index, dict]:
    """A new index of every stored vector, with parameters chosen for ``count``."""
    parameters = {**named_index_type(index_type).parameters(count, dim), "chosen_for": count}
    size = training_size(parameters)
    training = training_sample(store.vectors(dim), count, size) if size and count else None
    task = _task(progress, f"building the {index_type} index", count)
    index = build_index(index_type, parameters, dim, _advancing(store.vectors(dim), progress, task),
                        training)
    return index, parameters


def _extended(index: SegmentedIndex, store: Store, dim: int, count: int,
              progress: Progress | None) -> SegmentedIndex:
    """``index`` with the stored vectors whose ids are above those it holds, in its added part."""
    known = index.ids()
    added = index.added if index.added is not None else added_index(dim)
    task = _task(progress, "extending the index", count - index.ntotal)
    for ids, vectors in _advancing(store.vectors(dim, after_id=int(known.max()) if len(known) else -1),
                                   progress, task):
        added.add_with_ids(vectors, ids)
    return SegmentedIndex(index.main, added)


def _folds(index: SegmentedIndex) -> bool:
    """Are there more added questions than the added file should hold (``ADDED_SHARE``)?"""
    return index.added_count > max(ADDED_FLOOR, int(index.main.ntotal) // ADDED_SHARE)


class _File(NamedTuple):
    name: str  # "": none
    sha256: str
    size: int


NO_FILE = _File("", "", 0)


def _written(index_dir: Path, index: faiss.Index, name: str) -> _File:
    """``index`` written to ``name`` in ``index_dir``."""
    digest = write_index(index, index_dir / name)
    return _File(name, digest, (index_dir / name).stat().st_size)


def sync_vector_index(index_dir: Path, store: Store, encoder: EncoderIdentity, index_type: str,
                      database: str, manifest: Manifest | None, *, only_added: bool = False,
                      rebuild: bool = False, progress: Progress | None = None) -> tuple[Manifest, bool]:
    """Bring the FAISS files and the BM25 file up to the store's generation. ``manifest`` is the
    directory's as the caller read it under the index lock (None: none, or unreadable, which a
    repair rebuilds). When its files were current before this run and the run only added
    questions, the new vectors go to the added FAISS file and the new texts to the added BM25 file
    (both folded into their main files past ``ADDED_SHARE``); otherwise (and always with
    ``rebuild``) all are rebuilt from the store. Returns the manifest and whether the main FAISS
    file was rebuilt."""
    global _last_written
    generation, count = store.generation(), store.count()
    index, kept = None, None
    if (not rebuild and manifest is not None and manifest.index_type == index_type
            and _parameters_current(manifest, encoder.dim)):
        kept = _take_written(index_dir, manifest)
        try:  # the files are verified against their checksums before they are kept or extended
            if kept is not None:
                verified_added_faiss(index_dir, manifest)
            index = (SegmentedIndex(main_faiss(index_dir, manifest, mapped=True), kept.added)
                     if kept is not None else load_faiss_to_extend(index_dir, manifest))
        except IndexDirectoryError:  # missing or damaged: rebuilt from the database below
            index, kept = None, None
    if index is not None and manifest.generation == generation and manifest.lexical_file:
        return manifest, False
    if index is not None and not (only_added and count <= 2 * manifest.parameters.get("chosen_for", count)):
        index = None  # changed or removed questions, or grown past what the parameters suit
    if index is not None:
        index, parameters = _extended(index, store, encoder.dim, count, progress), manifest.parameters
        if index.ntotal != count:  # the files did not hold what the manifest said: start over
            index = None
    rebuilt = index is None
    if index is None:
        built, parameters = _built_from_store(store, index_type, encoder.dim, count, progress)
        index = SegmentedIndex(built)
    folds = rebuilt or _folds(index)
    if folds:
        if not rebuilt:  # the main file read writable (the one extended above is mapped)
            index = SegmentedIndex(main_faiss(index_dir, manifest, mapped=False), index.added)
        index = index.folded()
        main = _written(index_dir, index.main, faiss_file_name(generation))
    else:  # the main file stays as it is
        main = _File(manifest.faiss_file, manifest.faiss_sha256, manifest.faiss_bytes)
    added = NO_FILE if index.added is None else _written(index_dir, index.added, added_file_name(generation))
    lexical, main_kept = _synced_lexical(index_dir, store, manifest if only_added and not rebuild else None,
                                         None if kept is None else kept.lexical, folds)
    if main_kept and manifest is not None:
        lexical_main = _File(manifest.lexical_file, manifest.lexical_sha256, manifest.lexical_bytes)
    else:
        lexical_main = _written_lexical(index_dir, lexical.main, lexical_file_name(generation))
        remember_lexical_main(index_dir / lexical_main.name, lexical_main.sha256, lexical.main)
    lexical_added = (NO_FILE if lexical.added is None
                     else _written_lexical(index_dir, lexical.added, lexical_added_file_name(generation)))
    named = database_entry(index_dir, database, masked_url(database))
    manifest = Manifest(encoder=encoder, database=named,
                        index_type=index_type,
                        parameters=parameters, count=index.ntotal, generation=generation,
                        faiss_file=main.name, faiss_sha256=main.sha256, faiss_bytes=main.size,
                        lexical_file=lexical_main.name, lexical_sha256=lexical_main.sha256,
                        lexical_bytes=lexical_main.size,
                        added_file=added.name, added_sha256=added.sha256, added_bytes=added.size,
                        lexical_added_file=lexical_added.name, lexical_added_sha256=lexical_added.sha256,
                        lexical_added_bytes=lexical_added.size)
    write_manifest(index_dir, manifest)
    _last_written = _Written(index_dir.resolve(), manifest, index.added, lexical)
    return manifest, rebuilt


def _synced_lexical(index_dir: Path, store: Store, previous: Manifest | None,
                    kept: LexicalSegments | None, fold: bool) -> tuple[LexicalSegments, bool]:
    """The BM25 index of the stored questions, and whether its main segment is ``previous``'s:
    ``previous``'s files (``kept``: their index, as this process wrote them) with the questions
    added since in the added segment, folded into the main one with ``fold`` (when the FAISS
    files fold; only when that run added questions alone: ids then only grow), else built anew."""
    if previous is not None and previous.lexical_file:
        try:  # as the FAISS files: a kept index once its files still match the manifest
            if kept is not None:
                verified_lexical_files(index_dir, previous)
            lexical = kept if kept is not None else load_lexical(index_dir, previous)
        except IndexDirectoryError:  # missing or damaged: built anew below
            pass
        else:
            if fold:  # the added questions' texts are read again: a fold is one write in many
                known = int(lexical.main.doc_ids.max()) if len(lexical.main) else -1
                return LexicalSegments(lexical.main.updated(store.texts(after_id=known), ())), False
            known = int(lexical.doc_ids.max()) if len(lexical) else -1
            added = (lexical.added or LexicalIndex.empty()).updated(store.texts(after_id=known), ())
            return LexicalSegments(lexical.main, added if len(added) else None), True
    return LexicalSegments(LexicalIndex.build(store.texts())), False


def _written_lexical(index_dir: Path, segment: LexicalIndex, name: str) -> _File:
    """``segment`` written to ``name`` in ``index_dir``."""
    with atomic_write(index_dir / name) as temporary:
        segment.write(temporary)
    digest = file_sha256(index_dir / name)
    remember_sha256(index_dir / name, digest)
    return _File(name, digest, (index_dir / name).stat().st_size)
