"""The FAISS index types, one class each, in one registry (``INDEX_TYPES``): what a type is for
(the CLI's help says it), its build and search parameters for a collection's size, its FAISS
factory string and build-time settings, the recorded settings a search may override, and how a
search raises them for k and a filter.

To add a type: a subclass here, listed in ``INDEX_TYPES``; ``auto``'s choice by size is
``indexer.index_type_choice``'s. Light (no FAISS, no numpy at import): the CLI reads it at start-up; the
FAISS calls of ``prepare`` import FAISS when a build runs. The figures behind the parameters are
in docs/benchmarks.md ("Search latency and recall", and "Scale" by bench/scale.py).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from askalike.core.errors import UserError

TUNED_K = 10  # the results per query that the recorded search settings were tuned for
# up to this many questions passing, a search scans them: scoring 10,000 vectors of 384
# dimensions takes about 2 ms on one core, no more than an HNSW search raised for the filter
SCAN_MAX = 10_000


class IndexBuildError(UserError, ValueError):
    """An index type that cannot be built for this collection, or a run that cannot go ahead."""


class IndexType:
    """One FAISS index type. ``search_settings``: the recorded parameters a search may override
    (``search --ef-search``, ``--nprobe``, ``--k-factor``)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    search_settings: ClassVar[tuple[str, ...]] = ()

    def parameters(self, count: int, dim: int) -> dict[str, Any]:
        """Build and search parameters for ``count`` vectors of ``dim`` dimensions."""
        return {}

    def factory_key(self, parameters: dict[str, Any]) -> str:
        """The FAISS ``index_factory`` string (ids kept by an IDMap2 above the index)."""
        raise NotImplementedError

    def prepare(self, index: Any, parameters: dict[str, Any]) -> None:
        """Build-time settings on the new FAISS index, before it trains and takes vectors."""

    def raised_settings(self, parameters: dict[str, Any], count: int, depth: float,
                        matches: int) -> dict[str, int] | None:
        """The search settings that reach ``depth`` times as deep as the recorded ones (see
        ``query_settings``); None where scanning the ``matches`` vectors exactly costs no more."""
        return None

    def query_settings(self, parameters: dict[str, Any], count: int, matches: int,
                       k: int) -> dict[str, int] | None:
        """The settings with which this index of ``count`` vectors finds the best ``k`` of the
        ``matches`` that pass a filter (``count`` without one); None where scanning the matching
        vectors exactly costs no more (and always for an exact index).

        The recorded settings (``parameters``) reach their recall for the best ``TUNED_K`` of
        all vectors. The k-th best of a share s of the collection lies about as deep as the
        (k / s)-th best of all, so HNSW keeps, and IVF reads, ``max(k, TUNED_K) / (TUNED_K * s)``
        times as many candidates or lists: without the raise a filter passing 1% leaves an HNSW
        search with one passing candidate in a hundred, and of a k beyond ef_search only some come
        back (1,592 of 5,000 with ef_search 128 at 20,000 questions). Wherever no more than
        ``SCAN_MAX`` pass, the scan is chosen."""
        if matches <= SCAN_MAX:
            return None
        depth = max(k, TUNED_K) * count / (TUNED_K * matches)
        return self.raised_settings(parameters, count, depth, matches)


class Flat(IndexType):
    """Exact: a query reads every vector, 14 ms at 100,000 vectors of 384 dimensions on one core
    and growing linearly (126 ms at 1M), while building costs nothing."""

    name = "flat"
    summary = "exact"

    def factory_key(self, parameters: dict[str, Any]) -> str:
        return "IDMap2,Flat"


class Hnsw(IndexType):
    """A graph: 1.6 ms a query and recall@10 0.964 at 1M with ef_search 256; it keeps the full
    vectors plus its graph (about 1.8 KB a 384-dimension vector, 3.6 GB at 2M) and its build
    grows faster than linearly (9 min at 1M on 2 cores)."""

    name = "hnsw"
    summary = "a graph, M = 32, efSearch 128 to 256 by size"
    search_settings = ("ef_search",)
    LINKS = 32
    EF_CONSTRUCTION = 80
    # vectors an HNSW search scores per candidate it keeps: about 13 at ef_search 128, 10 at 512
    # and 6 at 2,048 (faiss.cvar.hnsw_stats on 20,000 questions of models/fast)
    SCORED_PER_EF = 8

    @staticmethod
    def ef_search(count: int) -> int:
        """Candidates a search keeps. With models/fast on conversation texts (bench.scale) recall@10
        was 0.929 at 100k with 64 (0.979 with 128, 0.47 ms a query), 0.951 at 300k with 128 and
        0.964 at 1M with 256 (1.6 ms), so 128 up to 500k and 256 above."""
        return 128 if count <= 500_000 else 256

    def parameters(self, count: int, dim: int) -> dict[str, Any]:
        return {"links": self.LINKS, "ef_construction": self.EF_CONSTRUCTION,
                "ef_search": self.ef_search(count)}

    def factory_key(self, parameters: dict[str, Any]) -> str:
        return f"IDMap2,HNSW{parameters['links']}"

    def prepare(self, index: Any, parameters: dict[str, Any]) -> None:
        import faiss

        faiss.downcast_index(index.index).hnsw.efConstruction = parameters["ef_construction"]

    def raised_settings(self, parameters: dict[str, Any], count: int, depth: float,
                        matches: int) -> dict[str, int] | None:
        """Where the raised search would score about as many vectors as pass, the scan."""
        ef_search = math.ceil((parameters.get("ef_search") or self.ef_search(count)) * depth)
        return None if self.SCORED_PER_EF * ef_search >= matches else {"ef_search": ef_search}


