"""Which FAISS index suits a collection of a given size, and its build and search parameters.

Light (no FAISS, no numpy): the CLI and the dry run use it. The figures behind the thresholds are
in docs/benchmarks.md (sections "Search latency and recall", and "Scale" by bench/scale.py).

- ``flat`` (exact) up to ``AUTO_FLAT_MAX`` vectors: a query reads every vector, 14 ms at
  100,000 vectors of 384 dimensions on one core and growing linearly (126 ms at 1M), while
  building costs nothing.
- ``hnsw`` up to ``AUTO_HNSW_MAX``: 1.6 ms a query and recall@10 0.964 at 1M with ef_search 256;
  it keeps the full vectors plus its graph (about 1.8 KB a 384-dimension vector, 3.6 GB at 2M)
  and its build grows faster than linearly (9 min at 1M on 2 cores).
- ``ivfpq`` beyond: product-quantised codes (a coarse, fast pass) whose best ``k * k_factor``
  candidates are re-scored on fp16 copies of the vectors (``Refine(SQfp16)``: half the memory of
  full vectors, cosines exact to about 1e-3), trained on samples of bounded size, so memory and
  build time stay linear.

The recorded search settings reach their recall for the best 10 of all questions; a search for
more results, or among the few that pass a filter, raises them (``query_settings``) or scans the
matching vectors exactly where that costs no more.
"""

from __future__ import annotations

import math
from typing import Any

from core.errors import UserError
from indexer.choices import AUTO_INDEX_TYPE, INDEX_TYPES

AUTO_FLAT_MAX = 100_000
AUTO_HNSW_MAX = 2_000_000
HNSW_LINKS = 32
HNSW_EF_CONSTRUCTION = 80
PQ_MIN_TRAINING = 39 * 16  # FAISS wants >= 39 training points per centroid, 2^4 centroids at least
REFINE = "SQfp16"  # what the refinement re-scores: fp16 copies of the vectors
# the recorded parameters that a search may override, per index type (search --ef-search ...)
SEARCH_PARAMETERS: dict[str, tuple[str, ...]] = {
    "flat": (), "hnsw": ("ef_search",), "ivf": ("probes",), "ivfpq": ("probes", "k_factor")}
TUNED_K = 10  # the results per query that the recorded search settings were tuned for
# up to this many questions passing, a search scans them: scoring 10,000 vectors of 384
# dimensions takes about 2 ms on one core, no more than an HNSW search raised for the filter
SCAN_MAX = 10_000
# vectors an HNSW search scores per candidate it keeps: about 13 at ef_search 128, 10 at 512
# and 6 at 2,048 (faiss.cvar.hnsw_stats on 20,000 questions of models/fast)
HNSW_SCORED_PER_EF = 8


class IndexBuildError(UserError, ValueError):
    """An index type that cannot be built for this collection."""


def require_index_type(name: str | None) -> None:
    """Refuse an unknown --index-type before any work is done."""
    if name is not None and name != AUTO_INDEX_TYPE and name not in INDEX_TYPES:
        raise IndexBuildError(f"unknown index type {name!r} (known: {AUTO_INDEX_TYPE}, "
                              f"{', '.join(INDEX_TYPES)})")


def auto_index_type(count: int) -> tuple[str, str]:
    """The index type for ``count`` vectors, and why (for the user)."""
    if count <= AUTO_FLAT_MAX:
        return "flat", f"auto: exact search for {count:,} questions (flat up to {AUTO_FLAT_MAX:,})"
    if count <= AUTO_HNSW_MAX:
        return "hnsw", (f"auto: {count:,} questions, over flat's {AUTO_FLAT_MAX:,} and up to "
                        f"hnsw's {AUTO_HNSW_MAX:,}")
    return "ivfpq", f"auto: {count:,} questions, over hnsw's {AUTO_HNSW_MAX:,}"


def resolve_index_type(requested: str | None, current: str | None, count: int) -> tuple[str, str]:
    """The type to build and why: the one asked for; else an existing index keeps its own;
    ``auto`` (asked for, or for a new index) picks by ``count``."""
    require_index_type(requested)
    if requested is None and current is not None:
        return current, "the index's own type"
    if requested is None or requested == AUTO_INDEX_TYPE:
        return auto_index_type(count)
    return requested, "given by --index-type"


