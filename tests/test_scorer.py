"""The subtask-B scorer: golden tests against official scorer output, and its conventions."""

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from askalike.core.data_dir import DataError, resolve_data_dir
from askalike.retrieval.cqa_runs import CqaRunLine, read_cqa_run
from askalike.retrieval.scorer import ScorerError, average_precision, format_report, score_run

SCORE_LINE = re.compile(r"(MAP|AvgRec|MRR|REC-1@|ALL SCORES)")
GOLD = {
    "2016": "semeval-cqa-runs/2016/_gold/SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy",
    "2017": "semeval-cqa-runs/2017/_gold/SemEval2017-Task3-CQA-QL-test.xml.subtaskB.relevancy",
    "2016-dev": "semeval-cqa-runs/2016-dev/_gold/SemEval2016-Task3-CQA-QL-dev.xml.subtaskB.relevancy",
    "baselines": "semeval-cqa/SemEval2016-Task3-CQA-QL-test.xml.subtaskB.relevancy",
}


def _collection_data_dir() -> Path | None:
    """The data directory the ``data_dir`` fixture uses; parametrisation runs before fixtures."""
    try:
        return resolve_data_dir()
    except DataError:
        return None


def _golden_cases(data_dir: Path | None) -> list[tuple[str, str]]:
    """(official .score file, its gold) relative to the data directory; none without one."""
    if data_dir is None:
        return []
    cases = [(str(path.relative_to(data_dir)), path.relative_to(data_dir).parts[1])
             for path in sorted((data_dir / "semeval-cqa-runs").rglob("*.score"))]
    cases += [(str(path.relative_to(data_dir)), "baselines")
              for path in sorted((data_dir / "semeval-cqa/baselines/test2016").glob("*.score"))]
    return cases


def _score_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines() if SCORE_LINE.match(line)]


def test_golden_cases_found(data_dir):
    """Guards the parametrised test below against silently collecting nothing."""
    assert len(_golden_cases(data_dir)) == 41


@pytest.mark.parametrize(("score_file", "gold_key"), _golden_cases(_collection_data_dir()))
def test_reproduces_official_score_file(data_dir, score_file, gold_key):
    """MAP, AvgRec, MRR, REC-1/ACC/AC1/AC2 at 1..10 (IR and SYS) and the ALL SCORES line."""
    score_path = data_dir / score_file
    report = score_run(read_cqa_run(data_dir / GOLD[gold_key]),
                       read_cqa_run(score_path.with_suffix("")))
    official = _score_lines(score_path.read_text())
    assert len(official) == 14
    assert _score_lines(format_report(report)) == official


def _line(query: str, candidate: int, score: float, label: bool = True) -> CqaRunLine:
    return CqaRunLine(query, f"{query}_R{candidate}", candidate, score, label)


def _gold(query: str, relevant: list[bool]) -> list[CqaRunLine]:
    return [_line(query, i + 1, 1.0 / (i + 1), rel) for i, rel in enumerate(relevant)]


def test_question_without_relevant_counts_as_zero():
    gold = _gold("Q1", [True, False]) + _gold("Q2", [False, False])
    predictions = [_line("Q1", 1, 0.9), _line("Q1", 2, 0.1), _line("Q2", 1, 0.5), _line("Q2", 2, 0.4)]
    report = score_run(gold, predictions)
    assert report.system.map == pytest.approx(0.5)
    assert report.system.mrr == pytest.approx(50.0)
    assert report.n_queries == 2


def test_ties_keep_file_order():
    gold = _gold("Q1", [False, True])
    first_wins = score_run(gold, [_line("Q1", 1, 0.5), _line("Q1", 2, 0.5)])
    second_first = score_run(gold, [_line("Q1", 2, 0.5), _line("Q1", 1, 0.5)])
    assert first_wins.system.map == pytest.approx(0.5)
    assert second_first.system.map == pytest.approx(1.0)


