"""Index build: questions/s (end to end: read, embed, store, FAISS file) and peak memory for
collections of 10k, 100k and 1M questions, each size in a fresh process; with ``--engines
in-process ray``, each size with both engines, and the ray engine's time over the in-process one
(a local Ray started by the run is part of its time; with ``$RAY_ADDRESS`` set, the run joins
that cluster instead).

    .venv/bin/python -m bench.index_build --model runs/dan-conversations-nli/model [--sizes 10000 100000]
    .venv/bin/python -m bench.index_build --model models/fast --sizes 100000 --engines in-process ray

Sizes above the 10,000 real questions repeat them with variations (bench.harness.varied_questions).
A run with one engine writes the section "Index build" of docs/benchmarks.md, one with several
the section "Index build by engine".

Thread settings (``bench.harness.thread_env``), the same compute for each engine: the in-process
engine runs one process at ``--threads`` threads (default one a core; its ONNX Runtime sessions
are given that count); the ray engine runs its process, and the local Ray it starts, at one
thread each, its tasks taking one CPU each (``--threads`` of them at once on a local Ray). Each
size is built ``--rounds`` times with every engine, the engines in an order that reverses from
round to round (A B, B A, ...); the table gives each engine's best round, with the 1-minute load
average when each of its rounds started.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from askalike.indexer.build import IndexOptions, index_sources
from askalike.indexer.choices import Engine
from bench.harness import (
    alternated,
    describe_threads,
    load_average,
    markdown_table,
    peak_rss_mib,
    run_child,
    varied_questions,
    write_section,
)


def engine_threads(engine: Engine, threads: int) -> int:
    """The threads of each computing process of ``engine`` (a Ray task's: one, as it takes one CPU)."""
    return 1 if engine is Engine.ray else threads


def build_once(model: str, size: int, index_type: str, engine: Engine, threads: int) -> dict[str, float]:
    """Index ``size`` questions into a new SQLite-backed index (run in a child process)."""
    load = load_average()
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        source = Path(scratch) / "questions.jsonl"
        with open(source, "w", encoding="utf-8") as handle:
            for number, text in enumerate(varied_questions(size)):
                handle.write(json.dumps({"id": number, "subject": text}) + "\n")
        started = time.perf_counter()
        report = index_sources(Path(scratch) / "index", [source], model,
                               options=IndexOptions(index_type=index_type, show_progress=False,
                                                    engine=engine, threads=engine_threads(engine, threads)))
        seconds = time.perf_counter() - started
        disk = sum(f.stat().st_size for f in (Path(scratch) / "index").rglob("*") if f.is_file())
    return {"size": size, "engine": engine.value, "seconds": seconds, "questions_per_s": size / seconds,
            "embed_seconds": report.embed_seconds, "peak_rss_mib": peak_rss_mib(),
            "index_dir_mib": disk / 2**20, "load": load}


def _ray_cluster() -> str:
    address = os.environ.get("RAY_ADDRESS")
    return (f"joins the running cluster at {address}" if address
            else "starts a local Ray, and its time includes that start and the shutdown")


def best_rounds(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each (size, engine)'s fastest round, with the load averages of all its rounds, and its
    time over the first engine's best at that size."""
    best: dict[tuple[int, str], dict[str, Any]] = {}
    for run in runs:
        key = (run["size"], run["engine"])
        loads = [*best.get(key, {}).get("loads", []), run["load"]]
        if key not in best or run["seconds"] < best[key]["seconds"]:
            best[key] = dict(run)
        best[key]["loads"] = loads
    rows = list(best.values())
    for row in rows:
        row["ratio"] = row["seconds"] / next(r["seconds"] for r in rows if r["size"] == row["size"])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--index-type", default="flat")
    parser.add_argument("--engines", type=Engine, nargs="+", default=[Engine.in_process],
                        help=f"{', '.join(Engine)} (each size with each, in this order)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads of the in-process engine (default: one a core)")
    parser.add_argument("--rounds", type=int, default=2, help="builds of each size and engine")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(build_once(args.model, args.child, args.index_type, args.engines[0], args.threads)))
        return
    runs = []
    for size in args.sizes:
        for order in alternated(args.engines, args.rounds):
            for engine in order:
                runs.append(run_child(
                    "bench.index_build", ["--model", args.model, "--index-type", args.index_type, "--engines",
                                          engine.value, "--threads", str(args.threads), "--child", str(size)],
                    f"indexing {size:,} with {engine.value}", threads=engine_threads(engine, args.threads)))
                print(runs[-1], flush=True)
    results = best_rounds(runs)
    by_engine = len(args.engines) > 1
    columns = [("questions", lambda r: f"{r['size']:,}"), ("engine", lambda r: r["engine"]),
               ("wall s", lambda r: f"{r['seconds']:,.1f}"),
               (f"x {args.engines[0].value}", lambda r: f"{r['ratio']:.2f}"),
               ("questions/s", lambda r: f"{r['questions_per_s']:,.0f}"),
               ("of which embedding s", lambda r: f"{r['embed_seconds']:,.1f}"),
               ("peak RSS MiB", lambda r: f"{r['peak_rss_mib']:,.0f}"),
               ("index dir MiB", lambda r: f"{r['index_dir_mib']:,.0f}"),
               ("load avg 1 min", lambda r: ", ".join(f"{load:.2f}" for load in r["loads"]))]
    if not by_engine:
        columns = [column for column in columns if column[0] != "engine" and not column[0].startswith("x ")]
    threads = (f"in-process: one process under {describe_threads(args.threads)}; ray: every process "
               f"under {describe_threads(1)}, its tasks taking one CPU each"
               if by_engine else f"one process under {describe_threads(args.threads)}")
    body = (f"Model `{args.model}`, index type {args.index_type}, SQLite store, default batch and "
            "commit sizes; the source JSON Lines file is written before the clock starts"
            + (f"; the ray engine {_ray_cluster()}" if by_engine else "")
            + f". Threads ({os.cpu_count()} cores): {threads}. {args.rounds} round(s) of each size"
            + (", the engines in an order that reverses from round to round" if by_engine else "")
            + "; the table gives the best round, and the 1-minute load average when each round "
            "started.\n\n"
            + markdown_table([name for name, _ in columns],
                             [[cell(result) for _, cell in columns] for result in results]))
    command = (f"python -m bench.index_build --model {args.model} --sizes {' '.join(map(str, args.sizes))}"
               f" --threads {args.threads} --rounds {args.rounds}")
    if by_engine:
        command += f" --engines {' '.join(engine.value for engine in args.engines)}"
        write_section("index-engines", "Index build by engine", command, body)
    else:
        write_section("index-build", "Index build", command, body)


if __name__ == "__main__":
    main()
