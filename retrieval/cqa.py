"""CQA subtask B evaluation: turn per-candidate scores into official predictions and score them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from askalike.core.cqa_questions import OriginalQuestion
from askalike.retrieval.cqa_runs import CqaRunLine, CqaSplit
from askalike.retrieval.scorer import ScoreReport, score_run


@dataclass(frozen=True, slots=True)
class CqaEvaluation:
    split: str
    system: str
    predictions: list[CqaRunLine]
    report: ScoreReport


def predictions_from_scores(questions: Sequence[OriginalQuestion],
                            scores: Sequence[Sequence[float]],
                            threshold: float | None = None) -> list[CqaRunLine]:
    """Prediction lines in the questions' file order (the order the official format asks for),
    ranked 1..n by score within each original question (ties keep file order). A candidate is
    labelled true when its score reaches ``threshold``; with no threshold (a ranking-only
    system) every candidate is labelled true, as the official all-true baseline does."""
    lines = []
    for question, question_scores in zip(questions, scores, strict=True):
        if len(question_scores) != len(question.related):
            raise ValueError(f"{question.id}: {len(question_scores)} scores for "
                             f"{len(question.related)} related questions")
        order = sorted(range(len(question_scores)), key=lambda i: -question_scores[i])
        rank_of = {candidate: rank for rank, candidate in enumerate(order, start=1)}
        for i, relq in enumerate(question.related):
            score = float(question_scores[i])
            label = threshold is None or score >= threshold
            lines.append(CqaRunLine(question.id, relq.id, rank_of[i], score, label))
    return lines


def evaluate_scores(split: CqaSplit, system: str, scores: Sequence[Sequence[float]],
                    threshold: float | None = None) -> CqaEvaluation:
    predictions = predictions_from_scores(split.questions, scores, threshold)
    return CqaEvaluation(split.name, system, predictions, score_run(split.gold, predictions))


CLASSIFICATION_FIGURES = ("precision", "recall", "f1", "accuracy")


def ranking_summary(report: ScoreReport) -> dict[str, float | int]:
    """The report's headline figures without P/R/F1/Acc, for a ranking-only run: its prediction
    file labels every candidate true (the official format needs a label), so those figures
    would describe that convention rather than the system."""
    return {name: value for name, value in report.summary().items() if name not in CLASSIFICATION_FIGURES}
