"""Out-of-domain figures: domains that no shipped model trained on, each cut once into a part to
tune on and a part to test on, scored by pair ranking accuracy and Pearson r. numpy and scipy only.

The domains (``OOD_DOMAINS``):

- ``sick``: SICK's SemEval-2014 test file (4,927 scored pairs of image and video captions
  rewritten by people; the shipped models trained on SICK train's entailment labels only, never on
  this file or on any relatedness score).
- ``sts-qa``: the question-and-answer sets of STS 2015-2016 (answers-forums, answers-students,
  answer-answer, question-question: 1,588 scored pairs; none of them is in STS Benchmark train,
  which the shipped models regress on).

The cut is fixed: a pair is in the tune part when the SHA-256 of its first sentence (normalised:
lower case, single spaces) falls in the first ``TUNE_SHARE`` of the hash range, so every pair of
a first sentence is on one side. Gold scores are rescaled to 0-1; a pair at or above
``ALIKE_FROM`` is alike, one at or below ``NOT_ALIKE_UNTIL`` is not (between: neither, and left out
of the accuracy and of the labelled pairs that tuning takes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.stats import pearsonr, rankdata

from askalike.core.datasets import read_sick, read_sts_year
from askalike.core.encoder import Encoder
from askalike.core.pair_files import text_fraction

TUNE_SHARE = 0.4  # of each domain's first sentences (and so about of its pairs)
ALIKE_FROM = 0.8  # rescaled gold: STS >= 4 of 5, SICK >= 4.2 of 1-5
NOT_ALIKE_UNTIL = 0.4  # STS <= 2 of 5, SICK <= 2.6 of 1-5
PARTS = ("tune", "test")
STS_QA_SETS = {"STS15-en-test": ("answers-forums", "answers-students"),
               "STS16-en-test": ("answer-answer", "question-question")}


@dataclass(frozen=True, slots=True)
class DomainPair:
    """A scored sentence pair of an out-of-domain test set; ``score`` is the gold rescaled to 0-1."""

    sentence1: str
    sentence2: str
    score: float

    @property
    def label(self) -> int | None:
        """1 alike, 0 not alike, None in between."""
        if self.score >= ALIKE_FROM:
            return 1
        return 0 if self.score <= NOT_ALIKE_UNTIL else None


def _sick(data_dir: Path) -> list[DomainPair]:
    path = data_dir / "sick" / "SICK_test_annotated.txt"
    return [DomainPair(p.sentence1, p.sentence2, (p.relatedness - 1) / 4) for p in read_sick(path, "test")]


def _sts_qa(data_dir: Path) -> list[DomainPair]:
    return [DomainPair(p.sentence1, p.sentence2, p.score / 5)
            for year, sets in STS_QA_SETS.items()
            for p in read_sts_year(data_dir / "sts12-16" / year) if p.genre in sets]


OOD_DOMAINS: dict[str, Callable[[Path], list[DomainPair]]] = {"sick": _sick, "sts-qa": _sts_qa}


def in_tune_part(sentence: str) -> bool:
    """The fixed cut: True for the tune part, False for the test part."""
    return text_fraction(sentence) < TUNE_SHARE


def domain_part(data_dir: Path, domain: str, part: str) -> list[DomainPair]:
    """The pairs of one part ("tune" or "test") of one domain, in file order."""
    wanted = part == "tune"
    return [pair for pair in OOD_DOMAINS[domain](data_dir) if in_tune_part(pair.sentence1) == wanted]


def ranking_accuracy(cosines: np.ndarray, labels: Sequence[int | None]) -> float:
    """The share of (alike, not alike) pairs of pairs where the alike pair has the higher cosine,
    ties counting half (the area under the ROC curve); NaN without both kinds."""
    known = np.array([label is not None for label in labels])
    alike = np.array([label == 1 for label in labels])[known]
    scores = cosines[known]
    positives, negatives = int(alike.sum()), int((~alike).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[alike].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def evaluate_pairs(encoder: Encoder, pairs: Sequence[DomainPair]) -> dict[str, Any]:
    """Pair ranking accuracy and Pearson r of the cosines against the gold scores."""
    texts = sorted({text for pair in pairs for text in (pair.sentence1, pair.sentence2)})
    row = {text: i for i, text in enumerate(texts)}
    vectors = encoder.encode(texts)
    first = vectors[[row[p.sentence1] for p in pairs]]
    second = vectors[[row[p.sentence2] for p in pairs]]
    cosines = (first * second).sum(axis=1)
    labels = [pair.label for pair in pairs]
    return {"ranking_accuracy": ranking_accuracy(cosines, labels),
            "pearson": float(pearsonr(cosines, [p.score for p in pairs])[0]),
            "pairs": len(pairs), "alike": labels.count(1), "not_alike": labels.count(0)}


def evaluate_domains(encoder: Encoder, data_dir: Path, part: str = "test",
                     domains: Iterable[str] = tuple(OOD_DOMAINS)) -> dict[str, Any]:
    """Each domain's figures on one part, and their mean accuracy and mean r."""
    result: dict[str, Any] = {name: evaluate_pairs(encoder, domain_part(data_dir, name, part))
                              for name in domains}
    result["mean"] = {key: float(np.mean([figures[key] for figures in result.values()]))
                      for key in ("ranking_accuracy", "pearson")}
    return result


class CachedEncoder:
    """An encoder whose vectors of a list of texts are kept in ``directory`` (one .npy per list
    and model), so that tables over several models and domains are computed once."""

    def __init__(self, encoder: Encoder, directory: Path, model_key: str) -> None:
        self.encoder, self.directory, self.model_key = encoder, directory, model_key

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        digest = hashlib.sha256(json.dumps([self.model_key, list(texts)]).encode()).hexdigest()[:24]
        path = self.directory / f"{digest}.npy"
        if path.is_file():
            return np.load(path)
        vectors = self.encoder.encode(texts)
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp.npy")
        np.save(temporary, vectors)
        temporary.replace(path)
        return vectors
