"""FAISS indexes over L2-normalised vectors (inner product = cosine), keyed by question row id.

An index is built from a stream of (ids, vectors) chunks, so that building never needs every
vector twice in memory; IVF indexes train first on a reproducible sample. Parameters come from
``indexer.index_types`` and are recorded in the manifest, so that a search uses what the build chose.
Files are written under a temporary name, synced and renamed.

What a state of an index directory searches is a ``SegmentedIndex``: the main index and, where
questions were added since its file was written, a small flat index of those, searched beside it
(``indexer.sync`` says when the two are folded into one).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from askalike.core.files import OutputError, atomic_write, remember_sha256
from askalike.core.sorted_ids import find_sorted
from askalike.indexer.index_types import IndexBuildError, named_index_type

TRAINING_PER_LIST = 64  # FAISS asks for 39 to 256 training points per IVF list
GPU_MAX_K = 2048  # the most hits a query that FAISS's GPU search returns
# fp16 keeps 11 significant bits, so each coordinate is within 2^-11 of its own size and the
# cosine of two unit vectors within 2^-11 (4.9e-4) of the exact one; twice that, to be safe
FP16_COSINE_ERROR = 1e-3
NO_HIT_COSINE = float(np.finfo(np.float32).min)  # FAISS's score where an inner-product search found no more
Chunks = Iterable[tuple[np.ndarray, np.ndarray]]  # (int64 ids, float32 vectors) a chunk at a time


def training_size(parameters: dict[str, Any]) -> int:
    """How many vectors an index with these parameters trains on (0: it needs no training).
    At most 64 a list: k-means time grows linearly with the sample, and at 1M vectors and
    ~4,000 lists 256 a list would be all of them."""
    return parameters.get("lists", 0) * TRAINING_PER_LIST


def training_sample(chunks: Chunks, count: int, size: int) -> np.ndarray:
    """``size`` of the ``count`` vectors that ``chunks`` yields, drawn reproducibly (all of them
    when there are no more), read one chunk at a time."""
    if count <= size:
        return np.concatenate([vectors for _, vectors in chunks])
    chosen = np.sort(np.random.default_rng(0).choice(count, size=size, replace=False))
    picked, start = [], 0
    for _, vectors in chunks:
        inside = chosen[(chosen >= start) & (chosen < start + len(vectors))]
        picked.append(vectors[inside - start])
        start += len(vectors)
    return np.concatenate(picked)


def build_index(index_type: str, parameters: dict[str, Any], dim: int, chunks: Chunks,
                training: np.ndarray | None = None) -> faiss.Index:
    """A new CPU index of the vectors ``chunks`` yields, trained first on ``training`` when its
    type needs it. IVF clustering runs on the GPU when FAISS sees one; the index that comes back
    always lives on the CPU, ready to write."""
    kind = named_index_type(index_type)
    index = faiss.index_factory(dim, kind.factory_key(parameters), faiss.METRIC_INNER_PRODUCT)
    kind.prepare(index, parameters)
    if not index.is_trained and training is not None and len(training):
        if faiss.get_num_gpus():
            faiss.extract_index_ivf(index).clustering_index = faiss.index_cpu_to_all_gpus(
                faiss.IndexFlatIP(dim))
        index.train(training)
    for ids, vectors in chunks:
        if len(ids):
            index.add_with_ids(vectors, ids)
    configure_search(index, parameters)
    return index


def gpu_copy(index: faiss.Index) -> faiss.Index | None:
    """``index`` copied to every GPU that FAISS sees (the ``gpu`` extra), for searches without a
    filter; None with CPU FAISS, without a GPU, or when it does not fit. Only an exact (flat)
    index: HNSW has no GPU form, FAISS cannot copy the refined IVF-PQ, and IVF clustering already
    runs on the GPU when the index is built."""
    if not faiss.get_num_gpus() or not isinstance(_inner(index), faiss.IndexFlat):
        return None
    try:
        return faiss.index_cpu_to_all_gpus(index)
    except RuntimeError:  # out of GPU memory: the CPU index answers
        return None


def _inner(index: faiss.Index) -> faiss.Index:
    """The index an IDMap2 wraps (the index itself when it wraps none)."""
    return faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else index


def configure_search(index: faiss.Index, parameters: dict[str, Any]) -> None:
    """Apply search-time parameters (probes, ef_search, k_factor) to a loaded index; those the
    index has no use for, or that an older manifest lacks, are left as they are."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and "probes" in parameters:
        ivf.nprobe = parameters["probes"]
    inner = _inner(index)
    if isinstance(inner, faiss.IndexHNSW) and "ef_search" in parameters:
        inner.hnsw.efSearch = parameters["ef_search"]
    if isinstance(inner, faiss.IndexRefine) and "k_factor" in parameters:
        inner.k_factor = parameters["k_factor"]


