"""A lever for models/fast (issue: fast model) that needs no training: post-process its sentence
vectors before the cosine, by centring them on the mean of in-domain questions and removing the
top principal directions ("all-but-the-top", Mu & Viswanath 2018). The reference questions are
CQA train's (originals and related questions), never an evaluation split. Choose on dev 2016.

    python -m bench.experiments.postprocess --model models/fast [--splits dev2016 test2016 test2017]
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from askalike.core.encoder import BatchedEncoder, Encoder
from askalike.retrieval.cqa import evaluate_scores
from askalike.retrieval.cqa_runs import load_cqa_split
from askalike.retrieval.reranker import Reranker
from bench.experiments.levers import cqa_lever_arguments

REMOVED_DIRECTIONS = (0, 1, 2, 3, 5, 10)


class PostProcessed(BatchedEncoder):
    """``base``'s unit vectors minus ``mean``, with their components along ``directions`` removed
    (``encode`` normalises the result again)."""

    def __init__(self, base: Encoder, mean: np.ndarray, directions: np.ndarray) -> None:
        self.base, self.mean, self.directions = base, mean, directions
        self.kind, self.dim = base.kind, base.dim

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.base.embed_batch(texts).astype(np.float32)
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12) - self.mean
        return vectors - (vectors @ self.directions.T) @ self.directions


def reference_statistics(encoder: Encoder, data_dir: Path) -> tuple[np.ndarray, np.ndarray]:
    """The mean of the unit vectors of CQA train's distinct questions, and the principal
    directions (rows, strongest first) of the centred vectors."""
    train = load_cqa_split(data_dir, "train").questions
    texts = sorted({q.text for q in train} | {r.text for q in train for r in q.related})
    vectors = encoder.encode(texts)
    mean = vectors.mean(axis=0)
    _, _, directions = np.linalg.svd(vectors - mean, full_matrices=False)
    return mean, directions


def main() -> None:
    encoder, data_dir, splits = cqa_lever_arguments(__doc__.splitlines()[0])
    mean, directions = reference_statistics(encoder, data_dir)
    variants: dict[str, Encoder] = {"as shipped": encoder}
    for count in REMOVED_DIRECTIONS:
        variants[f"centred, top {count} removed"] = PostProcessed(encoder, mean, directions[:count])
    for name in splits:
        split = load_cqa_split(data_dir, name)
        for variant, variant_encoder in variants.items():
            report = evaluate_scores(split, variant, Reranker(variant_encoder).scores(split.questions)).report
            print(f"{name}  {variant:26s} MAP {100 * report.summary()['map']:.2f}", flush=True)


if __name__ == "__main__":
    main()
