"""The seed reranker: order an original question's candidates by cosine to it (no interaction
features, no comments). ``askalike rerank`` and ``askalike eval cqa --model`` both go through it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from train.datasets import OriginalQuestion
from train.encoders import SentenceEncoder
from train.files import write_text_atomically


class Reranker:
    def __init__(self, encoder: SentenceEncoder, batch_size: int = 256) -> None:
        self.encoder = encoder
        self.batch_size = batch_size

    def rerank(self, original: str, candidates: Sequence[str]) -> list[tuple[int, float]]:
        """(candidate position, cosine), best first; ties keep the given order."""
        (scores,) = self._cosines([original], [list(candidates)])
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return [(i, scores[i]) for i in order]

    def scores(self, questions: Sequence[OriginalQuestion]) -> list[list[float]]:
        """Cosine of each original question (subject + body) to each of its related questions,
        in file order; every text is embedded once, in batches."""
        return self._cosines([q.text for q in questions], [[r.text for r in q.related] for q in questions])

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
