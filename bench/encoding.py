"""Encoding throughput: sentences/s at batch sizes 1 and 256 on the same real questions, each
askalike model against all-MiniLM-L6-v2 run through sentence-transformers.

    .venv/bin/python -m bench.encoding --model models/fast [--model ...] [--threads 2] [--rounds 2]

Every system runs in a fresh process under the same thread settings (``bench.harness.thread_env
(--threads)``, one thread a core by default: torch follows OMP_NUM_THREADS, askalike's numpy
BLAS, and its ONNX Runtime sessions are given the same count). The systems alternate, round by
round in an order that reverses (A B, B A, ...); each figure is the best of its rounds, and the
report gives the 1-minute load average at the start of every run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import time
from collections.abc import Callable, Sequence

import numpy as np

from askalike.core.model_dir import PRETRAINED
from bench.harness import (
    alternated,
    describe_threads,
    load_average,
    markdown_table,
    real_questions,
    run_child,
    write_section,
)

Encode = Callable[[Sequence[str], int], np.ndarray]
PEER = "all-MiniLM-L6-v2 (sentence-transformers)"
BATCHES = (1, 256)


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


def askalike_model(spec: str, threads: int | None = None) -> Encode:
    """``spec``'s encoder at ``threads`` threads (None: ONNX Runtime's choice, as a query runs)."""
    from askalike.core.loader import load_encoder

    encoder = load_encoder(spec, threads=threads)
    return lambda texts, batch_size: encoder.encode(texts, batch_size=batch_size)


def child(system: str, args: argparse.Namespace) -> dict[str, float]:
    """One system's sentences/s at each batch size (run in a fresh process)."""
    load = load_average()
    texts = real_questions(args.questions)
    encode = sentence_transformers_minilm() if system == PEER else askalike_model(system, args.threads)
    return {"load": load, "1": sentences_per_second(encode, texts[: args.batch_one_questions], 1),
            "256": sentences_per_second(encode, texts, 256)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", default=[], help="askalike model (repeatable)")
    parser.add_argument("--questions", type=int, default=10_000)
    parser.add_argument("--batch-one-questions", type=int, default=10_000,
                        help="questions for the batch-size-1 runs (fewer keeps MiniLM's short)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="compute threads of every system (default: one a core)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each system, order alternating")
    parser.add_argument("--section", default="encoding",
                        help="the report's section in docs/benchmarks.md (another machine's: another name)")
    parser.add_argument("--title", default="", help="what the section's title adds (e.g. the machine)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    options = ["--questions", str(args.questions), "--batch-one-questions", str(args.batch_one_questions),
               "--threads", str(args.threads)]
    if args.child:
        print(json.dumps(child(args.child, args)))
        return
    texts = real_questions(args.questions)
    runs: dict[str, list[dict[str, float]]] = {system: [] for system in [PEER, *args.model]}
    for order in alternated(list(runs), args.rounds):
        for system in order:
            runs[system].append(run_child("bench.encoding", [*options, "--child", system], system,
                                          threads=args.threads))
            print(system, runs[system][-1], flush=True)
    best = {system: {batch: max(run[str(batch)] for run in done) for batch in BATCHES}
            for system, done in runs.items()}
    peer = best[PEER]
    rows = [(f"`{system}`", f"{figures[1]:,.0f}", f"{figures[1] / peer[1]:.1f}x", f"{figures[256]:,.0f}",
             f"{figures[256] / peer[256]:.1f}x", ", ".join(f"{run['load']:.2f}" for run in runs[system]))
            for system, figures in best.items()]
    order = " | ".join(" ".join(str(list(runs).index(system) + 1) for system in round_)
                       for round_ in alternated(list(runs), args.rounds))
    body = (f"{len(texts):,} distinct real questions (`bench.harness.real_questions`: every Qatar Living "
            "question of the CQA training and dev files, then questions from conversation turns; mean "
            f"{np.mean([len(t.split()) for t in texts]):.0f} words); batch size 1 on the first "
            f"{min(args.batch_one_questions, len(texts)):,}. Every system in a fresh process under "
            f"{describe_threads(args.threads)} (torch follows `OMP_NUM_THREADS`; askalike's ONNX "
            f"Runtime sessions are given {args.threads} thread(s)), on {os.cpu_count()} cores. "
            f"{args.rounds} round(s), the systems in the order {order} (numbered as the rows); "
            "each figure is the best of its rounds; the last column is the 1-minute load average "
            "when each of its runs started.\n\n"
            + markdown_table(["model", "batch 1 sent/s", "vs MiniLM", "batch 256 sent/s", "vs MiniLM",
                              "load avg 1 min"], rows))
    title = "Encoding throughput" + (f" ({args.title})" if args.title else "")
    write_section(args.section, title, "python -m bench.encoding "
                  + " ".join(f"--model {m}" for m in args.model)
                  + f" --questions {args.questions} --batch-one-questions {args.batch_one_questions}"
                  + f" --threads {args.threads} --rounds {args.rounds}"
                  + (f" --section {shlex.quote(args.section)}" if args.section != "encoding" else "")
                  + (f" --title {shlex.quote(args.title)}" if args.title else ""), body)


if __name__ == "__main__":
    main()
