"""The figures recorded beside a shipped model: STS Benchmark r (raw and tuned), CQA subtask-B
MAP dense and hybrid, on the tuning splits only or, once a model is final, on the test splits
too; and the hybrid weight, tuned on dev 2016 only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from askalike.core.datasets import read_sts_benchmark, stsb_path
from askalike.core.encoder import Encoder
from askalike.core.files import write_text_atomically
from askalike.core.model_dir import HYBRID_WEIGHT_KEY, update_model_config
from askalike.core.sts_evaluation import evaluate_sts, fit_sts_transform
from askalike.retrieval.cqa import evaluate_scores
from askalike.retrieval.cqa_runs import CqaSplit, load_cqa_split
from askalike.retrieval.fusion import WEIGHT_GRID, Fusion, SearchMode, fuse_lists
from askalike.retrieval.reranker import Reranker

TUNING_SPLITS = {"stsb": ("dev",), "cqa": ("dev2016",)}
ALL_SPLITS = {"stsb": ("dev", "test"), "cqa": ("dev2016", "test2016", "test2017")}


def model_figures(encoder: Encoder, data_dir: Path, with_test: bool) -> dict[str, Any]:
    """{"stsb": {split: {"raw": r, "tuned": r}}, "cqa_map": {split: MAP}, "hybrid_cqa_map":
    {split: MAP}, "hybrid_dense_weight": w}, rounded as ``askalike eval sts/cqa --json`` print
    them."""
    splits = ALL_SPLITS if with_test else TUNING_SPLITS
    transform = fit_sts_transform(encoder, list(read_sts_benchmark(stsb_path(data_dir, "train"))))
    stsb = {}
    for split in splits["stsb"]:
        pairs = list(read_sts_benchmark(stsb_path(data_dir, split)))
        stsb[split] = {"raw": evaluate_sts(encoder, pairs)["pearson"],
                       "tuned": evaluate_sts(encoder, pairs, transform)["pearson"]}
    weight, _ = tune_dense_weight(encoder, load_cqa_split(data_dir, "dev2016"))
    rerankers = {"cqa_map": Reranker(encoder),
                 "hybrid_cqa_map": Reranker(encoder, SearchMode.hybrid, weight)}
    cqa: dict[str, dict[str, float]] = {name: {} for name in rerankers}
    for split in splits["cqa"]:
        cqa_split = load_cqa_split(data_dir, split)
        for name, reranker in rerankers.items():
            cqa[name][split] = cqa_map(cqa_split, reranker.scores(cqa_split.questions))
    return {"stsb": stsb, **cqa, "hybrid_dense_weight": weight}


def record_figures(directory: Path, figures: dict[str, Any], of_torch_model: bool) -> None:
    """Keep the figures in the model's metrics.json, under "evaluation" (the exported encoder
    that queries use) or "evaluation_torch"; the exported encoder's tuned hybrid weight also
    goes into its config.json, where search reads it."""
    metrics_path = directory / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    key = "evaluation_torch" if of_torch_model else "evaluation"
    write_text_atomically(metrics_path, json.dumps({**metrics, key: figures}, indent=2) + "\n")
    if not of_torch_model:
        update_model_config(directory, **{HYBRID_WEIGHT_KEY: figures[HYBRID_WEIGHT_KEY]})


def cqa_map(split: CqaSplit, scores: list[list[float]]) -> float:
    """Subtask-B MAP (0-1) of ranking each original question's candidates by ``scores``."""
    return evaluate_scores(split, "model", scores).report.summary()["map"]


def tune_dense_weight(encoder: Encoder, split: CqaSplit) -> tuple[float, float]:
    """The dense weight of hybrid reranking with the best MAP on ``split`` (dev 2016: never a test
    split), and that MAP; a tie goes to the larger dense weight. The grid includes 1.0 (dense
    alone), so the tuned hybrid is never below dense on the split it was tuned on."""
    return best_dense_weight(split, Reranker(encoder).scores(split.questions),
                             Reranker.lexical_scores(split.questions))


def best_dense_weight(split: CqaSplit, dense: list[list[float]], lexical: list[list[float]],
                      fuse: Fusion = fuse_lists) -> tuple[float, float]:
    """The weight of ``WEIGHT_GRID`` at which ``fuse`` of the two scores has the best MAP on
    ``split``, and that MAP; a tie goes to the larger dense weight."""
    results = [(cqa_map(split, [fuse(d, lex, weight) for d, lex in zip(dense, lexical, strict=True)]),
                weight) for weight in WEIGHT_GRID]
    best_map, best_weight = max(results)
    return best_weight, best_map