def hnsw_ef_search(count: int) -> int:
    """Candidates an HNSW search keeps. With models/fast on conversation texts (bench.scale,
    docs/benchmarks.md) recall@10 was 0.929 at 100k with 64 (0.979 with 128, 0.47 ms a query),
    0.951 at 300k with 128 and 0.964 at 1M with 256 (1.6 ms), so 128 up to 500k and 256 above."""
    return 128 if count <= 500_000 else 256


def ivf_probes(lists: int) -> int:
    """IVF lists a search reads: 3 sqrt(lists), at least 8. The nearest questions of a distinct
    text spread over many lists: at 20,000 conversation texts (512 lists), reading 16 gave
    recall@10 0.78, 64 gave 0.95 and 128 0.99, whatever the refinement (bench.scale); at 4,000
    lists (1M) this reads 190, about 5% of the vectors."""
    return min(lists, max(8, math.ceil(3 * math.sqrt(lists))))


def refine_k_factor(count: int) -> int:
    """Candidates per result that the refinement re-scores: the more vectors, the more of them
    product quantisation cannot tell apart; re-scoring 32 x 10 fp16 vectors takes microseconds."""
    return 16 if count <= 200_000 else 32


def choose_parameters(index_type: str, count: int, dim: int) -> dict[str, Any]:
    """Build and search parameters for ``count`` vectors of ``dim`` dimensions."""
    if index_type == "flat":
        return {}
    if index_type == "hnsw":
        return {"links": HNSW_LINKS, "ef_construction": HNSW_EF_CONSTRUCTION,
                "ef_search": hnsw_ef_search(count)}
    # IVF: about 4 sqrt(n) lists, each with enough points to train its centroid
    lists = max(1, min(int(4 * math.sqrt(count)), count // 39))
    probes = ivf_probes(lists)
    if index_type == "ivf":
        return {"lists": lists, "probes": probes}
    if index_type == "ivfpq":
        if count < PQ_MIN_TRAINING:
            raise IndexBuildError(f"ivfpq needs at least {PQ_MIN_TRAINING} questions to train its "
                                  f"codebooks ({count} here): use flat or hnsw")
        subquantizers = max(m for m in range(1, min(dim // 4, 64) + 1) if dim % m == 0)
        bits = min(8, int(math.log2(count // 39)))
        return {"lists": lists, "probes": probes, "subquantizers": subquantizers, "bits": bits,
                "refine": REFINE, "k_factor": refine_k_factor(count)}
    raise IndexBuildError(f"unknown index type {index_type!r} (known: {', '.join(INDEX_TYPES)})")


def query_settings(index_type: str, parameters: dict[str, Any], count: int, matches: int,
                   k: int) -> dict[str, int] | None:
    """The settings with which an approximate index of ``count`` vectors finds the best ``k`` of
    the ``matches`` that pass a filter (``count`` without one); None where scanning the matching
    vectors exactly costs no more (and always for ``flat``).

    The recorded settings (``parameters``) reach their recall for the best ``TUNED_K`` of all
    vectors. The k-th best of a share s of the collection lies about as deep as the (k / s)-th
    best of all, so HNSW keeps, and IVF reads, ``max(k, TUNED_K) / (TUNED_K * s)`` times as many
    candidates or lists: without the raise a filter passing 1% leaves an HNSW search with one
    passing candidate in a hundred, and of a k beyond ef_search only some come back (1,592 of
    5,000 with ef_search 128 at 20,000 questions). Where
    the raised search would score about as many vectors as pass (HNSW), or read every list
    (IVF, where that is the exact scan), and wherever no more than ``SCAN_MAX`` pass, the scan
    is chosen."""
    if index_type == "flat" or matches <= SCAN_MAX:
        return None
    depth = max(k, TUNED_K) * count / (TUNED_K * matches)
    if index_type == "hnsw":
        ef_search = math.ceil((parameters.get("ef_search") or hnsw_ef_search(count)) * depth)
        return None if HNSW_SCORED_PER_EF * ef_search >= matches else {"ef_search": ef_search}
    lists = parameters["lists"]
    probes = math.ceil((parameters.get("probes") or ivf_probes(lists)) * depth)
    if probes >= lists:
        return None
    return {"probes": probes} | ({"k_factor": parameters["k_factor"]} if "k_factor" in parameters else {})