def search_parameters(index: faiss.Index, allowed: np.ndarray | None,
                      settings: dict[str, int]) -> faiss.SearchParameters:
    """Search parameters for one search of ``index``: ``settings`` (ef_search, probes,
    k_factor; ``IndexType.query_settings``) in place of the index's own, and restricted to
    the ids in ``allowed`` (None: every id). IVF and HNSW want their own parameter types, and a
    refined index passes the selector to its first stage, in that stage's positions (the IDMap2
    above it translates only the outer selector)."""
    selector = None if allowed is None else faiss.IDSelectorBatch(allowed)
    ivf, inner = faiss.try_extract_index_ivf(index), _inner(index)
    if isinstance(inner, faiss.IndexRefine):
        translated = None if selector is None else faiss.IDSelectorTranslated(index.id_map, selector)
        base = faiss.SearchParametersIVF(sel=translated, nprobe=settings.get("probes", ivf.nprobe))
        return faiss.IndexRefineSearchParameters(k_factor=settings.get("k_factor", inner.k_factor),
                                                 base_index_params=base)
    if ivf is not None:
        return faiss.SearchParametersIVF(sel=selector, nprobe=settings.get("probes", ivf.nprobe))
    if isinstance(inner, faiss.IndexHNSW):
        return faiss.SearchParametersHNSW(sel=selector,
                                          efSearch=settings.get("ef_search", inner.hnsw.efSearch))
    return faiss.SearchParameters(sel=selector)


