"""Opening an index directory for reading, describing it, checking it and repairing it.

A check verifies every stored vector too (``Store.damaged_vectors``); a repair embeds the damaged
ones again from their stored text, with the index's own model, before it rebuilds the FAISS and
BM25 files from the database, so that a damaged vector is never indexed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from askalike.core.encoder import Encoder
from askalike.core.lexical import LexicalSegments
from askalike.core.loader import load_encoder
from askalike.core.model_dir import DEFAULT_MODEL, EncoderIdentity, pretrained_name, weights_fingerprint
from askalike.core.text import join_subject_body
from askalike.indexer.choices import DATABASE_ENV_VAR
from askalike.indexer.database import StoreError, absolute_sqlite_url, masked_url
from askalike.indexer.index_type_choice import resolve_index_type
from askalike.indexer.layout import (
    MANIFEST_FILE,
    REPAIR_HINT,
    SQLITE_FILE,
    IndexDirectoryError,
    database_url_of_entry,
    default_database_url,
    holds_index,
    index_id,
    index_lock,
    not_an_index,
    require_no_writer,
)
from askalike.indexer.manifest import (
    Manifest,
    load_faiss,
    load_lexical,
    read_manifest,
)
from askalike.indexer.migrations import FIRST_SCHEMA
from askalike.indexer.sources import chunked, content_hash
from askalike.indexer.store import DamagedVector, Store, Verdict
from askalike.indexer.sync import sync_vector_index
from askalike.indexer.vector_index import HeldVectors, SegmentedIndex


def model_for_index(index_dir: Path, named: str | None, recorded: EncoderIdentity | None) -> str:
    """The one rule for which model an index's questions and queries are embedded with (index runs
    and their dry runs, searches) and whose same-question judge ``duplicates`` applies: the model
    named (``--model``), else the one the index was built with, else the default model for a new
    index."""
    if named:
        return named
    return _recorded_model(index_dir, recorded) if recorded is not None else DEFAULT_MODEL


def _recorded_model(index_dir: Path, encoder: EncoderIdentity) -> str:
    """The model an index was built with, where it was recorded; when that directory is gone, an
    IndexDirectoryError saying how to tell the index its new place (``askalike index --model
    NEWPATH`` finds it again by its weights, see ``Store.bind_encoder``)."""
    if pretrained_name(encoder.model) is None and not Path(encoder.model).is_dir():
        raise IndexDirectoryError(
            f"{index_dir}: its model {encoder.model} is missing (moved or deleted?); if it moved, "
            f"record the new place with `askalike index --model NEWPATH --index {index_dir}` "
            f"(the model there must have the same weights, {encoder.fingerprint})")
    return encoder.model


def resolve_database(index_dir: Path, explicit: str | None) -> str:
    """--db (a relative SQLite file made absolute), else the database the manifest names (when it
    names it whole), else SQLite in the index directory."""
    if explicit:
        return absolute_sqlite_url(explicit)
    manifest = read_manifest(index_dir)
    return database_url_of_entry(index_dir, manifest.database if manifest else None, DATABASE_ENV_VAR)


def resolved_index_type(store: Store, requested: str | None, manifest: Manifest | None,
                        count: int) -> tuple[str, str]:
    """The FAISS type to build for ``count`` questions, and why (``resolve_index_type``):
    ``requested`` (``--index-type``); else the type an interrupted run was asked for (recorded
    before its first commit: ``Store.record_index_type``), so that its re-run or a repair ends
    as it would have; else the manifest's; else ``auto``'s choice."""
    current = manifest.index_type if manifest else None
    recorded = store.index_type()
    if requested is None and recorded not in (None, current):
        chosen, why = resolve_index_type(recorded, None, count)
        return chosen, f"{why}, as asked of a run that was interrupted"
    return resolve_index_type(requested, current, count)


@dataclass
class OpenIndex:
    """A readable index: manifest, store and the FAISS index the manifest names."""

    directory: Path
    manifest: Manifest
    store: Store
    faiss: SegmentedIndex  # the FAISS files the manifest names
    lexical: LexicalSegments | None = None  # the BM25 index, where it was read at opening

    def close(self) -> None:
        self.store.close()


def require_manifest(index_dir: Path) -> Manifest:
    """The manifest of the index in ``index_dir``; IndexDirectoryError, saying what to run, where
    there is none."""
    if not index_dir.is_dir():
        raise IndexDirectoryError(f"{index_dir}: no index here; build one with "
                                  f"`askalike index SOURCE --model MODEL --index {index_dir}`")
    manifest = read_manifest(index_dir)
    if manifest is None and not holds_index(index_dir):
        raise not_an_index(index_dir)
    if manifest is None:
        raise IndexDirectoryError(f"{index_dir}: no {MANIFEST_FILE} (an index run that never "
                                  f"finished?); run `askalike index` again, or `"
                                  f"{REPAIR_HINT.format(dir=index_dir)}`")
    return manifest


def open_index(index_dir: Path, database: str | None = None, lexical: bool = False) -> OpenIndex:
    """The index for searching; ``lexical``: its BM25 file (where the manifest names one) read
    now too. A writer may switch the manifest while we read: when a file it named is already
    gone, the new manifest is read once more."""
    for attempt in range(2):
        manifest = require_manifest(index_dir)
        try:
            index = load_faiss(index_dir, manifest, mapped=True)
            words = load_lexical(index_dir, manifest) if lexical and manifest.lexical_file else None
            break
        except IndexDirectoryError:
            if attempt or read_manifest(index_dir) == manifest:
                raise
    return OpenIndex(index_dir, manifest, _open_store(index_dir, database), index, words)


def recorded_verdicts(index_dir: Path, database: str | None = None) -> list[Verdict]:
    """The verdicts people gave on pairs of the index's questions (``Store.verdicts``)."""
    require_manifest(index_dir)
    with _open_store(index_dir, database) as store:
        return store.verdicts()


