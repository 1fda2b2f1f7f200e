"""Bringing an index directory's FAISS and BM25 files up to its store's generation.

Both files are caches of the store: they are extended with the questions added since they were
written when that is safe, else rebuilt from the stored vectors and texts, read a chunk at a
time, so that a rebuild holds the FAISS index and one chunk, never every vector twice. Each file
is written under a new name and the manifest is switched to them atomically.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import faiss

from askalike.core.files import atomic_write, file_sha256, remember_sha256
from askalike.core.lexical import LexicalIndex
from askalike.core.model_dir import EncoderIdentity
from askalike.indexer.database import masked_url
from askalike.indexer.index_types import named_index_type
from askalike.indexer.layout import IndexDirectoryError, database_entry, faiss_file_name, lexical_file_name
from askalike.indexer.manifest import Manifest, load_faiss, load_lexical, verified_faiss_file, write_manifest
from askalike.indexer.store import Store
from askalike.indexer.vector_index import (
    Chunks,
    build_index,
    index_ids,
    training_sample,
    training_size,
    write_index,
)

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID


@dataclass(frozen=True)
class _Written:
    index_dir: Path
    sha256: str
    index: faiss.Index


# The FAISS index this process last wrote, kept in memory: a server that takes write after write
# extends it again without reading the file it has just written (its checksum is still verified:
# at 100,000 questions the read was 0.43 s of a 100-question write's 1.3 s). Taken out while a
# write uses it, put back once the manifest names its file: a write that fails leaves nothing.
_last_written: _Written | None = None


def _take_written(index_dir: Path, manifest: Manifest) -> faiss.Index | None:
    """The index this process wrote last, if it is the one ``manifest`` names."""
    global _last_written
    kept, _last_written = _last_written, None
    if kept is None or kept.index_dir != index_dir.resolve() or kept.sha256 != manifest.faiss_sha256:
        return None
    return kept.index


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


def _extended(index: faiss.Index, store: Store, dim: int, count: int,
              progress: Progress | None) -> faiss.Index:
    """``index`` with the stored vectors whose ids are above those it holds."""
    known = index_ids(index)
    task = _task(progress, "extending the index", count - int(index.ntotal))
    for ids, vectors in _advancing(store.vectors(dim, after_id=int(known.max()) if len(known) else -1),
                                   progress, task):
        index.add_with_ids(vectors, ids)
    return index


def sync_vector_index(index_dir: Path, store: Store, encoder: EncoderIdentity, index_type: str,
                      database: str, manifest: Manifest | None, *, only_added: bool = False,
                      rebuild: bool = False, progress: Progress | None = None) -> tuple[Manifest, bool]:
    """Bring the FAISS file and the BM25 file up to the store's generation. ``manifest`` is the
    directory's as the caller read it under the index lock (None: none, or unreadable, which a
    repair rebuilds). When its files were current before this run and the run only added
    questions, the new vectors and texts are appended; otherwise (and always with ``rebuild``)
    both are rebuilt from the store. Returns the manifest and whether the FAISS file was rebuilt."""
    global _last_written
    generation, count = store.generation(), store.count()
    index = None
    if (not rebuild and manifest is not None and manifest.index_type == index_type
            and _parameters_current(manifest, encoder.dim)):
        kept = _take_written(index_dir, manifest)
        try:  # the file is verified against its checksum before it is kept or extended
            if kept is not None:
                verified_faiss_file(index_dir, manifest)
            index = kept if kept is not None else load_faiss(index_dir, manifest)
        except IndexDirectoryError:  # missing or damaged: rebuilt from the database below
            index = None
    if index is not None and manifest.generation == generation and manifest.lexical_file:
        return manifest, False
    if index is not None and not (only_added and count <= 2 * manifest.parameters.get("chosen_for", count)):
        index = None  # changed or removed questions, or grown past what the parameters suit
    if index is not None:
        index, parameters = _extended(index, store, encoder.dim, count, progress), manifest.parameters
        if index.ntotal != count:  # the file did not hold what the manifest said: start over
            index = None
    rebuilt = index is None
    if index is None:
        index, parameters = _built_from_store(store, index_type, encoder.dim, count, progress)
    name = faiss_file_name(generation)
    digest = write_index(index, index_dir / name)
    lexical = _synced_lexical(index_dir, store, manifest if only_added and not rebuild else None)
    lexical_name = lexical_file_name(generation)
    with atomic_write(index_dir / lexical_name) as temporary:
        lexical.write(temporary)
    lexical_digest = file_sha256(index_dir / lexical_name)
    remember_sha256(index_dir / lexical_name, lexical_digest)
    named = database_entry(index_dir, database, masked_url(database))
    manifest = Manifest(encoder=encoder, database=named,
                        index_type=index_type,
                        parameters=parameters, count=int(index.ntotal), generation=generation,
                        faiss_file=name, faiss_sha256=digest,
                        faiss_bytes=(index_dir / name).stat().st_size,
                        lexical_file=lexical_name, lexical_sha256=lexical_digest,
                        lexical_bytes=(index_dir / lexical_name).stat().st_size)
    write_manifest(index_dir, manifest)
    _last_written = _Written(index_dir.resolve(), digest, index)
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
