"""The figures recorded beside a shipped model: STS Benchmark r (raw and tuned) and CQA
subtask-B MAP, on the tuning splits only or, once a model is final, on the test splits too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from retrieval.cqa import evaluate_scores
from retrieval.cqa_runs import load_cqa_split
from retrieval.reranker import Reranker
from train.datasets import read_sts_benchmark, stsb_path
from train.evaluation import evaluate_sts, fit_sts_transform
from train.inference import Encoder

TUNING_SPLITS = {"stsb": ("dev",), "cqa": ("dev2016",)}
ALL_SPLITS = {"stsb": ("dev", "test"), "cqa": ("dev2016", "test2016", "test2017")}


def model_figures(encoder: Encoder, data_dir: Path, with_test: bool) -> dict[str, Any]:
    """{"stsb": {split: {"raw": r, "tuned": r}}, "cqa_map": {split: MAP}}, rounded as
    ``askalike eval sts/cqa --json`` print them."""
    splits = ALL_SPLITS if with_test else TUNING_SPLITS
    transform = fit_sts_transform(encoder, list(read_sts_benchmark(stsb_path(data_dir, "train"))))
    stsb = {}
    for split in splits["stsb"]:
        pairs = list(read_sts_benchmark(stsb_path(data_dir, split)))
        stsb[split] = {"raw": evaluate_sts(encoder, pairs)["pearson"],
                       "tuned": evaluate_sts(encoder, pairs, transform)["pearson"]}
    reranker = Reranker(encoder)
    cqa = {}
    for split in splits["cqa"]:
        cqa_split = load_cqa_split(data_dir, split)
        report = evaluate_scores(cqa_split, "model", reranker.scores(cqa_split.questions)).report
        cqa[split] = report.summary()["map"]
    return {"stsb": stsb, "cqa_map": cqa}