def _open_store(index_dir: Path, database: str | None) -> Store:
    """The index's database for reading: nothing is created or written, and a database that
    holds another index directory's questions is refused."""
    store = Store(resolve_database(index_dir, database), read_only=True)
    try:
        store.require_owner(index_id(index_dir))
    except BaseException:
        store.close()
        raise
    return store


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def index_info(index_dir: Path, database: str | None = None) -> dict[str, Any]:
    manifest = require_manifest(index_dir)
    with _open_store(index_dir, database) as store:
        by_source = store.counts_by_source()
        generation = store.generation()
    return {
        "index": str(index_dir), "database": masked_url(store.url),
        "model": manifest.encoder.model, "weights": manifest.encoder.fingerprint,
        "dimensions": manifest.encoder.dim, "index_type": manifest.index_type,
        "parameters": manifest.parameters, "questions": sum(by_source.values()),
        "vectors": manifest.count, "sources": by_source,
        "up_to_date": generation == manifest.generation,
        "faiss_bytes": manifest.faiss_bytes + manifest.added_bytes, "directory_bytes": _disk_bytes(index_dir),
        "updated_at": manifest.updated_at,
    }


DAMAGED_LISTED = 100  # untrusted vectors a check names (all are counted)
REEMBED_CHUNK = 2048  # questions embedded again at a time (one transaction each)
DEEP_SAMPLE = 500  # stored questions ``check --deep`` embeds again
# a stored vector and its text embedded again are at least this alike: the same model gives the
# same vector within float rounding (README: a text's vector in a batch and alone), which an
# export's rounded activations can amplify to a cosine of 0.998 between a GPU and a CPU, or two
# CPUs (docs/results.md); another text's vector is far below
DEEP_MIN_COSINE = 0.99
HELD_TOLERANCE = 1e-6  # the FAISS file holds the stored float32 vectors themselves


@dataclass
class CheckReport:
    index: str
    problems: list[str] = field(default_factory=list)
    questions: int = 0
    vectors: int = 0
    damaged: list[str] = field(default_factory=list)  # the first DAMAGED_LISTED damaged vectors
    # the first DAMAGED_LISTED sound vectors that are not their question's (``untrusted_vectors``)
    mismatched: list[str] = field(default_factory=list)
    deep_checked: int = 0  # questions embedded again to compare (``deep``)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def repair(self) -> str | None:
        return None if self.ok else REPAIR_HINT.format(dir=self.index)


CHECK_LATER = "check it again when that run has finished"


def check_index(index_dir: Path, database: str | None = None, deep: bool = False) -> CheckReport:
    """Do the FAISS and BM25 files match their checksums, and hold exactly the stored questions'
    ids, built from the store's current generation with the store's encoder? Is each stored
    vector sound and its question's (``untrusted_vectors``; ``deep``: a sample embedded again)?"""
    report = CheckReport(str(index_dir))
    require_no_writer(index_dir, CHECK_LATER)  # a run in progress is not an interrupted one
    manifest = require_manifest(index_dir)
    with _open_store(index_dir, database) as store:
        try:
            _compare(index_dir, manifest, store, report, deep)
        except StoreError as err:
            report.problems.append(str(err))
    if report.problems:
        require_no_writer(index_dir, CHECK_LATER)  # a run that started while we compared
    return report