def test_only_top_ten_count():
    assert average_precision([False] * 10 + [True]) == 0.0
    assert average_precision([True, False, True]) == pytest.approx((1 + 2 / 3) / 2)


def test_classification_scores():
    gold = _gold("Q1", [True, True, False, False])
    predictions = [_line("Q1", 1, 4, True), _line("Q1", 2, 3, False),
                   _line("Q1", 3, 2, True), _line("Q1", 4, 1, False)]
    cls = score_run(gold, predictions).classification
    assert (cls.precision, cls.recall, cls.f1, cls.accuracy) == (0.5, 0.5, 0.5, 0.5)


@pytest.mark.parametrize(("predictions", "message"), [
    ([_line("Q1", 1, 1.0)], "have no prediction"),
    ([_line("Q1", 1, 1.0), _line("Q1", 2, 1.0), _line("Q1", 3, 1.0)], "not in the gold"),
    ([_line("Q1", 1, 1.0), _line("Q1", 1, 1.0), _line("Q1", 2, 1.0)], "predicted twice"),
])
def test_mismatched_predictions_are_refused(predictions, message):
    with pytest.raises(ScorerError, match=message):
        score_run(_gold("Q1", [True, False]), predictions)


relevance_lists = st.lists(st.lists(st.booleans(), min_size=1, max_size=12), min_size=1,
                           max_size=8)


def _run_from(relevance: list[list[bool]], scores: list[list[float]] | None = None):
    gold, predictions = [], []
    for q, labels in enumerate(relevance):
        gold += _gold(f"Q{q}", labels)
        for c, _ in enumerate(labels):
            score = scores[q][c] if scores else float(-c)
            predictions.append(_line(f"Q{q}", c + 1, score))
    return gold, predictions


@pytest.mark.reliability("scorer on random runs (hypothesis): original questions shuffled",
                         "MAP and MRR unchanged")
@given(relevance_lists, st.randoms())
def test_map_is_invariant_to_question_order(relevance, rnd):
    gold, predictions = _run_from(relevance)
    queries = list(dict.fromkeys(line.orgq_id for line in gold))
    rnd.shuffle(queries)
    reordered_gold = [line for q in queries for line in gold if line.orgq_id == q]
    reordered_predictions = [line for q in queries for line in predictions if line.orgq_id == q]
    original = score_run(gold, predictions).system
    reordered = score_run(reordered_gold, reordered_predictions).system
    assert reordered.map == pytest.approx(original.map)
    assert reordered.mrr == pytest.approx(original.mrr)


@pytest.mark.reliability("scorer on random runs (hypothesis): a perfect ranking",
                         "the maximum MAP (1 per question with a relevant candidate)")
@given(relevance_lists)
def test_perfect_ranking_gets_the_maximum(relevance):
    perfect_scores = [[1.0 if rel else 0.0 for rel in labels] for labels in relevance]
    gold, predictions = _run_from(relevance, perfect_scores)
    report = score_run(gold, predictions).system
    with_relevant = sum(any(labels) for labels in relevance)
    # a perfect ranking puts every relevant candidate first: AP 1, or 0 with none relevant
    assert report.map == pytest.approx(with_relevant / len(relevance))
    assert report.avgrec == pytest.approx(1.0) or with_relevant == 0


@pytest.mark.reliability("scorer on random runs (hypothesis): any scores",
                         "MAP never above the perfect ranking's")
@given(relevance_lists, st.data())
def test_map_is_bounded_by_perfect(relevance, data):
    scores = [data.draw(st.lists(st.floats(-1, 1), min_size=len(labels), max_size=len(labels)))
              for labels in relevance]
    gold, predictions = _run_from(relevance, scores)
    perfect_gold, perfect = _run_from(relevance, [[float(r) for r in labels] for labels in relevance])
    assert score_run(gold, predictions).system.map <= score_run(perfect_gold, perfect).system.map + 1e-12
