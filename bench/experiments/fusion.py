"""How to fuse dense and lexical scores (issue: ranking quality): the shipped convex combination
of min-max normalised scores against z-score normalisation and weighted reciprocal-rank fusion
(RRF, score = w / (k + dense rank) + (1 - w) / (k + BM25 rank)), each at its best dense weight
on the grid that tuning uses. Choose on dev 2016; other splits are for the record.

    python -m bench.experiments.fusion --model models/fast [--splits dev2016 test2016 test2017]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from askalike.retrieval.cqa_runs import load_cqa_split
from askalike.retrieval.fusion import Fusion, fuse_lists
from askalike.retrieval.model_card import best_dense_weight
from askalike.retrieval.reranker import Reranker
from bench.experiments.levers import cqa_lever_arguments


def ranks(scores: Sequence[float]) -> np.ndarray:
    """1 for the best score; ties keep the candidates' order."""
    order = np.argsort(-np.asarray(scores, dtype=float), kind="stable")
    result = np.empty(len(order))
    result[order] = np.arange(1, len(order) + 1)
    return result


def z_scores(scores: Sequence[float]) -> np.ndarray:
    values = np.asarray(scores, dtype=float)
    spread = values.std()
    return (values - values.mean()) / spread if spread > 0 else np.zeros_like(values)


def reciprocal_rank_fusion(k: int) -> Fusion:
    return lambda dense, lexical, w: list(w / (k + ranks(dense)) + (1 - w) / (k + ranks(lexical)))


FUSIONS: dict[str, Fusion] = {
    "min-max (shipped)": fuse_lists,
    "z-score": lambda dense, lexical, w: list(w * z_scores(dense) + (1 - w) * z_scores(lexical)),
    **{f"RRF k={k}": reciprocal_rank_fusion(k) for k in (1, 10, 60)},
}


def main() -> None:
    encoder, data_dir, splits = cqa_lever_arguments(__doc__.splitlines()[0])
    for name in splits:
        split = load_cqa_split(data_dir, name)
        dense = Reranker(encoder).scores(split.questions)
        lexical = Reranker.lexical_scores(split.questions)
        for method, fusion in FUSIONS.items():
            best_weight, best_map = best_dense_weight(split, dense, lexical, fusion)
            print(f"{name}  {method:18s} best MAP {100 * best_map:.2f} at dense weight {best_weight:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
