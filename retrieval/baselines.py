"""Baseline rankers for CQA subtask B: the search engine's order, random, and BM25.

Each baseline maps original questions to one score per related question (higher = more
similar), the same contract as any encoder-based ranker.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI lists BASELINES at start-up: this module imports nothing heavy
    from train.cqa_questions import OriginalQuestion

Scores = list[list[float]]
BaselineRanker = Callable[[Sequence["OriginalQuestion"], int], Scores]

_WORD = re.compile(r"\w+")


@cache
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def ir_scores(questions: Sequence[OriginalQuestion], seed: int = 0) -> Scores:
    """The search engine's order (RELQ_RANKING_ORDER), scored 1/rank like the gold files."""
    del seed  # deterministic
    return [[1.0 / relq.ranking_order if relq.ranking_order else 0.0 for relq in q.related]
            for q in questions]


def random_scores(questions: Sequence[OriginalQuestion], seed: int = 0) -> Scores:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [rng.random(len(q.related)).tolist() for q in questions]


def bm25_tokens(text: str) -> list[str]:
    """Lowercased word tokens without English stopwords (SemEval 2016 texts use ';' for ',')."""
    return [token for token in _WORD.findall(text.lower()) if token not in _stopwords()]


def bm25_scores(questions: Sequence[OriginalQuestion], seed: int = 0) -> Scores:
    """Okapi BM25 (Lucene variant, k1=1.5, b=0.75) of each original question's subject+body
    against its related questions' subject+body. Term statistics come from all related
    questions of the given collection (each counted once), so IDF is not estimated from 10
    documents alone."""
    import bm25s

    del seed  # deterministic
    documents: dict[str, list[str]] = {}
    for question in questions:
        for relq in question.related:
            documents.setdefault(relq.id, bm25_tokens(relq.text))
    position = {relq_id: index for index, relq_id in enumerate(documents)}
    index = bm25s.BM25()
    index.index(list(documents.values()), show_progress=False)
    scores = []
    for question in questions:
        all_scores = index.get_scores(bm25_tokens(question.text))
        scores.append([float(all_scores[position[relq.id]]) for relq in question.related])
    return scores


BASELINES: dict[str, BaselineRanker] = {
    "ir": ir_scores,
    "random": random_scores,
    "bm25": bm25_scores,
}
