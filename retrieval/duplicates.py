"""Near-duplicates among the hits of one search: a hit that the model's judge calls the same
question as a better-ranked hit (``retrieval.judgement``, at ``SAME_QUESTION``) is marked as a
near-duplicate of it, so that a question asked twice reads as one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from askalike.retrieval.judgement import SAME_QUESTION
from askalike.retrieval.searcher import Searcher, SearchResult


def first_near_duplicate(vectors: np.ndarray, min_cosine: float) -> list[int | None]:
    """For each row of L2-normalised ``vectors`` (best hit first), the position of the
    best-ranked earlier row whose cosine to it reaches ``min_cosine``, or None."""
    cosines = vectors @ vectors.T
    return [next((j for j in range(i) if cosines[i, j] >= min_cosine), None) for i in range(len(vectors))]


def mark_near_duplicates(searcher: Searcher, results: list[SearchResult],
                         same_question: float = SAME_QUESTION) -> list[SearchResult]:
    """``results`` with ``duplicate_of`` set to the rank of the better hit each is judged the
    same question as (a match of ``same_question`` or more between the two). The vectors are the
    indexed ones, so no text is embedded again."""
    if len(results) < 2:
        return results
    stored = searcher.vectors(result.row_id for result in results)
    vectors = np.stack([stored[result.row_id] for result in results])
    firsts = first_near_duplicate(vectors, searcher.judge.cosine_for(same_question))
    marks = [None if j is None else results[j].rank for j in firsts]
    return [result if result.duplicate_of == mark else replace(result, duplicate_of=mark)
            for result, mark in zip(results, marks, strict=True)]