class Ivf(IndexType):
    """Inverted lists: about 4 sqrt(n) lists, each with enough points to train its centroid."""

    name = "ivf"
    summary = "about 4 sqrt(n) lists, nprobe 3 sqrt(lists), at least 8"
    search_settings = ("probes",)

    @staticmethod
    def probes(lists: int) -> int:
        """Lists a search reads: 3 sqrt(lists), at least 8. The nearest questions of a distinct
        text spread over many lists: at 20,000 conversation texts (512 lists), reading 16 gave
        recall@10 0.78, 64 gave 0.95 and 128 0.99, whatever the refinement (bench.scale); at 4,000
        lists (1M) this reads 190, about 5% of the vectors."""
        return min(lists, max(8, math.ceil(3 * math.sqrt(lists))))

    def parameters(self, count: int, dim: int) -> dict[str, Any]:
        lists = max(1, min(int(4 * math.sqrt(count)), count // 39))
        return {"lists": lists, "probes": self.probes(lists)}

    def factory_key(self, parameters: dict[str, Any]) -> str:
        return f"IDMap2,IVF{parameters['lists']},Flat"

    def raised_settings(self, parameters: dict[str, Any], count: int, depth: float,
                        matches: int) -> dict[str, int] | None:
        """Where the raised search would read every list (the exact scan), the scan."""
        lists = parameters["lists"]
        probes = math.ceil((parameters.get("probes") or self.probes(lists)) * depth)
        return None if probes >= lists else {"probes": probes}


class IvfPq(Ivf):
    """Product-quantised codes (a coarse, fast pass) whose best ``k * k_factor`` candidates are
    re-scored on fp16 copies of the vectors (``Refine(SQfp16)``: half the memory of full vectors,
    cosines exact to about 1e-3), trained on samples of bounded size, so memory and build time
    stay linear."""

    name = "ivfpq"
    summary = "ivf with product quantisation, the best candidates re-scored on fp16 vectors"
    search_settings = ("probes", "k_factor")
    MIN_TRAINING = 39 * 16  # FAISS wants >= 39 training points per centroid, 2^4 centroids at least
    REFINE = "SQfp16"  # what the refinement re-scores: fp16 copies of the vectors
    # codebooks train on at most 64 points a centroid (16,384 for 8 bits; FAISS would take
    # 65,536): their k-means runs in the sub-vectors' few dimensions, where FAISS has no fast
    # kernel, and the refinement re-scores candidates on the vectors anyway
    TRAINING_PER_CENTROID = 64

    @staticmethod
    def k_factor(count: int) -> int:
        """Candidates per result that the refinement re-scores: the more vectors, the more of them
        product quantisation cannot tell apart; re-scoring 32 x 10 fp16 vectors takes
        microseconds."""
        return 16 if count <= 200_000 else 32

    def parameters(self, count: int, dim: int) -> dict[str, Any]:
        if count < self.MIN_TRAINING:
            raise IndexBuildError(f"ivfpq needs at least {self.MIN_TRAINING} questions to train its "
                                  f"codebooks ({count} here): use flat or hnsw")
        subquantizers = max(m for m in range(1, min(dim // 4, 64) + 1) if dim % m == 0)
        bits = min(8, int(math.log2(count // 39)))
        return {**super().parameters(count, dim), "subquantizers": subquantizers, "bits": bits,
                "refine": self.REFINE, "k_factor": self.k_factor(count)}

    def factory_key(self, parameters: dict[str, Any]) -> str:
        # np: no polysemous training (a slow reordering of the codes for Hamming filtering, unused)
        return (f"IDMap2,IVF{parameters['lists']},PQ{parameters['subquantizers']}x{parameters['bits']}np,"
                f"Refine({parameters['refine']})")

    def prepare(self, index: Any, parameters: dict[str, Any]) -> None:
        import faiss

        faiss.downcast_index(faiss.extract_index_ivf(index)).pq.cp.max_points_per_centroid = (
            self.TRAINING_PER_CENTROID)

    def raised_settings(self, parameters: dict[str, Any], count: int, depth: float,
                        matches: int) -> dict[str, int] | None:
        raised = super().raised_settings(parameters, count, depth, matches)
        if raised is None or "k_factor" not in parameters:  # an index recorded before k_factor
            return raised
        return {**raised, "k_factor": parameters["k_factor"]}


INDEX_TYPES: dict[str, IndexType] = {kind.name: kind for kind in (Flat(), Hnsw(), Ivf(), IvfPq())}
# each search setting a type may record, and the option of `search` and `tui` that overrides it
SEARCH_OPTIONS = {"ef_search": "--ef-search", "probes": "--nprobe", "k_factor": "--k-factor"}


def types_with_setting(setting: str) -> str:
    """The index types whose searches take ``setting``, in words (``ivf and ivfpq``)."""
    return " and ".join(kind.name for kind in INDEX_TYPES.values() if setting in kind.search_settings)


def named_index_type(name: str) -> IndexType:
    """The registered type of this name; an IndexBuildError naming the known ones otherwise."""
    if name not in INDEX_TYPES:
        raise IndexBuildError(f"unknown index type {name!r} (known: {', '.join(INDEX_TYPES)})")
    return INDEX_TYPES[name]
