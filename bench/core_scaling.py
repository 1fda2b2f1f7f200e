"""Index runs on more cores (issue 55): ``askalike index``'s embedding rate with 2 cores and with
every core of a larger machine, its defaults choosing threads and sessions by themselves.

Each core count runs in a fresh process confined to that many CPUs (``sched_setaffinity``, on
distinct physical cores while there are any: a core's second hardware thread comes last), as
``taskset`` would confine a user's run. The machine that has the cores may hold no data, so:

    python -m bench.core_scaling prepare DIR [--questions 8000]      # here: the questions
    python -m bench.core_scaling run DIR --out results.json [--cores 2 16]   # on the large machine
    python -m bench.core_scaling report results.json                 # here: docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.harness import (
    ROOT,
    alternated,
    load_average,
    machine,
    markdown_table,
    peak_rss_mib,
    real_questions,
    run_child,
    write_section,
)

QUESTIONS = "questions.jsonl.gz"


def prepare(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with gzip.open(directory / QUESTIONS, "wt", encoding="utf-8") as handle:
        handle.writelines(json.dumps({"id": f"q{number}", "subject": text}) + "\n"
                          for number, text in enumerate(real_questions(count)))
    print(f"{directory / QUESTIONS}: {count:,} questions")


def _siblings(cpu: int) -> list[int] | None:
    """The hardware threads of ``cpu``'s physical core (Linux's topology list, e.g. "0,8" or
    "0-1"), None where the system does not say."""
    try:
        listed = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
    except OSError:
        return None
    threads: list[int] = []
    for part in listed.strip().split(","):
        first, _, last = part.partition("-")
        threads += range(int(first), int(last or first) + 1)
    return threads


def spread_cpus(count: int) -> list[int]:
    """``count`` of this process's CPUs, one per physical core first, then the cores' other
    hardware threads."""
    allowed = sorted(os.sched_getaffinity(0))

    def place(cpu: int) -> tuple[int, int]:
        siblings = _siblings(cpu)
        return int(siblings is not None and cpu != siblings[0]), cpu  # first threads of each core first

    chosen = sorted(allowed, key=place)[:count]
    if len(chosen) < count:
        raise SystemExit(f"{count} cores asked, this process may run on {len(allowed)}")
    return sorted(chosen)


def child(source: Path, model: str) -> dict[str, Any]:
    """One index run of ``source`` into a new index with the command's defaults; then the same
    texts encoded by the model alone (a new encoder)."""
    from askalike.core.loader import load_encoder
    from askalike.indexer.build import IndexOptions, index_sources

    load = load_average()
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        report = index_sources(Path(scratch) / "index", [source], model,
                               options=IndexOptions(show_progress=False))
        whole = time.perf_counter() - started
    with open(source, encoding="utf-8") as handle:
        texts = [json.loads(line)["subject"] for line in handle]
    started = time.perf_counter()
    load_encoder(model).encode(texts)
    alone = len(texts) / (time.perf_counter() - started)
    return {"cpus": sorted(os.sched_getaffinity(0)), "load": load, "questions": report.total,
            "embedded_per_s": report.questions_per_s, "embed_seconds": report.embed_seconds,
            "whole_seconds": whole, "encoder_alone_per_s": alone, "peak_rss_mib": peak_rss_mib()}


def run(inputs: Path, model: str, cores: list[int], rounds: int, out: Path) -> None:
    """Every core count in its own process, ``rounds`` times in an order that reverses; the
    results written to ``out`` after each run."""
    import onnxruntime

    source = inputs / QUESTIONS
    if not source.exists():  # index_sources reads JSONL, not gzip: unpacked once
        raise SystemExit(f"{source}: not found (python -m bench.core_scaling prepare {inputs})")
    unpacked = inputs / "questions.jsonl"
    with gzip.open(source, "rb") as packed:
        unpacked.write_bytes(packed.read())
    results: dict[str, Any] = {"machine": machine(), "measured": datetime.now(UTC).isoformat(),
                               "model": model, "onnxruntime": onnxruntime.__version__,
                               "threads_per_core": len(_siblings(0) or [0]), "runs": []}
    for order in alternated(cores, rounds):
        for count in order:
            print(f"-- {count} cores", flush=True)
            everything = os.sched_getaffinity(0)
            os.sched_setaffinity(0, spread_cpus(count))  # the child's, from its first instruction
            try:
                figures = run_child("bench.core_scaling", ["child", str(unpacked), "--model", model],
                                    f"{count} cores") | {"cores": count}
            finally:
                os.sched_setaffinity(0, everything)
            print(json.dumps(figures), flush=True)
            results["runs"].append(figures)
            out.write_text(json.dumps(results, indent=1) + "\n")


def report(results_file: Path) -> None:
    results = json.loads(results_file.read_text())
    best: dict[int, dict[str, Any]] = {}
    loads: dict[int, list[str]] = {}
    for figures in results["runs"]:
        count = figures["cores"]
        loads.setdefault(count, []).append(f"{figures['load']:.2f}")
        if count not in best or figures["embedded_per_s"] > best[count]["embedded_per_s"]:
            best[count] = figures
    base = best[min(best)]
    rows = [[count, ", ".join(map(str, f["cpus"])), f"{f['embedded_per_s']:,.0f}",
             f"{f['embedded_per_s'] / base['embedded_per_s']:.1f}x", f"{f['encoder_alone_per_s']:,.0f}",
             f"{f['whole_seconds']:.1f}", f"{f['peak_rss_mib']:,.0f}", ", ".join(loads[count])]
            for count, f in sorted(best.items())]
    rounds = len(results["runs"]) // len(best)
    body = (f"`askalike index` of {base['questions']:,} real questions into a new index with "
            f"`{results['model']}` and the command's defaults (nothing about threads given), each run "
            f"in a fresh process started on its CPUs alone (`sched_setaffinity`, as `taskset -c` "
            f"would; one CPU per physical core first; the machine has "
            f"{results['threads_per_core']} hardware thread(s) a core); "
            f"ONNX Runtime {results['onnxruntime']}. {rounds} round(s), the core counts in an order "
            f"that reverses; each figure is the best of its rounds, the last column the 1-minute "
            f"load average when each run started. \"embedded a second\" is the run's own figure "
            f"(questions embedded and stored over the embedding stage's time); \"encoder alone\" the "
            f"same texts encoded again by a new encoder in the same process, session start-up "
            f"included.\n\n"
            + markdown_table(["cores", "CPUs", "index run: embedded a second", f"x {min(best)} cores",
                              "encoder alone a second", "whole run s", "peak RSS MiB", "load avg 1 min"],
                             rows))
    write_section("core-scaling", "Index runs on more cores (issue 55)",
                  "python -m bench.core_scaling prepare DIR; python -m bench.core_scaling run DIR "
                  "--out results.json (on the large machine); "
                  "python -m bench.core_scaling report results.json",
                  body, datetime.fromisoformat(results["measured"]), on=results["machine"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    made = commands.add_parser("prepare")
    made.add_argument("directory", type=Path)
    made.add_argument("--questions", type=int, default=8_000)
    ran = commands.add_parser("run")
    ran.add_argument("inputs", type=Path)
    ran.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "results.json")
    ran.add_argument("--model", default=str(ROOT / "models" / "accurate"))
    ran.add_argument("--cores", type=int, nargs="+", default=sorted({2, len(os.sched_getaffinity(0))}),
                     help="core counts to confine the runs to (default: 2 and all this process may use)")
    ran.add_argument("--rounds", type=int, default=1)
    one = commands.add_parser("child")
    one.add_argument("source", type=Path)
    one.add_argument("--model", required=True)
    reported = commands.add_parser("report")
    reported.add_argument("results", type=Path)
    args = parser.parse_args()
    if args.command == "prepare":
        prepare(args.directory, args.questions)
    elif args.command == "run":
        run(args.inputs, args.model, args.cores, args.rounds, args.out)
    elif args.command == "child":
        print(json.dumps(child(args.source, args.model)))
    else:
        report(args.results)


if __name__ == "__main__":
    main()
