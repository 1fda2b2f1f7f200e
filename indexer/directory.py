"""Opening an index directory for reading, describing it, checking it and repairing it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.build import resolve_database, sync_vector_index
from indexer.manifest import MANIFEST_FILE, IndexDirectoryError, Manifest, index_lock, read_manifest
from indexer.store import Store, StoreError, default_database_url
from indexer.vector_index import configure_search, file_digest, index_ids, read_index

REPAIR_HINT = "askalike check --repair --index {dir}"


@dataclass
class OpenIndex:
    """A readable index: manifest, store and the FAISS index the manifest names."""

    directory: Path
    manifest: Manifest
    store: Store
    faiss: faiss.Index

    def close(self) -> None:
        self.store.close()


def _require_manifest(index_dir: Path) -> Manifest:
    if not index_dir.is_dir():
        raise IndexDirectoryError(f"{index_dir}: no index here; build one with "
                                  f"`askalike index SOURCE --model MODEL --index {index_dir}`")
    manifest = read_manifest(index_dir)
    if manifest is None:
        raise IndexDirectoryError(f"{index_dir}: no {MANIFEST_FILE} (an index run that never "
                                  f"finished?); run `askalike index` again, or `"
                                  f"{REPAIR_HINT.format(dir=index_dir)}`")
    return manifest


def _load_faiss(index_dir: Path, manifest: Manifest) -> faiss.Index:
    path = index_dir / manifest.faiss_file
    hint = REPAIR_HINT.format(dir=index_dir)
    if not path.is_file():
        raise IndexDirectoryError(f"{path}: missing; rebuild it from the database with `{hint}`")
    if path.stat().st_size != manifest.faiss_bytes:
        raise IndexDirectoryError(f"{path}: {path.stat().st_size} bytes, the manifest says "
                                  f"{manifest.faiss_bytes} (truncated or damaged, so its checksum cannot "
                                  f"match); rebuild it with `{hint}`")
    if file_digest(path) != manifest.faiss_sha256:
        raise IndexDirectoryError(f"{path}: its checksum (sha256) differs from the manifest's "
                                  f"(damaged on disk); rebuild it from the database with `{hint}`")
    try:
        index = read_index(path)
    except RuntimeError as err:
        raise IndexDirectoryError(f"{path}: unreadable ({str(err).splitlines()[0]}); rebuild it "
                                  f"with `{hint}`") from None
    configure_search(index, manifest.index_type, manifest.parameters)
    return index


def open_index(index_dir: Path, database: str | None = None) -> OpenIndex:
    """The index for searching. A writer may switch the manifest while we read: when the file it
    named is already gone, the new manifest is read once more."""
    for attempt in range(2):
        manifest = _require_manifest(index_dir)
        try:
            index = _load_faiss(index_dir, manifest)
            break
        except IndexDirectoryError:
            if attempt or read_manifest(index_dir) == manifest:
                raise
    store = Store(resolve_database(index_dir, database))
    return OpenIndex(index_dir, manifest, store, index)


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def index_info(index_dir: Path, database: str | None = None) -> dict[str, Any]:
    manifest = _require_manifest(index_dir)
    store = Store(resolve_database(index_dir, database))
    try:
        by_source = store.counts_by_source()
        generation = store.generation()
    finally:
        store.close()
    return {
        "index": str(index_dir), "database": manifest.database,
        "model": manifest.encoder.model, "weights": manifest.encoder.fingerprint,
        "dimensions": manifest.encoder.dim, "index_type": manifest.index_type,
        "parameters": manifest.parameters, "questions": sum(by_source.values()),
        "vectors": manifest.count, "sources": by_source,
        "up_to_date": generation == manifest.generation,
        "faiss_bytes": manifest.faiss_bytes, "directory_bytes": _disk_bytes(index_dir),
        "updated_at": manifest.updated_at,
    }


@dataclass
class CheckReport:
    index: str
    problems: list[str] = field(default_factory=list)
    questions: int = 0
    vectors: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def repair(self) -> str | None:
        return None if self.ok else REPAIR_HINT.format(dir=self.index)


def check_index(index_dir: Path, database: str | None = None) -> CheckReport:
    """Does the FAISS file match its checksum, and hold exactly the stored questions' ids, built
    from the store's current generation with the store's encoder?"""
    report = CheckReport(str(index_dir))
    manifest = _require_manifest(index_dir)
    store = Store(resolve_database(index_dir, database))
    try:
        report.questions = store.count()
        recorded = store.encoder()
        if recorded is not None and recorded != manifest.encoder:
            report.problems.append(f"the manifest names {manifest.encoder.describe()}, the "
                                   f"database's vectors are of {recorded.describe()}")
        if store.generation() != manifest.generation:
            report.problems.append(f"the FAISS file is of generation {manifest.generation}, the "
                                   f"database is at {store.generation()} (an index run was "
                                   "interrupted)")
        try:
            index = _load_faiss(index_dir, manifest)  # verifies size and checksum
        except IndexDirectoryError as err:
            report.problems.append(str(err))
            return report
        report.vectors = int(index.ntotal)
        stored, indexed = np.asarray(store.ids(), dtype=np.int64), np.sort(index_ids(index))
        if not np.array_equal(stored, indexed):
            missing = np.setdiff1d(stored, indexed).size
            extra = np.setdiff1d(indexed, stored).size
            report.problems.append(f"{missing} stored questions are not in the FAISS index and "
                                   f"{extra} indexed ids are not in the database")
    except StoreError as err:
        report.problems.append(str(err))
    finally:
        store.close()
    return report


def repair_index(index_dir: Path, database: str | None = None) -> Manifest:
    """Rebuild the FAISS file (and manifest) from the vectors in the database; no re-embedding."""
    with index_lock(index_dir):
        try:
            manifest = read_manifest(index_dir)
        except IndexDirectoryError:
            manifest = None
        url = database or (resolve_database(index_dir, None) if manifest is not None
                           else default_database_url(index_dir))
        store = Store(url)
        try:
            encoder = store.encoder()
            if encoder is None:
                raise IndexDirectoryError(f"{index_dir}: the database holds no vectors yet; run "
                                          "`askalike index` first")
            index_type = manifest.index_type if manifest is not None else "flat"
            rebuilt, _ = sync_vector_index(index_dir, store, encoder, index_type, url, rebuild=True)
            return rebuilt
        finally:
            store.close()
