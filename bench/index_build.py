"""Index build: questions/s (end to end: read, embed, store, FAISS file) and peak memory for
collections of 10k, 100k and 1M questions, each size in a fresh process.

    .venv/bin/python -m bench.index_build --model runs/dan-conversations-nli/model [--sizes 10000 100000]

Sizes above the 10,000 real questions repeat them with variations (bench.common.varied_questions).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import markdown_table, varied_questions, write_section
from indexer.build import IndexOptions, index_sources


def build_once(model: str, size: int, index_type: str) -> dict[str, float]:
    """Index ``size`` questions into a new SQLite-backed index (run in a child process)."""
    with tempfile.TemporaryDirectory(dir=Path.cwd()) as scratch:
        source = Path(scratch) / "questions.jsonl"
        with open(source, "w", encoding="utf-8") as handle:
            for number, text in enumerate(varied_questions(size)):
                handle.write(json.dumps({"id": number, "subject": text}) + "\n")
        started = time.perf_counter()
        report = index_sources(Path(scratch) / "index", [source], model,
                               options=IndexOptions(index_type=index_type, show_progress=False))
        seconds = time.perf_counter() - started
        peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        disk = sum(f.stat().st_size for f in (Path(scratch) / "index").rglob("*") if f.is_file())
    return {"size": size, "seconds": seconds, "questions_per_s": size / seconds,
            "embed_seconds": report.embed_seconds, "peak_rss_mib": peak_kib / 1024,
            "index_dir_mib": disk / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--index-type", default="flat")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(build_once(args.model, args.child, args.index_type)))
        return
    rows = []
    for size in args.sizes:
        child = subprocess.run([sys.executable, "-m", "bench.index_build", "--model", args.model,
                                "--index-type", args.index_type, "--child", str(size)],
                               capture_output=True, text=True, check=True)
        result = json.loads(child.stdout.strip().splitlines()[-1])
        print(result, flush=True)
        rows.append((f"{size:,}", f"{result['seconds']:,.1f}", f"{result['questions_per_s']:,.0f}",
                     f"{result['embed_seconds']:,.1f}", f"{result['peak_rss_mib']:,.0f}",
                     f"{result['index_dir_mib']:,.0f}"))
    body = (f"Model `{args.model}`, index type {args.index_type}, SQLite store, default batch and "
            "commit sizes; the source JSON Lines file is written before the clock starts.\n\n"
            + markdown_table(["questions", "wall s", "questions/s", "of which embedding s",
                              "peak RSS MiB", "index dir MiB"], rows))
    write_section("index-build", "Index build", f"python -m bench.index_build --model {args.model} "
                  f"--sizes {' '.join(map(str, args.sizes))}", body)


if __name__ == "__main__":
    main()
