"""Near-duplicates among the hits of one search: a hit whose cosine to a better-ranked hit reaches
a threshold is marked as a near-duplicate of it, so that a question asked twice reads as one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from retrieval.searcher import Searcher, SearchResult

NEAR_DUPLICATE_COSINE = 0.95


def first_near_duplicate(vectors: np.ndarray, threshold: float = NEAR_DUPLICATE_COSINE) -> list[int | None]:
    """For each row of L2-normalised ``vectors`` (best hit first), the position of the
    best-ranked earlier row whose cosine to it reaches ``threshold``, or None."""
    cosines = vectors @ vectors.T
    return [next((j for j in range(i) if cosines[i, j] >= threshold), None) for i in range(len(vectors))]


def mark_near_duplicates(searcher: Searcher, results: list[SearchResult],
                         threshold: float = NEAR_DUPLICATE_COSINE) -> list[SearchResult]:
    """``results`` with ``duplicate_of`` set to the rank of the hit each nearly duplicates. The
    vectors are the indexed ones, so no text is embedded again."""
    if len(results) < 2:
        return results
    stored = searcher.vectors(result.row_id for result in results)
    vectors = np.stack([stored[result.row_id] for result in results])
    return [replace(result, duplicate_of=None if j is None else results[j].rank)
            for result, j in zip(results, first_near_duplicate(vectors, threshold), strict=True)]
