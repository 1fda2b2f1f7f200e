"""The CPU time of one search in-process (no HTTP), by mode, over the index `bench.serve` builds
and caches: what a server's worker spends of its core on a search, beside the code of another
checkout (``--before DIR``: a folder holding that code as the ``askalike`` package), each in a
process of its own, the two alternated round by round.

    python -m bench.search_cpu [--questions 100000] [--model models/fast] [--modes dense hybrid]
                               [--before /tmp/pkg-before] [--rounds 4] [--queries 500]

Each round opens the index as ``askalike serve`` does (ids remembered, BM25 prepared), searches
200 queries to warm up, then times ``--queries`` others (``time.process_time``), one thread
(``OMP_NUM_THREADS=1``); the table gives the median and the best round of each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from statistics import median

from bench.harness import alternated, load_average, markdown_table, real_questions, thread_env, write_section
from bench.serve import CACHE, QUERY_CHARS, cached_index, collection_file

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 200


def measure(index: Path, modes: list[str], queries: list[str]) -> dict[str, float]:
    """ms of CPU a search, by mode, in this process (the code it imports)."""
    from askalike.retrieval.fusion import SearchMode
    from askalike.retrieval.results import Shown
    from askalike.retrieval.searcher import Searcher

    searcher = Searcher(index, remember_stored=True, prepared=True)
    shown, cpu_ms = Shown(), {}
    for mode in modes:
        for query in queries[:WARM_UP]:
            shown.search(searcher, [query], mode=SearchMode(mode))
        started = time.process_time()
        for query in queries[WARM_UP:]:
            shown.search(searcher, [query], mode=SearchMode(mode))[0].payload(searcher.source_label)
        cpu_ms[mode] = 1000 * (time.process_time() - started) / (len(queries) - WARM_UP)
    return cpu_ms


def checkout_commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip() or "no git"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--model", default="models/fast")
    parser.add_argument("--index-type", default="hnsw")
    parser.add_argument("--modes", nargs="+", default=["dense", "hybrid"],
                        choices=["dense", "hybrid", "lexical"])
    parser.add_argument("--before", type=Path,
                        help="a folder holding the code to compare, as the askalike package")
    parser.add_argument("--before-label", default="--before", help="what the table calls that code")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--no-report", action="store_true", help="print, without writing docs/benchmarks.md")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)  # index, queries file: measure here
    args = parser.parse_args()
    if args.child:
        index, queries = args.child
        print(json.dumps(measure(Path(index), args.modes, json.loads(Path(queries).read_text()))))
        return

    texts = real_questions(args.questions + WARM_UP + args.queries)
    source = collection_file(texts[:args.questions], CACHE / f"questions-{args.questions}.jsonl")
    index = cached_index(args.model, source, args.questions, args.index_type)
    queries_file = CACHE / "search-cpu-queries.json"
    queries_file.write_text(json.dumps([t[:QUERY_CHARS] for t in texts[args.questions:]]))
    codes = {f"this checkout ({checkout_commit()})": str(ROOT)}
    if args.before:
        codes[args.before_label] = f"{args.before.resolve()}{os.pathsep}{ROOT}"
    results: dict[str, list[dict[str, float]]] = {code: [] for code in codes}
    for order in alternated(list(codes), args.rounds):
        for code in order:
            answer = subprocess.run(
                [sys.executable, "-m", "bench.search_cpu", "--modes", *args.modes, "--child", str(index),
                 str(queries_file)], cwd=ROOT, check=True, capture_output=True, text=True,
                env={**os.environ, **thread_env(1), "PYTHONPATH": codes[code]})
            results[code].append(json.loads(answer.stdout))
            print(f"{code}: {results[code][-1]} (load {load_average():.2f})", file=sys.stderr, flush=True)
    rows = [[code, mode, f"{median(r[mode] for r in runs):.3f}", f"{min(r[mode] for r in runs):.3f}"]
            for code, runs in results.items() for mode in args.modes]
    table = markdown_table(["code", "mode", "CPU ms a search (median of rounds)", "best round"], rows)
    command = (f"python -m bench.search_cpu --questions {args.questions} --model {args.model} --modes "
               f"{' '.join(args.modes)} --rounds {args.rounds} --queries {args.queries}"
               + (" --before DIR" if args.before else ""))
    body = (f"{args.questions:,} questions ({args.index_type}), {args.model}, k=10, {args.queries} queries "
            f"a round after {WARM_UP} to warm up, {args.rounds} rounds alternated, one thread.\n\n{table}\n")
    if args.no_report:
        print(table)
    else:
        write_section("search-cpu", "The CPU time of one search in-process (issue 55)", command, body)


if __name__ == "__main__":
    main()