def _compare(index_dir: Path, manifest: Manifest, store: Store, report: CheckReport, deep: bool) -> None:
    """Fill ``report`` with every way the store, the manifest and the FAISS file disagree."""
    report.questions = store.count()
    recorded = store.encoder()
    if recorded is not None and not recorded.same_weights(manifest.encoder):
        report.problems.append(f"the manifest names {manifest.encoder.describe()}, the "
                               f"database's vectors are of {recorded.describe()}")
    if store.generation() != manifest.generation:
        report.problems.append(f"the FAISS file is of generation {manifest.generation}, the "
                               f"database is at {store.generation()} (an index run was "
                               "interrupted)")
    if store.schema_version == FIRST_SCHEMA:
        report.problems.append(f"the database is of schema version {store.schema_version}, without "
                               "vector checksums and with dates as text: upgrade it")
    damaged = store.damaged_vectors((recorded or manifest.encoder).dim)
    if damaged:
        report.damaged = [str(vector) for vector in damaged[:DAMAGED_LISTED]]
        report.problems.append(f"{len(damaged)} stored vectors are damaged (the first: question "
                               f"{damaged[0]}): a repair embeds them again")
    try:
        index = load_faiss(index_dir, manifest)  # verifies size and checksum
    except IndexDirectoryError as err:
        report.problems.append(str(err))
        index = None
    untrusted, report.deep_checked = untrusted_vectors(store, recorded or manifest.encoder, manifest,
                                                       index, deep)
    if untrusted:
        report.mismatched = [str(vector) for vector in untrusted[:DAMAGED_LISTED]]
        report.problems.append(f"{len(untrusted)} stored vectors are not their question's (the first: "
                               f"question {untrusted[0]}): a repair embeds them again")
    if index is None:
        return
    report.vectors = index.ntotal
    stored, indexed = np.asarray(store.ids(), dtype=np.int64), np.sort(index.ids())
    if not np.array_equal(stored, indexed):
        missing = np.setdiff1d(stored, indexed).size
        extra = np.setdiff1d(indexed, stored).size
        report.problems.append(f"{missing} stored questions are not in the FAISS index and "
                               f"{extra} indexed ids are not in the database")
    try:
        lexical = load_lexical(index_dir, manifest)  # verifies size and checksum
    except IndexDirectoryError as err:
        report.problems.append(str(err))
        return
    if not np.array_equal(stored, lexical.doc_ids):
        report.problems.append(f"the lexical (BM25) index holds {len(lexical)} questions, the "
                               f"database {len(stored)}")


def untrusted_vectors(store: Store, identity: EncoderIdentity, manifest: Manifest | None,
                      index: SegmentedIndex | None, deep: bool = False) -> tuple[list[DamagedVector], int]:
    """Sound stored vectors (length, checksum and norm verified) that are not their question's:
    its text changed in the database without being embedded again (its content hash); a vector
    other than its copy in ``index``, the FAISS file ``manifest`` names, where that is of the
    store's generation and holds its vectors whole (flat, HNSW); and with ``deep``, of a seeded
    sample of DEEP_SAMPLE questions embedded again from their text by the index's model, one
    whose cosine to the stored vector is under DEEP_MIN_COSINE. Also returns how many ``deep``
    embedded."""
    found = {vector.id: vector for vector in store.edited_texts()}
    fresh = manifest is not None and index is not None and manifest.generation == store.generation()
    for vector in _unlike_the_faiss_file(store, index, identity.dim) if fresh else []:
        found.setdefault(vector.id, vector)
    checked = 0
    if deep:
        unlike, checked = _unlike_their_text(store, identity)
        for vector in unlike:
            found.setdefault(vector.id, vector)
    return sorted(found.values(), key=lambda vector: vector.id), checked


def _unlike_the_faiss_file(store: Store, index: SegmentedIndex, dim: int) -> list[DamagedVector]:
    held = HeldVectors.of(index)
    if held is None:  # IVF: no float32 copies to compare
        return []
    different: list[int] = []
    for ids, vectors in store.vectors(dim, skip_damaged=True):
        copies = held.get(ids)
        different += [int(i) for i, vector in zip(ids, vectors, strict=True)
                      if int(i) in copies and np.abs(copies[int(i)] - vector).max() > HELD_TOLERANCE]
    questions = store.fetch(different)
    return [DamagedVector(i, questions[i].source, questions[i].external_id, "its vector is not the FAISS "
                          "file's copy of it (changed in the database since)") for i in different]


