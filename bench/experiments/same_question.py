"""Can a judge on the bi-encoder's vectors alone tell "the same question" from "the same topic"
(issue 50)? On the CQA pairs with 3-way gold (train, dev 2016, test 2016), a logistic-regression
pair head over (u * v, |u - v|, cosine) of a model's vectors is trained on train, its threshold
and L2 weight chosen by F1 on dev 2016, and its test 2016 F1 set beside the cosine threshold's
chosen the same way; for PerfectMatch alone ("same question") and for PerfectMatch or Relevant.

    python -m bench.experiments.same_question [--model models/accurate]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize

from askalike.core.cqa_questions import read_cqa_questions, read_split_questions
from askalike.core.data_dir import resolve_data_dir
from askalike.core.loader import load_encoder
from askalike.retrieval.judgement import f1_at

TEST_2016_WITH_LABELS = "semeval-cqa/SemEval2016-Task3-CQA-QL-test.xml"  # the input file has none
PENALTIES = (1e-3, 1e-2, 1e-1)
Row = tuple[str, str, str]  # (original text, related text, relevance)


def labelled_pairs() -> dict[str, list[Row]]:
    data_dir = resolve_data_dir()
    splits = {name: read_split_questions(data_dir, name) for name in ("train", "dev2016")}
    splits["test2016"] = tuple(read_cqa_questions(data_dir / TEST_2016_WITH_LABELS))
    return {name: [(q.text, r.text, r.relevance) for q in questions for r in q.related if r.relevance]
            for name, questions in splits.items()}


def features(rows: Sequence[Row], vectors: dict[str, np.ndarray]) -> np.ndarray:
    first = np.stack([vectors[a] for a, _, _ in rows])
    second = np.stack([vectors[b] for _, b, _ in rows])
    cosine = np.sum(first * second, axis=1, keepdims=True)
    return np.hstack([first * second, np.abs(first - second), cosine, np.ones_like(cosine)])


def fit_logistic(x: np.ndarray, y: np.ndarray, penalty: float) -> np.ndarray:
    """Weights of an L2-penalised logistic regression (the last column, the bias, unpenalised)."""
    mask = np.r_[np.ones(x.shape[1] - 1), 0.0]

    def loss(weights: np.ndarray) -> tuple[float, np.ndarray]:
        p = 1 / (1 + np.exp(-(x @ weights)))
        value = -np.mean(y * np.log(p + 1e-9) + (1 - y) * np.log(1 - p + 1e-9))
        gradient = x.T @ (p - y) / len(y) + 2 * penalty * weights * mask
        return value + penalty * np.sum((weights * mask) ** 2), gradient

    return minimize(loss, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B").x


def best_threshold(scores: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(best F1, its threshold) over every score as the threshold."""
    return max((f1_at(scores, y, t), float(t)) for t in np.unique(scores))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/accurate")
    args = parser.parse_args()
    pairs = labelled_pairs()
    texts = sorted({text for rows in pairs.values() for a, b, _ in rows for text in (a, b)})
    vectors = dict(zip(texts, load_encoder(args.model).encode(texts), strict=True))
    for positive in ({"PerfectMatch"}, {"PerfectMatch", "Relevant"}):
        x = {name: features(rows, vectors) for name, rows in pairs.items()}
        y = {name: np.array([float(r in positive) for *_, r in rows]) for name, rows in pairs.items()}
        cosine = {name: matrix[:, -2] for name, matrix in x.items()}
        dev_f1, threshold = best_threshold(cosine["dev2016"], y["dev2016"])
        test = y["test2016"]
        label = f"{' or '.join(sorted(positive))} ({int(test.sum())} of {len(test)} test pairs)"
        print(f"{label}: cosine threshold {threshold:.3f}, F1 dev {dev_f1:.3f}, test 2016 "
              f"{f1_at(cosine['test2016'], y['test2016'], threshold):.3f}")
        heads = {penalty: fit_logistic(x["train"], y["train"], penalty) for penalty in PENALTIES}
        chosen = max(PENALTIES, key=lambda p: best_threshold(x["dev2016"] @ heads[p], y["dev2016"]))
        dev_f1, threshold = best_threshold(x["dev2016"] @ heads[chosen], y["dev2016"])
        print(f"  pair head (L2 {chosen:g}): F1 dev {dev_f1:.3f}, test 2016 "
              f"{f1_at(x['test2016'] @ heads[chosen], y['test2016'], threshold):.3f}")


if __name__ == "__main__":
    main()
