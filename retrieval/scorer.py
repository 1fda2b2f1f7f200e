"""The SemEval-2016/2017 Task 3 scorer for subtask B, reimplemented with its conventions.

- Per original question, candidates are sorted by score, descending; ties keep file order
  (a stable sort), which decides the MAP of runs with tied scores.
- AP is taken over the top 10: the mean of the precision at each relevant rank found there.
  A question with no relevant candidate gets AP = 0 and still counts in the mean.
- MRR is printed x100, AvgRec is the mean of AC1@1..10, as in the official output.
- The "IR" column ranks by the gold file's own score column (the search engine's order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from askalike.core.errors import UserError
from askalike.retrieval.cqa_runs import CqaRunLine

TOP_K = 10


class ScorerError(UserError, ValueError):
    """Predictions that do not match the gold pairs."""


@dataclass(frozen=True, slots=True)
class RankingScores:
    map: float
    avgrec: float
    mrr: float  # x100, as printed by the official scorer
    rec1_at: tuple[float, ...]  # % of questions with a relevant candidate in the top k
    acc_at: tuple[float, ...]  # % relevant among the top k, over all questions
    ac1_at: tuple[float, ...]  # relevant in the top k / the most a perfect ranking could have
    ac2_at: tuple[int, ...]  # relevant in the top k, absolute


@dataclass(frozen=True, slots=True)
class ClassificationScores:
    precision: float
    recall: float
    f1: float
    accuracy: float


@dataclass(frozen=True, slots=True)
class ScoreReport:
    system: RankingScores
    ir: RankingScores
    classification: ClassificationScores
    n_queries: int

    def summary(self) -> dict[str, float | int]:
        """The headline figures for JSON output, rounded to the official 4 decimals."""
        cls = self.classification
        figures = {
            "map": self.system.map,
            "avgrec": self.system.avgrec,
            "mrr": self.system.mrr,
            "precision": cls.precision,
            "recall": cls.recall,
            "f1": cls.f1,
            "accuracy": cls.accuracy,
            "ir_map": self.ir.map,
            "ir_avgrec": self.ir.avgrec,
            "ir_mrr": self.ir.mrr,
        }
        return {**{name: round(value, 4) for name, value in figures.items()},
                "n_queries": self.n_queries}


def _ranked_relevance(lines: Sequence[CqaRunLine], relevant: dict[tuple[str, str], bool],
                      query_order: Sequence[str]) -> list[list[bool]]:
    """For each query in ``query_order``, the gold relevance of its candidates in ranked order."""
    by_query: dict[str, list[CqaRunLine]] = {query: [] for query in query_order}
    for line in lines:
        by_query[line.orgq_id].append(line)
    return [
        [relevant[(line.orgq_id, line.relq_id)]
         for line in sorted(by_query[query], key=lambda item: -item.score)]
        for query in query_order
    ]


def average_precision(ranked: Sequence[bool], top_k: int = TOP_K) -> float:
    """Mean precision at each relevant rank within the top k; 0 when none is relevant."""
    precisions = []
    found = 0
    for position, is_relevant in enumerate(ranked[:top_k], start=1):
        if is_relevant:
            found += 1
            precisions.append(found / position)
    return sum(precisions) / len(precisions) if precisions else 0.0


def ranking_scores(rankings: Sequence[Sequence[bool]], top_k: int = TOP_K) -> RankingScores:
    n_queries = len(rankings)
    if n_queries == 0:
        raise ScorerError("no queries to score")
    mean_ap = sum(average_precision(ranked, top_k) for ranked in rankings) / n_queries
    reciprocal = 0.0
    for ranked in rankings:
        first = next((i for i, rel in enumerate(ranked[:top_k], start=1) if rel), None)
        reciprocal += 1.0 / first if first else 0.0

    rec1, acc, ac1, ac2 = [], [], [], []
    for k in range(1, top_k + 1):
        found = sum(sum(ranked[:k]) for ranked in rankings)
        possible = sum(min(k, sum(ranked)) for ranked in rankings)
        with_hit = sum(1 for ranked in rankings if any(ranked[:k]))
        rec1.append(100.0 * with_hit / n_queries)
        acc.append(100.0 * found / (k * n_queries))
        ac1.append(found / possible if possible else 0.0)
        ac2.append(found)
    return RankingScores(
        map=mean_ap,
        avgrec=sum(ac1) / top_k,
        mrr=100.0 * reciprocal / n_queries,
        rec1_at=tuple(rec1),
        acc_at=tuple(acc),
        ac1_at=tuple(ac1),
        ac2_at=tuple(ac2),
    )


def classification_scores(predictions: Sequence[CqaRunLine],
                          relevant: dict[tuple[str, str], bool]) -> ClassificationScores:
    tp = fp = fn = tn = 0
    for line in predictions:
        gold = relevant[(line.orgq_id, line.relq_id)]
        if line.label and gold:
            tp += 1
        elif line.label:
            fp += 1
        elif gold:
            fn += 1
        else:
            tn += 1
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return ClassificationScores(precision, recall, f1, (tp + tn) / len(predictions))


def _ranked_by_search_engine(lines: Sequence[CqaRunLine]) -> bool:
    """The mark of a gold .relevancy file: each line's rank is the search engine's, the number
    after ``_R`` in its related question's id."""
    return all(line.relq_id.endswith(f"_R{line.rank}") for line in lines)