def _unlike_their_text(store: Store, identity: EncoderIdentity) -> tuple[list[DamagedVector], int]:
    """The sample of ``untrusted_vectors(deep=True)``, and its size."""
    ids = np.asarray(store.ids(), dtype=np.int64)
    damaged = {vector.id for vector in store.damaged_vectors(identity.dim)}
    ids = ids[~np.isin(ids, list(damaged))]
    sample = np.sort(np.random.default_rng(0).choice(ids, size=min(DEEP_SAMPLE, len(ids)), replace=False))
    encoder = _index_encoder(identity, "check --deep embeds a sample of the questions again")
    questions, stored = store.fetch(sample.tolist()), store.vectors_of(sample.tolist(), identity.dim)
    unlike: list[DamagedVector] = []
    for chunk in chunked([q for q in questions.values() if q.id in stored], REEMBED_CHUNK):
        fresh = encoder.encode([join_subject_body(q.subject, q.body) for q in chunk])
        for question, vector in zip(chunk, fresh, strict=True):
            cosine = float(stored[question.id] @ vector)
            if cosine < DEEP_MIN_COSINE:
                unlike.append(DamagedVector(question.id, question.source, question.external_id,
                                            f"its vector is not its text's: cosine {cosine:.4f} to the "
                                            "text embedded again"))
    return unlike, len(sample)


def _index_encoder(identity: EncoderIdentity, why: str) -> Encoder:
    """The index's own model, refused when its weights are no longer those that embedded it."""
    if weights_fingerprint(identity.model) != identity.fingerprint:
        raise IndexDirectoryError(f"{why}, and the index's model {identity.model} now has other "
                                  "weights (or another export) than those that embedded the rest: "
                                  "rebuild the index with "
                                  "`askalike index` into a new --index directory")
    return load_encoder(identity.model)


@dataclass
class Repair:
    manifest: Manifest
    reembedded: int  # stored vectors embedded again: damaged, or not their question's


def repair_index(index_dir: Path, database: str | None = None, deep: bool = False) -> Repair:
    """Rebuild the FAISS and BM25 files (and manifest) from the database, once the vectors it
    cannot trust are embedded again from their stored text (only they are: the damaged ones and
    ``untrusted_vectors``) and a schema-1 database is upgraded."""
    if not index_dir.is_dir() or not (database or (index_dir / MANIFEST_FILE).is_file()
                                      or (index_dir / SQLITE_FILE).is_file()):
        raise IndexDirectoryError(f"{index_dir}: no index to repair (no manifest and no database); "
                                  "build one with `askalike index`")
    with index_lock(index_dir):
        try:
            manifest = read_manifest(index_dir)
        except IndexDirectoryError:  # an unreadable manifest is what this rebuilds
            manifest = None
        url = (resolve_database(index_dir, database) if database or manifest is not None
               else default_database_url(index_dir))
        with Store(url, read_only=True) as store:  # first only read: nothing is created in a wrong one
            store.require_owner(index_id(index_dir))
            if store.encoder() is None:
                raise IndexDirectoryError(f"{index_dir}: the database holds no vectors yet; run "
                                          "`askalike index` first")
        with Store(url) as store:
            encoder = store.encoder()
            assert encoder is not None  # checked above, under the index lock
            untrusted = store.damaged_vectors(encoder.dim) + untrusted_vectors(
                store, encoder, manifest, _faiss_or_none(index_dir, manifest), deep)[0]
            reembedded = _reembed(store, encoder, sorted({vector.id for vector in untrusted}))
            index_type, _ = resolved_index_type(store, None, manifest, store.count())
            rebuilt, _ = sync_vector_index(index_dir, store, encoder, index_type, url, manifest, rebuild=True)
            store.record_index_type(index_type)
            return Repair(rebuilt, reembedded)


def _faiss_or_none(index_dir: Path, manifest: Manifest | None) -> SegmentedIndex | None:
    """The FAISS file ``manifest`` names, where it is there and sound (a repair rebuilds it)."""
    try:
        return load_faiss(index_dir, manifest) if manifest is not None else None
    except IndexDirectoryError:
        return None


def _reembed(store: Store, identity: EncoderIdentity, ids: list[int]) -> int:
    """Embed the questions ``ids`` again from their stored text, with the model that embedded the
    rest, and store each vector with its text's content hash."""
    if not ids:
        return 0
    encoder = _index_encoder(identity, f"{len(ids)} stored vectors are to be embedded again")
    questions = store.fetch(ids)
    for chunk in chunked(questions.values(), REEMBED_CHUNK):
        vectors = encoder.encode([join_subject_body(q.subject, q.body) for q in chunk])
        store.replace_vectors({q.id: vector for q, vector in zip(chunk, vectors, strict=True)},
                              {q.id: content_hash(q.subject, q.body) for q in chunk})
    return len(ids)
