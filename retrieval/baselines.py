"""Baseline rankers for CQA subtask B: the search engine's order, random, and BM25.

Each baseline maps original questions to one score per related question (higher = more
similar), the same contract as any encoder-based ranker.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI lists BASELINES at start-up: this module imports nothing heavy
    from askalike.core.cqa_questions import OriginalQuestion

Scores = list[list[float]]
BaselineRanker = Callable[[Sequence["OriginalQuestion"], int], Scores]


def ir_scores(questions: Sequence[OriginalQuestion], seed: int = 0) -> Scores:
    """The search engine's order (RELQ_RANKING_ORDER), scored 1/rank like the gold files."""
    del seed  # deterministic
    return [[1.0 / relq.ranking_order if relq.ranking_order else 0.0 for relq in q.related]
            for q in questions]


def random_scores(questions: Sequence[OriginalQuestion], seed: int = 0) -> Scores:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.random(len(q.related)).tolist() for q in questions]


def bm25_scores(questions: Sequence[OriginalQuestion], seed: int = 0) -> Scores:
    """Okapi BM25 (Lucene's variant, ``core.lexical``) of each original question against its
    related questions, with term statistics from all related questions of the collection."""
    from askalike.retrieval.reranker import Reranker

    del seed  # deterministic
    return Reranker.lexical_scores(questions)


BASELINES: dict[str, BaselineRanker] = {
    "ir": ir_scores,
    "random": random_scores,
    "bm25": bm25_scores,
}
