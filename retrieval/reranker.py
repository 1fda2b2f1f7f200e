"""The reranker: order an original question's candidates by cosine to it, by BM25, or by both
fused (``retrieval.fusion``); no interaction features, no comments. ``askalike rerank`` and
``askalike eval cqa --model`` both go through it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from askalike.core.cqa_questions import OriginalQuestion
from askalike.core.encoder import Encoder
from askalike.core.files import write_text_atomically
from askalike.core.lexical import rank_candidates
from askalike.core.loader import load_encoder
from askalike.core.model_dir import UNTUNED_DENSE_WEIGHT, hybrid_dense_weight
from askalike.retrieval.fusion import SearchMode, default_mode, fuse_lists

QUESTIONS_PER_STEP = 10  # original questions embedded together (SemEval: 10 related each)


class Reranker:
    def __init__(self, encoder: Encoder | None, mode: SearchMode = SearchMode.dense,
                 dense_weight: float = 0.5, batch_size: int = 256) -> None:
        if encoder is None and mode != SearchMode.lexical:
            raise ValueError(f"{mode} reranking needs an encoder")
        self.encoder, self.mode, self.dense_weight = encoder, mode, dense_weight
        self.batch_size = batch_size

    @classmethod
    def for_model(cls, spec: str, mode: SearchMode | None = None, encoder: Encoder | None = None) -> Reranker:
        """A model's reranker in ``mode`` (by default ``fusion.default_mode`` of the model's tuned
        hybrid weight); hybrid uses that weight. ``encoder`` replaces the model's
        query encoder (e.g. its torch model, to compare)."""
        tuned = hybrid_dense_weight(spec)
        mode = mode or default_mode(tuned)
        if encoder is None and mode != SearchMode.lexical:
            encoder = load_encoder(spec)
        return cls(encoder, mode, UNTUNED_DENSE_WEIGHT if tuned is None else tuned)

    def rerank(self, original: str, candidates: Sequence[str]) -> list[tuple[int, float]]:
        """(candidate position, cosine), best first; ties keep the given order."""
        (scores,) = self._cosines([original], [list(candidates)])  # dense: a pair of texts
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [(i, scores[i]) for i in order]

    def scores(self, questions: Sequence[OriginalQuestion],
               on_progress: Callable[[int], None] | None = None) -> list[list[float]]:
        """Each original question's score (subject + body) for each of its related questions, in
        file order: cosine (every text embedded once, in batches), BM25 (term statistics from all
        related questions), or both fused per original question. ``on_progress(n)`` is called as
        each step of ``n`` original questions is done."""
        if self.mode == SearchMode.lexical:
            lexical = self.lexical_scores(questions)
            if on_progress is not None:
                on_progress(len(questions))
            return lexical
        dense = self._dense_scores(questions, on_progress)
        if self.mode == SearchMode.dense:
            return dense
        return [fuse_lists(d, lex, self.dense_weight)
                for d, lex in zip(dense, self.lexical_scores(questions), strict=True)]

    def _dense_scores(self, questions: Sequence[OriginalQuestion],
                      on_progress: Callable[[int], None] | None) -> list[list[float]]:
        scores: list[list[float]] = []
        for start in range(0, len(questions), QUESTIONS_PER_STEP):
            step = questions[start : start + QUESTIONS_PER_STEP]
            scores += self._cosines([q.text for q in step], [[r.text for r in q.related] for q in step])
            if on_progress is not None:
                on_progress(len(step))
        return scores

    @staticmethod
    def lexical_scores(questions: Sequence[OriginalQuestion]) -> list[list[float]]:
        return rank_candidates([q.text for q in questions],
                               [[(relq.id, relq.text) for relq in q.related] for q in questions])

    def _cosines(self, originals: Sequence[str], candidates: Sequence[Sequence[str]]) -> list[list[float]]:
        flat = [text for group in candidates for text in group]
        vectors = self.encoder.encode([*originals, *flat], batch_size=self.batch_size)
        original_vectors, candidate_vectors = vectors[: len(originals)], vectors[len(originals) :]
        scores, offset = [], 0
        for i, group in enumerate(candidates):
            block = candidate_vectors[offset : offset + len(group)]
            scores.append((block @ original_vectors[i]).astype(float).tolist())
            offset += len(group)
        return scores


def write_trec_run(path: Path, questions: Sequence[OriginalQuestion], scores: Sequence[Sequence[float]],
                   run_name: str) -> None:
    """A TREC run file (``qid Q0 docid rank score run``), for trec_eval or ranx."""
    lines = []
    for question, question_scores in zip(questions, scores, strict=True):
        order = np.argsort(-np.asarray(question_scores), kind="stable")
        for rank, i in enumerate(order, start=1):
            lines.append(f"{question.id} Q0 {question.related[i].id} {rank} "
                         f"{question_scores[i]:.6f} {run_name}\n")
    write_text_atomically(path, "".join(lines))