def scan(index: faiss.Index, vectors: np.ndarray, k: int,
         allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of every vector ``index`` holds (only the ids in ``allowed`` when given),
    scored one by one: (cosines, ids) as FAISS's search returns them, -1 where fewer pass. Exact
    for flat, hnsw (its flat storage) and ivf (every list read); a refined ivfpq index scores its
    fp16 copies, within ``cosine_error(index)`` of the exact cosines."""
    selector = None if allowed is None else faiss.IDSelectorBatch(allowed)
    inner, ivf = _inner(index), faiss.try_extract_index_ivf(index)
    if isinstance(inner, faiss.IndexHNSW | faiss.IndexRefine):
        storage = inner.storage if isinstance(inner, faiss.IndexHNSW) else inner.refine_index
        translated = None if selector is None else faiss.IDSelectorTranslated(index.id_map, selector)
        cosines, positions = faiss.downcast_index(storage).search(
            vectors, k, params=None if translated is None else faiss.SearchParameters(sel=translated))
        return cosines, np.where(positions >= 0, index_ids(index)[positions], -1)
    if ivf is not None:
        return index.search(vectors, k, params=faiss.SearchParametersIVF(sel=selector, nprobe=ivf.nlist))
    return index.search(vectors, k, params=None if selector is None else faiss.SearchParameters(sel=selector))


# the sort for an index's ids, which come in the order they were added: rising (a build reads the
# store by id, and questions added later have higher ids). numpy's stable sort (timsort) takes
# sorted input in one pass: sorting 100,000 took 0.05 ms so, 3.7 ms by its default, at every
# state a server opened (its default argsort was already quick: 0.2 ms)
ALREADY_SORTED = "stable"


class HeldVectors:
    """The float32 vectors a flat or HNSW index holds, looked up by question id: the vectors the
    store holds too (both are written from one embedding), read without a database query. A
    search reads a hundred or more of them, and at 100,000 questions reading them from the
    database was the largest part of a hybrid search's time."""

    def __init__(self, parts: Sequence[tuple[np.ndarray, faiss.IndexFlat]]) -> None:
        """``parts``: (ids, the flat storage holding their vectors in that order), one a segment."""
        self._storages = [storage for _, storage in parts]
        ids = np.concatenate([part_ids for part_ids, _ in parts])
        self._part = np.concatenate([np.full(len(part_ids), number, dtype=np.int64)
                                     for number, (part_ids, _) in enumerate(parts)])
        self._position = np.concatenate([np.arange(len(part_ids)) for part_ids, _ in parts])
        self._order = np.argsort(ids, kind=ALREADY_SORTED)
        self._sorted_ids = ids[self._order]

    @classmethod
    def of(cls, index: SegmentedIndex) -> HeldVectors | None:
        """None where the main index keeps no float32 copy it can read back by position (IVF, ivfpq)."""
        storage = _flat_storage(index.main)
        if storage is None:
            return None
        parts = [(index_ids(index.main), storage)]
        if index.added is not None:
            parts.append((index_ids(index.added), _flat_storage(index.added)))
        return cls(parts)

    def arrays(self, ids: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(those of ``ids`` the index holds, in their order; their vectors, one a row)."""
        wanted, held, slots = find_sorted(self._sorted_ids, ids)
        rows = self._order[slots[held]]
        vectors = np.empty((len(rows), self._storages[0].d), dtype=np.float32)
        for number, storage in enumerate(self._storages):
            inside = self._part[rows] == number
            if inside.any():
                vectors[inside] = storage.reconstruct_batch(self._position[rows[inside]])
        return wanted[held], vectors

    def get(self, ids: Sequence[int] | np.ndarray) -> dict[int, np.ndarray]:
        """``arrays`` by id."""
        held, vectors = self.arrays(ids)
        return dict(zip(held.tolist(), vectors, strict=True))


def _flat_storage(index: faiss.Index) -> faiss.IndexFlat | None:
    """The float32 vectors of a flat or HNSW index, in the order of ``index_ids``."""
    inner = _inner(index)
    storage = faiss.downcast_index(inner.storage) if isinstance(inner, faiss.IndexHNSW) else inner
    return storage if isinstance(storage, faiss.IndexFlat) else None


def cosine_error(index: faiss.Index) -> float:
    """How far the cosines ``index`` returns may be from the exact ones: 0 where it keeps the
    vectors in float32, ``FP16_COSINE_ERROR`` for a refined (ivfpq) index."""
    return FP16_COSINE_ERROR if isinstance(_inner(index), faiss.IndexRefine) else 0.0


def write_index(index: faiss.Index, path: Path) -> str:
    """Write ``index`` to ``path`` atomically (temporary file, fsync, rename); its sha256,
    computed from the bytes as they are written (``files.remember_sha256``)."""
    digest = hashlib.sha256()

    def written(chunk: bytes) -> None:
        digest.update(chunk)
        handle.write(chunk)

    try:
        with atomic_write(path) as temporary, open(temporary, "wb") as handle:
            faiss.write_index(index, faiss.PyCallbackIOWriter(written))
    except (RuntimeError, OutputError) as err:
        # FAISS reports a failed write (a full disk, a file size limit) as a RuntimeError
        # whose last parenthesis holds the system's reason
        reason = re.findall(r"\(([^()]*)\)", str(err)) or [str(err).splitlines()[0]]
        raise IndexBuildError(f"{path}: cannot write the index file ({reason[-1]}); the previous "
                              "index is kept and the database holds every committed question: free "
                              "some space and run the same command again") from None
    remember_sha256(path, digest.hexdigest())
    return digest.hexdigest()


def read_index(path: Path, mapped: bool = False) -> faiss.Index:
    """The index in ``path``; ``mapped``: its flat vectors (a flat index's, HNSW's storage,
    ivfpq's refinement copies) mapped from the file, not copied, for an index that is only
    searched. Files are never changed once written (a write makes a new file and switches the
    manifest to it), so the mapping stays valid; at 100,000 questions an HNSW file opens in
    23 ms instead of 430."""
    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mapped else 0)


def index_ids(index: faiss.Index) -> np.ndarray:
    return faiss.vector_to_array(index.id_map).astype(np.int64)


def added_index(dim: int) -> faiss.Index:
    """A new index for the questions added since the main file: flat, so exact and cheap to
    extend and to write."""
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dim))


def merged_hits(parts: Sequence[tuple[np.ndarray, np.ndarray]], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of each query over several searches' (cosines, ids), as FAISS returns
    them: best first, -1 (and ``NO_HIT_COSINE``) where fewer were found."""
    ids = np.concatenate([part_ids for _, part_ids in parts], axis=1)
    cosines = np.where(ids >= 0, np.concatenate([part for part, _ in parts], axis=1), NO_HIT_COSINE)
    order = np.argsort(-cosines, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(cosines, order, axis=1), np.take_along_axis(ids, order, axis=1)


class SegmentedIndex:
    """The vectors of one state of an index directory: the ``main`` FAISS index (any type) and
    ``added``, a flat index of the questions added since the main file was written (every id
    above the main's; None: none), searched beside it, the hits merged by cosine. A write of a
    few questions then writes a file the size of what was added since the main file, not the
    whole index (at 100,000 questions that was 170 MB written, hashed and synced for every 100
    questions added)."""

    def __init__(self, main: faiss.Index, added: faiss.Index | None = None) -> None:
        self.main = main
        self.added = added if added is not None and added.ntotal else None

    @property
    def ntotal(self) -> int:
        return int(self.main.ntotal) + (int(self.added.ntotal) if self.added is not None else 0)

    @property
    def added_count(self) -> int:
        return 0 if self.added is None else int(self.added.ntotal)

    def ids(self) -> np.ndarray:
        """Every id held, the main index's first."""
        main = index_ids(self.main)
        return main if self.added is None else np.concatenate([main, index_ids(self.added)])

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` of each vector with the main index's own search settings (as a FAISS
        index searches: ``collection_duplicates.NeighbourSearch``)."""
        return self._with_added(self.main.search(vectors, k), vectors, k, None)

    def approximate(self, vectors: np.ndarray, k: int, allowed: np.ndarray | None,
                    settings: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` among ``allowed`` (None: all), the main index searched with ``settings``
        (``search_parameters``), the added questions exactly."""
        found = self.main.search(vectors, k, params=search_parameters(self.main, allowed, settings))
        return self._with_added(found, vectors, k, allowed)

    def scan(self, vectors: np.ndarray, k: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Every vector scored (module ``scan``): exact, but for ivfpq's fp16 copies."""
        return self._with_added(scan(self.main, vectors, k, allowed), vectors, k, allowed)

    def _with_added(self, found: tuple[np.ndarray, np.ndarray], vectors: np.ndarray, k: int,
                    allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        if self.added is None:
            return found
        return merged_hits([found, scan(self.added, vectors, k, allowed)], k)

    @property
    def cosine_error(self) -> float:
        return cosine_error(self.main)

    def on_gpu(self) -> SegmentedIndex | None:
        """The main index copied to the GPUs (``gpu_copy``; the few added stay on the CPU), or None."""
        main = gpu_copy(self.main)
        return None if main is None else SegmentedIndex(main, self.added)

    def folded(self) -> SegmentedIndex:
        """The added questions moved into the main index (which must be writable, not mapped)."""
        if self.added is not None:
            vectors = faiss.downcast_index(self.added.index).reconstruct_n(0, self.added.ntotal)
            self.main.add_with_ids(vectors, index_ids(self.added))
        return SegmentedIndex(self.main)
