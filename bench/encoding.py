"""Encoding throughput: sentences/s at batch sizes 1 and 256 on the same real questions, each
askalike model against all-MiniLM-L6-v2 run through sentence-transformers, in one process.

    .venv/bin/python -m bench.encoding --model runs/dan-conversations-nli/model [--model ...]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from bench.common import markdown_table, real_questions, write_section
from core.loader import load_encoder
from core.model_dir import PRETRAINED

Encode = Callable[[Sequence[str], int], np.ndarray]


def sentences_per_second(encode: Encode, texts: Sequence[str], batch_size: int) -> float:
    encode(texts[:batch_size], batch_size)  # warm-up: first-call allocations, lazy imports
    started = time.perf_counter()
    encode(texts, batch_size)
    return len(texts) / (time.perf_counter() - started)


def sentence_transformers_minilm() -> Encode:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(PRETRAINED["all-MiniLM-L6-v2"]()), device="cpu")
    return lambda texts, batch_size: model.encode(list(texts), batch_size=batch_size,
                                                  normalize_embeddings=True)


def askalike_model(spec: str) -> Encode:
    encoder = load_encoder(spec)
    return lambda texts, batch_size: encoder.encode(texts, batch_size=batch_size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], help="askalike model (repeatable)")
    parser.add_argument("--questions", type=int, default=10_000)
    parser.add_argument("--batch-one-questions", type=int, default=10_000,
                        help="questions for the batch-size-1 runs (fewer keeps MiniLM's short)")
    args = parser.parse_args()
    texts = real_questions(args.questions)
    systems = {"all-MiniLM-L6-v2 (sentence-transformers)": sentence_transformers_minilm()}
    systems |= {spec: askalike_model(spec) for spec in args.model}
    figures: dict[str, dict[int, float]] = {}
    for name, encode in systems.items():
        figures[name] = {256: sentences_per_second(encode, texts, 256),
                         1: sentences_per_second(encode, texts[: args.batch_one_questions], 1)}
        print(name, {k: round(v, 1) for k, v in figures[name].items()}, flush=True)
    peer = figures["all-MiniLM-L6-v2 (sentence-transformers)"]
    rows = [(f"`{name}`", f"{f[1]:,.0f}", f"{f[1] / peer[1]:.1f}x", f"{f[256]:,.0f}",
             f"{f[256] / peer[256]:.1f}x") for name, f in figures.items()]
    body = (f"{len(texts):,} distinct real questions (`bench.common.real_questions`: every Qatar Living "
            "question of the CQA training and dev files, then questions from conversation turns; mean "
            f"{np.mean([len(t.split()) for t in texts]):.0f} words); batch size 1 on the first "
            f"{min(args.batch_one_questions, len(texts)):,}. torch threads: {torch.get_num_threads()}.\n\n"
            + markdown_table(["model", "batch 1 sent/s", "vs MiniLM", "batch 256 sent/s", "vs MiniLM"], rows))
    write_section("encoding", "Encoding throughput", "python -m bench.encoding "
                  + " ".join(f"--model {m}" for m in args.model)
                  + f" --questions {args.questions} --batch-one-questions {args.batch_one_questions}", body)


if __name__ == "__main__":
    main()