def score_run(gold: Sequence[CqaRunLine], predictions: Sequence[CqaRunLine],
              top_k: int = TOP_K) -> ScoreReport:
    """Score predictions against gold; both must cover exactly the same (orgQ, relQ) pairs."""
    if _ranked_by_search_engine(predictions) and not _ranked_by_search_engine(gold):
        raise ScorerError("the gold and prediction files look swapped: the predictions rank every "
                          "candidate by the number in its id (_R<rank>), as a gold .relevancy file "
                          "does, and the gold file does not; give the gold file first")
    relevant = {(line.orgq_id, line.relq_id): line.label for line in gold}
    if len(relevant) != len(gold):
        raise ScorerError("the gold file lists a pair twice")
    seen: set[tuple[str, str]] = set()
    for line in predictions:
        pair = (line.orgq_id, line.relq_id)
        where = f"line {line.line}: " if line.line else ""
        if pair not in relevant:
            raise ScorerError(f"{where}pair {pair[0]} {pair[1]} is not in the gold file")
        if pair in seen:
            raise ScorerError(f"{where}pair {pair[0]} {pair[1]} is predicted twice")
        seen.add(pair)
    missing = [pair for pair in relevant if pair not in seen]
    if missing:
        raise ScorerError(f"{len(missing)} gold pairs have no prediction, e.g. "
                          f"{missing[0][0]} {missing[0][1]}")
    queries = list(dict.fromkeys(line.orgq_id for line in gold))
    return ScoreReport(
        system=ranking_scores(_ranked_relevance(predictions, relevant, queries), top_k),
        ir=ranking_scores(_ranked_relevance(gold, relevant, queries), top_k),
        classification=classification_scores(predictions, relevant),
        n_queries=len(queries),
    )


def all_scores_line(report: ScoreReport) -> str:
    """The official ``ALL SCORES:`` line: MAP, AvgRec, MRR, P, R, F1, Acc."""
    s, c = report.system, report.classification
    values = (s.map, s.avgrec, s.mrr, c.precision, c.recall, c.f1, c.accuracy)
    return "ALL SCORES:\t" + "\t".join(f"{value:.4f}" for value in values)


def format_report(report: ScoreReport) -> str:
    """The report laid out as the official scorer prints it."""
    ir, sys_, cls = report.ir, report.system, report.classification
    lines = [
        f"*** Official score (MAP for SYS): {sys_.map:.4f}",
        "",
        "Classification results",
        f"Acc = {cls.accuracy:.4f}",
        f"P   = {cls.precision:.4f}",
        f"R   = {cls.recall:.4f}",
        f"F1  = {cls.f1:.4f}",
        "",
        "Detailed ranking results (IR: the search engine's order; SYS: the system scored)",
        "",
        "           IR   SYS",
        f"MAP   : {ir.map:.4f} {sys_.map:.4f}",
        f"AvgRec: {ir.avgrec:.4f} {sys_.avgrec:.4f}",
        f"MRR   : {ir.mrr:6.2f} {sys_.mrr:6.2f}",
        "              IR    SYS              IR    SYS              IR    SYS            IR  SYS",
    ]
    for i in range(len(sys_.rec1_at)):
        k = i + 1
        lines.append(
            f"REC-1@{k:02d}: {ir.rec1_at[i]:6.2f} {sys_.rec1_at[i]:6.2f}  "
            f"ACC@{k:02d}: {ir.acc_at[i]:6.2f} {sys_.acc_at[i]:6.2f}  "
            f"AC1@{k:02d}: {ir.ac1_at[i]:6.2f} {sys_.ac1_at[i]:6.2f}  "
            f"AC2@{k:02d}: {ir.ac2_at[i]:4d} {sys_.ac2_at[i]:4d}"
        )
    lines += ["", all_scores_line(report)]
    return "\n".join(lines)
