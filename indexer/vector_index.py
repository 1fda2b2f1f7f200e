"""FAISS indexes over L2-normalised vectors (inner product = cosine), keyed by question row id.

Parameters are chosen from the collection size and recorded in the manifest, so that a search
uses what the build chose. Files are written under a temporary name, synced and renamed.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexer.choices import INDEX_TYPES
from train.errors import UserError
from train.files import OutputError, atomic_write, file_sha256

HNSW_LINKS = 32
PQ_MIN_TRAINING = 39 * 16  # FAISS wants >= 39 training points per centroid, 2^4 centroids at least


class IndexBuildError(UserError, ValueError):
    """An index type that cannot be built for this collection."""


def choose_parameters(index_type: str, count: int, dim: int) -> dict[str, Any]:
    """Build and search parameters for ``count`` vectors of ``dim`` dimensions."""
    if index_type == "flat":
        return {}
    if index_type == "hnsw":
        return {"links": HNSW_LINKS, "ef_construction": 80, "ef_search": 128}
    # IVF: about 4 sqrt(n) lists, each with enough points to train its centroid
    lists = max(1, min(int(4 * math.sqrt(count)), count // 39))
    probes = min(lists, max(8, math.ceil(lists / 32)))
    if index_type == "ivf":
        return {"lists": lists, "probes": probes}
    if index_type == "ivfpq":
        if count < PQ_MIN_TRAINING:
            raise IndexBuildError(f"ivfpq needs at least {PQ_MIN_TRAINING} questions to train its "
                                  f"codebooks ({count} here): use flat or hnsw")
        subquantizers = max(m for m in range(1, min(dim // 4, 64) + 1) if dim % m == 0)
        bits = min(8, int(math.log2(count // 39)))
        return {"lists": lists, "probes": probes, "subquantizers": subquantizers, "bits": bits}
    raise IndexBuildError(f"unknown index type {index_type!r} (known: {', '.join(INDEX_TYPES)})")


def _factory_key(index_type: str, parameters: dict[str, Any]) -> str:
    if index_type == "flat":
        return "IDMap2,Flat"
    if index_type == "hnsw":
        return f"IDMap2,HNSW{parameters['links']}"
    if index_type == "ivf":
        return f"IDMap2,IVF{parameters['lists']},Flat"
    return f"IDMap2,IVF{parameters['lists']},PQ{parameters['subquantizers']}x{parameters['bits']}"


def build_index(index_type: str, parameters: dict[str, Any], dim: int, ids: np.ndarray,
                vectors: np.ndarray) -> faiss.Index:
    """A new CPU index holding ``vectors`` under ``ids``. IVF clustering runs on the GPU when
    FAISS sees one; the index that comes back always lives on the CPU, ready to write."""
    index = faiss.index_factory(dim, _factory_key(index_type, parameters), faiss.METRIC_INNER_PRODUCT)
    inner = faiss.downcast_index(index.index)
    if index_type == "hnsw":
        inner.hnsw.efConstruction = parameters["ef_construction"]
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None and len(vectors):
        if faiss.get_num_gpus():
            ivf.clustering_index = faiss.index_cpu_to_all_gpus(faiss.IndexFlatIP(dim))
        index.train(_training_sample(vectors, parameters["lists"]))
    if len(vectors):
        index.add_with_ids(vectors, ids)
    configure_search(index, index_type, parameters)
    return index


def _training_sample(vectors: np.ndarray, lists: int, per_list: int = 64) -> np.ndarray:
    """At most 64 points per list, drawn reproducibly: FAISS asks for 39 to 256, and k-means time
    grows linearly with the sample (at 1M vectors and ~4,000 lists, 256 per list is all of them)."""
    limit = lists * per_list
    if len(vectors) <= limit:
        return vectors
    chosen = np.sort(np.random.default_rng(0).choice(len(vectors), size=limit, replace=False))
    return vectors[chosen]


def configure_search(index: faiss.Index, index_type: str, parameters: dict[str, Any]) -> None:
    """Apply the recorded search-time parameters (probes, ef_search) to a loaded index."""
    ivf = faiss.try_extract_index_ivf(index)
    if ivf is not None:
        ivf.nprobe = parameters["probes"]
    if index_type == "hnsw":
        faiss.downcast_index(index.index).hnsw.efSearch = parameters["ef_search"]


def write_index(index: faiss.Index, path: Path) -> str:
    """Write ``index`` to ``path`` atomically (temporary file, fsync, rename); its sha256."""
    try:
        with atomic_write(path) as temporary:
            faiss.write_index(index, str(temporary))
            digest = file_sha256(temporary)
    except (RuntimeError, OutputError) as err:
        # FAISS reports a failed write (a full disk, a file size limit) as a RuntimeError
        # whose last parenthesis holds the system's reason
        reason = re.findall(r"\(([^()]*)\)", str(err)) or [str(err).splitlines()[0]]
        raise IndexBuildError(f"{path}: cannot write the index file ({reason[-1]}); the previous "
                              "index is kept and the database holds every committed question: free "
                              "some space and run the same command again") from None
    return digest


def read_index(path: Path) -> faiss.Index:
    return faiss.read_index(str(path))


def index_ids(index: faiss.Index) -> np.ndarray:
    return faiss.vector_to_array(index.id_map).astype(np.int64)
