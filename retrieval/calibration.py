"""Fitting a model's same-question judge (``retrieval.judgement``) on labelled pairs, and
measuring it: on CQA's pairs judged PerfectMatch ("the same question") against Relevant and
Irrelevant (train and dev 2016 by default; never a test split), or on a user's own pairs
(``askalike calibrate --pairs``, ``askalike tune``'s held-out pairs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from askalike.core.cqa_questions import OriginalQuestion, read_cqa_questions, read_split_questions
from askalike.core.data_dir import CQA_DIR
from askalike.core.encoder import Encoder
from askalike.core.loader import load_encoder
from askalike.core.pair_files import LabelledPair
from askalike.retrieval.judgement import (
    SAME_QUESTION,
    Judge,
    SameQuestionJudge,
    calibration_error,
    f1_at,
    fit_platt,
)

SAME_QUESTION_LABEL = "PerfectMatch"
FIT_SPLITS = ("train", "dev2016")
# the test splits' question files without labels have labelled twins: the 2016 test with its
# 3-way labels, the 2017 one (reconstructed) with binary gold only
LABELLED_FILES = {"test2016": f"{CQA_DIR}/SemEval2016-Task3-CQA-QL-test.xml",
                  "test2017": f"{CQA_DIR}/SemEval2017-task3-English-test-subtaskB-reconstructed.jsonl"}
MIN_PAIRS_OF_EACH_KIND = 10  # fewer, and a fitted curve says more about chance than the model


@dataclass(frozen=True)
class JudgedPair:
    first: str
    second: str
    same: bool


def cqa_pairs(data_dir: Path, split: str, same_labels: frozenset[str] = frozenset({SAME_QUESTION_LABEL}),
              ) -> list[JudgedPair]:
    """A CQA split's (original, related) pairs with a 3-way label, "the same question" for
    ``same_labels``; the splits whose gold is binary (test 2017) give ``relevant`` instead, so
    call them with ``RELEVANT_LABELS`` only."""
    pairs = []
    for original in _labelled_questions(data_dir, split):
        for related in original.related:
            label = related.relevance or ({True: "Relevant", False: "Irrelevant"}.get(related.relevant))
            if label is not None:
                pairs.append(JudgedPair(original.text, related.text, label in same_labels))
    return pairs


def _labelled_questions(data_dir: Path, split: str) -> tuple[OriginalQuestion, ...]:
    if split in LABELLED_FILES:
        return tuple(read_cqa_questions(data_dir / LABELLED_FILES[split]))
    return read_split_questions(data_dir, split)


def labelled_pairs(pairs: Sequence[LabelledPair]) -> list[JudgedPair]:
    """A user's pairs that carry a label (1 the same question, 0 not)."""
    return [JudgedPair(pair.text_a, pair.text_b, pair.label == 1) for pair in pairs if pair.label is not None]


def pair_cosines(encoder: Encoder, pairs: Sequence[JudgedPair]) -> np.ndarray:
    """The cosine of each pair's two texts, each distinct text embedded once."""
    texts = sorted({text for pair in pairs for text in (pair.first, pair.second)})
    vectors = dict(zip(texts, encoder.encode(texts), strict=True))
    return np.array([float(vectors[pair.first] @ vectors[pair.second]) for pair in pairs])


def fit_judge(encoder: Encoder, pairs: Sequence[JudgedPair], fitted_on: str) -> SameQuestionJudge:
    """The Platt curve of ``encoder``'s cosines fitted on ``pairs``, with what it measured there."""
    same = np.array([pair.same for pair in pairs])
    if min(int(same.sum()), int((~same).sum())) < MIN_PAIRS_OF_EACH_KIND:
        raise ValueError(f"calibration needs at least {MIN_PAIRS_OF_EACH_KIND} pairs of each kind: "
                         f"{int(same.sum())} are the same question, {int((~same).sum())} are not")
    cosines = pair_cosines(encoder, pairs)
    slope, intercept = fit_platt(cosines, same)
    fitted = SameQuestionJudge(slope, intercept, fitted_on)
    return SameQuestionJudge(slope, intercept, fitted_on, judge_figures(fitted, cosines, same))


def judge_figures(judge: SameQuestionJudge, cosines: np.ndarray, same: np.ndarray) -> dict[str, Any]:
    """What a judge does on pairs of known verdict: how many, its calibration error (10 bins),
    and the precision, recall and F1 of its default decision (``SAME_QUESTION``)."""
    probabilities = np.asarray(judge.probability(cosines))
    called = probabilities >= SAME_QUESTION
    hits = int(np.sum(called & same))
    return {"pairs": len(same), "same": int(same.sum()),
            "calibration_error": round(calibration_error(probabilities, same), 4),
            "precision": round(hits / int(called.sum()), 4) if called.any() else None,
            "recall": round(hits / int(same.sum()), 4) if same.any() else None,
            "f1": round(f1_at(probabilities, same, SAME_QUESTION), 4)}


def fit_on_cqa(encoder: Encoder, data_dir: Path, splits: Sequence[str] = FIT_SPLITS) -> SameQuestionJudge:
    pairs = [pair for split in splits for pair in cqa_pairs(data_dir, split)]
    return fit_judge(encoder, pairs, f"SemEval CQA {' + '.join(splits)}: PerfectMatch against "
                     "Relevant and Irrelevant")


def calibrate_tuned(spec: str, held_out: Sequence[LabelledPair], base_judge: Judge,
                    data_dir: Path | None) -> SameQuestionJudge | None:
    """The judge for a model tuned on a user's pairs: fitted on its held-out pairs where they hold
    at least ``MIN_PAIRS_OF_EACH_KIND`` of each kind (the user's own meaning of "the same"), else
    on CQA's where the data directory is there, else the base model's curve, kept as it was
    (None where the base had none)."""
    encoder = load_encoder(spec)
    pairs = labelled_pairs(held_out)
    same = sum(pair.same for pair in pairs)
    if min(same, len(pairs) - same) >= MIN_PAIRS_OF_EACH_KIND:
        return fit_judge(encoder, pairs, "your held-out pairs")
    if data_dir is not None:
        return fit_on_cqa(encoder, data_dir)
    if isinstance(base_judge, SameQuestionJudge):
        return replace(base_judge, fitted_on=f"the base model's curve, not refitted ({base_judge.fitted_on})")
    return None
