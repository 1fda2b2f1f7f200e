"""Search modes and how hybrid search fuses them: a convex combination of min-max normalised
dense (cosine) and lexical (BM25) scores. Pure Python: the CLI lists the modes at start-up.

Min-max over each query's candidates puts both scores on [0, 1] whatever their scale (BM25 has
none); a candidate that only one side retrieved scores 0 on the other.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from enum import StrEnum
from typing import TypeVar

Key = TypeVar("Key", bound=Hashable)
# one query's fused scores from its candidates' dense and lexical scores and the dense weight
Fusion = Callable[[Sequence[float], Sequence[float], float], Sequence[float]]
WEIGHT_GRID = tuple(step / 20 for step in range(21))  # the dense weights tuning tries


class SearchMode(StrEnum):
    dense = "dense"  # cosine of the model's embeddings
    lexical = "lexical"  # BM25 over the words
    hybrid = "hybrid"  # both, fused


def default_mode(tuned_dense_weight: float | None) -> SearchMode:
    """Hybrid where tuning on dev 2016 found that the words help (a dense weight below 1), else
    dense: a hybrid with weight 1 ranks as dense does, at the cost of a BM25 pass."""
    if tuned_dense_weight is not None and tuned_dense_weight < 1.0:
        return SearchMode.hybrid
    return SearchMode.dense


def min_max(scores: Sequence[float]) -> list[float]:
    low, high = min(scores, default=0.0), max(scores, default=0.0)
    if high <= low:
        return [0.0] * len(scores)
    return [(score - low) / (high - low) for score in scores]


def fuse(dense: Mapping[Key, float], lexical: Mapping[Key, float], dense_weight: float) -> dict[Key, float]:
    """Each candidate's fused score: ``dense_weight`` * its normalised cosine + the rest * its
    normalised BM25 score."""
    keys = list(dict.fromkeys([*dense, *lexical]))
    dense_norm = dict(zip(dense, min_max(list(dense.values())), strict=True))
    lexical_norm = dict(zip(lexical, min_max(list(lexical.values())), strict=True))
    return {key: dense_weight * dense_norm.get(key, 0.0) + (1 - dense_weight) * lexical_norm.get(key, 0.0)
            for key in keys}


def fuse_lists(dense: Sequence[float], lexical: Sequence[float], dense_weight: float) -> list[float]:
    """``fuse`` for one query's candidates given as two aligned score lists."""
    fused = fuse(dict(enumerate(dense)), dict(enumerate(lexical)), dense_weight)
    return [fused[i] for i in range(len(dense))]
