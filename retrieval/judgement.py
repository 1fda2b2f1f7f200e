"""Whether two questions are the same question: the one judgement behind search's ``match``,
``--collapse``, ``duplicates``, ``similar``, the TUI, the HTTP API and the page.

``match`` is a calibrated probability: of the pairs shown at 80%, about 80% ask the same
question. It comes from the cosine of the two questions' vectors (the query's and a hit's, or two
stored questions'), mapped by Platt scaling (Platt 1999: a logistic curve, two parameters) fitted
on pairs judged "the same question" or not: for the shipped models CQA's PerfectMatch pairs
against its Relevant and Irrelevant ones (train and dev 2016), for a tuned model the user's own
held-out pairs. The curve is increasing, so a threshold on ``match`` is one on the cosine
(``cosine_for``): ``duplicates`` finds its candidates with FAISS at that cosine, and search ranks
as before in every mode; only the figure a person reads changed scale (hybrid's min-max score
was relative to each query's candidates, so a weak top hit showed 100%).

Each model records its curve in its config.json (``same_question``); a model without one (a
peer never calibrated, an old model directory) shows the cosine clipped to [0, 1] and says so
(``askalike calibrate`` fits one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from askalike.core.model_dir import (
    ModelError,
    calibration_dir,
    pretrained_name,
    read_model_config,
    update_model_config,
    write_model_config,
)

CONFIG_KEY = "same_question"
# the decisions' default: a pair more likely the same question than not (duplicates, --collapse,
# similar, GET /duplicates, the TUI's "alike" folding); search itself shows every hit by default
SAME_QUESTION = 0.5
SEARCH_MIN_MATCH = 0.0
CALIBRATION_BINS = 10


@dataclass(frozen=True)
class SameQuestionJudge:
    """P(same question | cosine) = 1 / (1 + exp(-(slope * cosine + intercept)))."""

    slope: float
    intercept: float
    fitted_on: str = ""  # the pairs the curve was fitted on, in words
    figures: dict[str, Any] | None = None  # what the fit measured (pairs, calibration error)

    def probability(self, cosine: np.ndarray | float) -> np.ndarray | float:
        return 1.0 / (1.0 + np.exp(-(self.slope * np.asarray(cosine, dtype=np.float64) + self.intercept)))

    def cosine_for(self, probability: float) -> float:
        """The cosine at which ``probability`` is reached (below -1 or above 1 where no cosine
        reaches it)."""
        if probability <= 0.0:
            return -math.inf
        if probability >= 1.0:
            return math.inf
        return (math.log(probability / (1 - probability)) - self.intercept) / self.slope

    def as_config(self) -> dict[str, Any]:
        return {"platt": {"slope": self.slope, "intercept": self.intercept},
                "fitted_on": self.fitted_on, "figures": self.figures or {}}

    @classmethod
    def from_config(cls, value: Any, where: str) -> SameQuestionJudge:
        try:
            platt = value["platt"]
            slope, intercept = float(platt["slope"]), float(platt["intercept"])
        except (TypeError, KeyError, ValueError):
            raise ModelError(f"{where}: \"{CONFIG_KEY}\" is not a calibration "
                             "(expected {\"platt\": {\"slope\": ..., \"intercept\": ...}})") from None
        if not slope > 0:
            raise ModelError(f"{where}: \"{CONFIG_KEY}\" has slope {slope}: match must rise with the cosine")
        return cls(slope, intercept, str(value.get("fitted_on", "")), value.get("figures") or {})


class UncalibratedJudge:
    """A model without a calibration: the cosine clipped to [0, 1], as match was before."""

    fitted_on = ""

    def probability(self, cosine: np.ndarray | float) -> np.ndarray | float:
        return np.clip(np.asarray(cosine, dtype=np.float64), 0.0, 1.0)

    def cosine_for(self, probability: float) -> float:
        return probability


Judge = SameQuestionJudge | UncalibratedJudge


def model_judge(spec: str | Path) -> Judge:
    """The judge recorded for a model (``--model`` value), else ``UncalibratedJudge``."""
    directory = calibration_dir(spec)
    config = read_model_config(directory) if (directory / "config.json").is_file() else {}
    if CONFIG_KEY not in config:
        return UncalibratedJudge()
    return SameQuestionJudge.from_config(config[CONFIG_KEY], str(directory / "config.json"))


def record_judge(spec: str | Path, judge: SameQuestionJudge) -> None:
    """Write ``judge`` into the model's config.json (not part of its weights' fingerprint, so
    indexes built with the model stay valid); a peer's export directory gets one."""
    directory = calibration_dir(spec)
    if pretrained_name(spec) is not None and not (directory / "config.json").is_file():
        write_model_config(directory, {"kind": "pretrained"})
    update_model_config(directory, **{CONFIG_KEY: judge.as_config()})


def fit_platt(cosines: Sequence[float] | np.ndarray, same: Sequence[bool] | np.ndarray,
              iterations: int = 100) -> tuple[float, float]:
    """(slope, intercept) of the logistic curve that best predicts ``same`` from ``cosines``
    (Newton's method on the log loss, with Platt's smoothed targets so that a separable set still
    gives finite parameters)."""
    x = np.asarray(cosines, dtype=np.float64)
    y = np.asarray(same, dtype=bool)
    positives, negatives = int(y.sum()), int((~y).sum())
    if positives == 0 or negatives == 0:
        raise ValueError(f"calibration needs pairs of both kinds: {positives} same, {negatives} not")
    target = np.where(y, (positives + 1) / (positives + 2), 1 / (negatives + 2))
    design = np.stack([x, np.ones_like(x)], axis=1)
    weights = np.zeros(2)
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(design @ weights)))
        gradient = design.T @ (p - target)
        hessian = design.T @ (design * (p * (1 - p))[:, None]) + 1e-9 * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        weights -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return float(weights[0]), float(weights[1])


def calibration_error(probabilities: Sequence[float] | np.ndarray, same: Sequence[bool] | np.ndarray,
                      bins: int = CALIBRATION_BINS) -> float:
    """Expected calibration error: over ``bins`` equal-width bins of the probability, the gap
    between the mean probability and the share that are the same question, weighted by the
    bin's share of the pairs."""
    p = np.asarray(probabilities, dtype=np.float64)
    y = np.asarray(same, dtype=np.float64)
    which = np.minimum((p * bins).astype(int), bins - 1)
    return float(sum(abs(p[which == b].mean() - y[which == b].mean()) * np.sum(which == b)
                     for b in range(bins) if np.any(which == b)) / len(p))


def f1_at(probabilities: np.ndarray, same: np.ndarray, threshold: float) -> float:
    """F1 of calling "the same question" the pairs at ``threshold`` or more (``same``: booleans,
    or 1 and 0)."""
    same = np.asarray(same, dtype=bool)
    predicted = np.asarray(probabilities) >= threshold
    hits = int(np.sum(predicted & same))
    return 0.0 if hits == 0 else 2 * hits / (int(predicted.sum()) + int(same.sum()))
