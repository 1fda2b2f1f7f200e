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
    """How a search ranks the questions: by meaning, by words, or both."""

    dense = "dense"  # cosine of the model's embeddings
    lexical = "lexical"  # BM25 over the words
    hybrid = "hybrid"  # both, fused


def default_mode(tuned_dense_weight: float | None) -> SearchMode:
    """Hybrid where tuning on dev 2016 found that the words help (a dense weight below 1), else
    dense: a hybrid with weight 1 ranks as dense does, at the cost of a BM25 pass."""
    if tuned_dense_weight is not None and tuned_dense_weight < 1.0:
        return SearchMode.hybrid
    return SearchMode.dense


def scaling(scores: Sequence[float]) -> Callable[[float], float]:
    """The min-max map fitted on ``scores`` (their lowest to 0, their highest to 1; all to 0 when
    they are equal); a score outside them maps outside [0, 1] by the same line."""
    low, high = min(scores, default=0.0), max(scores, default=0.0)
    if high <= low:
        return lambda _: 0.0
    return lambda score: (score - low) / (high - low)


def min_max(scores: Sequence[float]) -> list[float]:
    scale = scaling(scores)
    return [scale(score) for score in scores]


def fused_score(dense: Sequence[float], lexical: Sequence[float],
                dense_weight: float) -> Callable[[float, float], float]:
    """The fused score of any (cosine, BM25 score) pair, normalised by the bounds of a pool of
    candidates' scores (``dense``, ``lexical``): on the pool, what ``fuse`` gives; a question
    outside it is scored with the same bounds, so adding it reorders nothing. It also scores
    aligned numpy arrays of cosines and BM25 scores at once (a search's candidates)."""
    dense_scale, lexical_scale = scaling(dense), scaling(lexical)
    return lambda cosine, bm25: dense_weight * dense_scale(cosine) + (1 - dense_weight) * lexical_scale(bm25)


def fuse(dense: Mapping[Key, float], lexical: Mapping[Key, float], dense_weight: float) -> dict[Key, float]:
    """Each candidate's fused score: ``dense_weight`` * its normalised cosine + the rest * its
    normalised BM25 score."""
    keys = list(dict.fromkeys([*dense, *lexical]))
    dense_scale, lexical_scale = scaling(list(dense.values())), scaling(list(lexical.values()))
    return {key: dense_weight * (dense_scale(dense[key]) if key in dense else 0.0)
            + (1 - dense_weight) * (lexical_scale(lexical[key]) if key in lexical else 0.0)
            for key in keys}


def fuse_lists(dense: Sequence[float], lexical: Sequence[float], dense_weight: float) -> list[float]:
    """``fuse`` for one query's candidates given as two aligned score lists."""
    fused = fuse(dict(enumerate(dense)), dict(enumerate(lexical)), dense_weight)
    return [fused[i] for i in range(len(dense))]
