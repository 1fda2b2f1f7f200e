"""Index build: questions/s (end to end: read, embed, store, FAISS file) and peak memory for
collections of 10k, 100k and 1M questions, each size in a fresh process; with ``--engines
in-process ray``, each size with both engines, and the ray engine's time over the in-process one
(a local Ray started by the run is part of its time; with ``$RAY_ADDRESS`` set, the run joins
that cluster instead).

    .venv/bin/python -m bench.index_build --model runs/dan-conversations-nli/model [--sizes 10000 100000]
    .venv/bin/python -m bench.index_build --model models/fast --sizes 100000 --engines in-process ray

Sizes above the 10,000 real questions repeat them with variations (bench.common.varied_questions).
A run with one engine writes the section "Index build" of docs/benchmarks.md, one with several
the section "Index build by engine".
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.common import markdown_table, peak_rss_mib, run_child, varied_questions, write_section
from indexer.build import IndexOptions, index_sources
from indexer.choices import Engine


def build_once(model: str, size: int, index_type: str, engine: Engine) -> dict[str, float]:
    """Index ``size`` questions into a new SQLite-backed index (run in a child process)."""
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        source = Path(scratch) / "questions.jsonl"
        with open(source, "w", encoding="utf-8") as handle:
            for number, text in enumerate(varied_questions(size)):
                handle.write(json.dumps({"id": number, "subject": text}) + "\n")
        started = time.perf_counter()
        report = index_sources(Path(scratch) / "index", [source], model,
                               options=IndexOptions(index_type=index_type, show_progress=False,
                                                    engine=engine))
        seconds = time.perf_counter() - started
        disk = sum(f.stat().st_size for f in (Path(scratch) / "index").rglob("*") if f.is_file())
    return {"size": size, "engine": engine.value, "seconds": seconds, "questions_per_s": size / seconds,
            "embed_seconds": report.embed_seconds, "peak_rss_mib": peak_rss_mib(),
            "index_dir_mib": disk / 2**20}


def _ray_cluster() -> str:
    address = os.environ.get("RAY_ADDRESS")
    return (f"joins the running cluster at {address}" if address
            else "starts a local Ray, and its time includes that start and the shutdown")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--index-type", default="flat")
    parser.add_argument("--engines", type=Engine, nargs="+", default=[Engine.in_process],
                        help=f"{', '.join(Engine)} (each size with each, in this order)")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(build_once(args.model, args.child, args.index_type, args.engines[0])))
        return
    results = []
    for size in args.sizes:
        for engine in args.engines:
            result = run_child("bench.index_build", ["--model", args.model, "--index-type", args.index_type,
                                                     "--engines", engine.value, "--child", str(size)],
                               f"indexing {size:,} with {engine.value}")
            result["ratio"] = result["seconds"] / next(
                (r["seconds"] for r in results if r["size"] == size), result["seconds"])
            print(result, flush=True)
            results.append(result)
    by_engine = len(args.engines) > 1
    columns = [("questions", lambda r: f"{r['size']:,}"), ("engine", lambda r: r["engine"]),
               ("wall s", lambda r: f"{r['seconds']:,.1f}"),
               (f"x {args.engines[0].value}", lambda r: f"{r['ratio']:.2f}"),
               ("questions/s", lambda r: f"{r['questions_per_s']:,.0f}"),
               ("of which embedding s", lambda r: f"{r['embed_seconds']:,.1f}"),
               ("peak RSS MiB", lambda r: f"{r['peak_rss_mib']:,.0f}"),
               ("index dir MiB", lambda r: f"{r['index_dir_mib']:,.0f}")]
    if not by_engine:
        columns = [column for column in columns if column[0] != "engine" and not column[0].startswith("x ")]
    body = (f"Model `{args.model}`, index type {args.index_type}, SQLite store, default batch and "
            "commit sizes; the source JSON Lines file is written before the clock starts"
            + (f"; the ray engine {_ray_cluster()}" if by_engine else "") + ".\n\n"
            + markdown_table([name for name, _ in columns],
                             [[cell(result) for _, cell in columns] for result in results]))
    command = f"python -m bench.index_build --model {args.model} --sizes {' '.join(map(str, args.sizes))}"
    if by_engine:
        command += f" --engines {' '.join(engine.value for engine in args.engines)}"
        write_section("index-engines", "Index build by engine", command, body)
    else:
        write_section("index-build", "Index build", command, body)


if __name__ == "__main__":
    main()
