"""SemEval CQA subtask-B run files and gold: gold ``.relevancy`` files and system predictions
share one five-column format, read and written here; an evaluation split is its questions
(``core.cqa_questions``) with their gold lines, from the split's ``.relevancy`` file or, for
the train split, from the questions' own labels.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from askalike.core.cqa_questions import CQA_SPLITS, OriginalQuestion, read_split_questions
from askalike.core.datasets import DataError, numbered_lines, parse_number
from askalike.core.files import atomic_write
from askalike.core.numbers import integer


@dataclass(frozen=True, slots=True)
class CqaRunLine:
    """One line of the five-column format shared by gold ``.relevancy`` files and system
    predictions: ``orgq_id relq_id rank score true|false``."""

    orgq_id: str
    relq_id: str
    rank: int
    score: float
    label: bool
    line: int = 0


def read_cqa_run(path: Path, kind: str = "prediction") -> list[CqaRunLine]:
    """Read a gold ``.relevancy`` file or a prediction file (``kind``: "gold" or "prediction",
    for messages). Fields are split on any whitespace, as the official scorer does (one
    official run is space-separated)."""
    lines: list[CqaRunLine] = []
    for number, line in numbered_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 5:
            raise DataError(path, f"expected 5 fields (orgq_id relq_id rank score label), got "
                                  f"{len(fields)}", number)
        orgq_id, relq_id, rank, score, label = fields
        if label not in ("true", "false"):
            raise DataError(path, f"label must be true or false, got {label!r}", number)
        rank_value = integer(rank)
        if rank_value is None:
            raise DataError(path, f"rank is not an integer: {rank!r}", number)
        lines.append(CqaRunLine(orgq_id, relq_id, rank_value,
                                parse_number(path, number, score, "score"), label == "true", number))
    if not lines:
        raise DataError(path, f"empty: no {kind} lines (orgq_id relq_id rank score label)")
    return lines


def write_cqa_run(path: Path, lines: Iterable[CqaRunLine]) -> None:
    """Write the official tab-separated prediction format, atomically."""
    with atomic_write(path) as temporary, open(temporary, "w", encoding="utf-8") as handle:
        for item in lines:
            label = "true" if item.label else "false"
            handle.write(f"{item.orgq_id}\t{item.relq_id}\t{item.rank}\t{float(item.score)!r}\t{label}\n")


@dataclass(frozen=True, slots=True)
class CqaSplit:
    name: str
    questions: tuple[OriginalQuestion, ...]
    gold: tuple[CqaRunLine, ...]


def gold_from_labels(questions: Iterable[OriginalQuestion], source: Path) -> list[CqaRunLine]:
    """Gold lines from the questions' own labels, as a ``.relevancy`` file would give them."""
    gold = []
    for question in questions:
        for relq in question.related:
            if relq.relevant is None or relq.ranking_order is None:
                raise DataError(source, f"{relq.id} has no relevance label or ranking order")
            gold.append(CqaRunLine(question.id, relq.id, relq.ranking_order,
                                   1.0 / relq.ranking_order, relq.relevant))
    return gold


def load_cqa_split(data_dir: Path, name: str) -> CqaSplit:
    """The questions and gold of a named split; checks that both cover the same pairs."""
    questions = read_split_questions(data_dir, name)
    files = CQA_SPLITS[name]
    if files.gold is None:
        gold = gold_from_labels(questions, data_dir / files.questions[0])
    else:
        gold_path = data_dir / files.gold
        gold = read_cqa_run(gold_path, "gold")
        question_pairs = {(q.id, r.id) for q in questions for r in q.related}
        for item in gold:
            if (item.orgq_id, item.relq_id) not in question_pairs:
                raise DataError(gold_path, f"gold pair {item.orgq_id} {item.relq_id} is not in "
                                           f"the {name} questions", item.line)
        if len(gold) != len(question_pairs):
            raise DataError(gold_path, f"{len(gold)} gold lines for {len(question_pairs)} "
                                       f"question pairs of {name}")
    return CqaSplit(name, questions, tuple(gold))
