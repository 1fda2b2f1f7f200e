"""Do the questions' words help the same-question judge (issue 50)? A logistic curve of the
cosine, the Jaccard overlap of the two questions' content words and their length ratio, fitted
on CQA train and dev 2016 as ``askalike calibrate`` fits the judge, against the judge itself
(the cosine alone): PerfectMatch F1 at 50% and the calibration error, on dev and test 2016.

    python -m bench.experiments.words_beside_cosine [--model models/accurate]
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

import numpy as np

from askalike.core.data_dir import resolve_data_dir
from askalike.core.loader import load_encoder
from askalike.retrieval.calibration import FIT_SPLITS, JudgedPair, cqa_pairs, pair_cosines
from askalike.retrieval.judgement import SAME_QUESTION, SameQuestionJudge, calibration_error, f1_at, fit_platt
from bench.experiments.same_question import fit_logistic

STOPWORDS = frozenset({"the", "a", "an", "to", "in", "of", "i", "is", "and", "for", "what", "how", "do",
                       "can", "my", "it", "you", "any", "there", "qatar", "doha", "this", "on", "be",
                       "are", "me", "or", "with"})
PENALTY = 1e-4


def content_words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower())) - STOPWORDS


def features(pairs: Sequence[JudgedPair], cosines: np.ndarray) -> np.ndarray:
    """(cosine, Jaccard overlap of content words, length ratio, 1) of each pair."""
    overlap = np.array([len(content_words(p.first) & content_words(p.second))
                        / max(1, len(content_words(p.first) | content_words(p.second))) for p in pairs])
    lengths = np.array([min(len(p.first), len(p.second)) / max(len(p.first), len(p.second), 1)
                        for p in pairs])
    return np.stack([cosines, overlap, lengths, np.ones_like(cosines)], axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/accurate")
    args = parser.parse_args()
    data_dir, encoder = resolve_data_dir(), load_encoder(args.model)
    data = {}
    for split in (*FIT_SPLITS, "test2016"):
        pairs = cqa_pairs(data_dir, split)
        data[split] = (features(pairs, pair_cosines(encoder, pairs)), np.array([p.same for p in pairs]))
    x = np.vstack([data[split][0] for split in FIT_SPLITS])
    y = np.concatenate([data[split][1] for split in FIT_SPLITS])
    weights = fit_logistic(x, y.astype(float), PENALTY)
    judge = SameQuestionJudge(*fit_platt(x[:, 0], y))
    print(f"weights (cosine, overlap, length ratio, bias): {np.round(weights, 3).tolist()}")
    for split in ("dev2016", "test2016"):
        features_, same = data[split]
        with_words = 1 / (1 + np.exp(-(features_ @ weights)))
        cosine_only = np.asarray(judge.probability(features_[:, 0]))
        print(f"{split}: with words F1 {f1_at(with_words, same, SAME_QUESTION):.3f}, calibration error "
              f"{calibration_error(with_words, same):.3f}; cosine alone F1 "
              f"{f1_at(cosine_only, same, SAME_QUESTION):.3f}, calibration error "
              f"{calibration_error(cosine_only, same):.3f}")


if __name__ == "__main__":
    main()
