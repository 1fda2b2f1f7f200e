"""What one write through `askalike serve` costs at 100,000 questions, with nothing else running:
its latency, the CPU seconds the server spends on it (its embedding, commit, files and the
opening of the new state; read from /proc, all the server's threads) and a search's latency just
after it (the first on the new state). With ``--workers 2``, also the CPU of the worker that did
not take the write: what opening the new state costs a process that only follows the commits.
And the workers' resident memory once the writes are done.

    python -m bench.write_cost [--questions 100000] [--writes 20] [--write-batch 100]
                               [--models models/fast] [--workers 1] [--section NAME --title TEXT]

The indexes are bench/serve.py's (built once under ~/.cache/askalike/bench-serve, each run on a
copy); the server under ``bench.harness.thread_env(1)``, as bench/serve.py runs it. The first
write is reported apart: it reads what later writes keep in memory (the added FAISS index, the
BM25 files). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import numpy as np

from bench.harness import load_average, markdown_table, real_questions, write_section
from bench.serve import (
    CACHE,
    KEY,
    QUERY_CHARS,
    batches,
    cached_index,
    collection_file,
    free_port,
    process,
    wait_until_up,
)

SECTION = "write-cost"
HEADER = ("model", "workers", "writes", "first write ms", "first write CPU s", "write ms (median)",
          "write CPU s (median)", "write CPU s (max)", "other worker's CPU s (median)",
          "search after a write ms (median)", "search after a write ms (max)", "workers' RSS MiB after",
          "load avg 1 min")


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of process ``pid`` so far, all its threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` now."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:", 1)[1].split()[0]) / 1024


def worker_pids(pid: int) -> list[int]:
    """The processes that answer for server ``pid``: its worker children (multiprocessing's
    spawned ones, not its resource tracker) where it runs several, else itself."""
    children = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    workers = [child for child in children
               if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes()]
    return workers or [pid]


def measure(model: str, source: Path, texts: list[str], queries: list[str], args: argparse.Namespace,
            work: Path) -> list[object]:
    served = work / f"{Path(model).name}-index"
    shutil.copytree(cached_index(model, source, args.questions, "hnsw"), served)
    (work / "keys").write_text(KEY + "\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    load = load_average()
    with ExitStack() as stack:
        log = work / "server.log"
        child = stack.enter_context(process(
            [sys.executable, "-m", "askalike.app", "serve", "--index", str(served), "--port", str(port),
             "--api-keys", str(work / "keys"), "--workers", str(args.workers)], log,
            {"ASKALIKE_API_KEYS": ""}))
        wait_until_up(f"{url}/ready", child, log)
        workers = worker_pids(child.pid)
        if len(workers) != args.workers:
            raise SystemExit(f"{len(workers)} worker processes, {args.workers} asked")
        client = stack.enter_context(httpx.Client(base_url=url, timeout=600,
                                                  headers={"Authorization": f"Bearer {KEY}"}))
        for query in queries[:20]:  # warm: the first searches load what searches keep
            client.get("/search", params={"q": query, "k": 10})
        latencies, cpu, after = [], [], []
        other: list[list[float]] = []  # per write, the other workers'
        for number, batch in enumerate(batches(texts, "w", args.write_batch)):
            before, started = [cpu_seconds(pid) for pid in workers], time.perf_counter()
            answer = client.post("/questions", json=batch)
            latencies.append((time.perf_counter() - started) * 1000)
            answer.raise_for_status()
            time.sleep(0.2)  # let what the write left behind finish before the CPU is read
            spent = sorted(cpu_seconds(pid) - was for pid, was in zip(workers, before, strict=True))
            cpu.append(spent[-1])  # the worker that took the write: the most
            other.append(spent[:-1])
            started = time.perf_counter()
            client.get("/search", params={"q": queries[number % len(queries)], "k": 10}).raise_for_status()
            after.append((time.perf_counter() - started) * 1000)
        count = client.get("/ready").json()["questions"]
        resident = sum(rss_mib(pid) for pid in workers)
    expected = args.questions + len(texts)
    if count != expected:
        raise SystemExit(f"{model}: {count} questions after the writes, {expected} expected")
    rest_ms, rest_cpu = np.array(latencies[1:]), np.array(cpu[1:])
    return [model, args.workers, len(latencies), f"{latencies[0]:.0f}", f"{cpu[0]:.2f}",
            f"{np.median(rest_ms):.0f}", f"{np.median(rest_cpu):.2f}", f"{rest_cpu.max():.2f}",
            f"{np.median(np.concatenate(other[1:])):.3f}" if args.workers > 1 else "-",
            f"{np.median(after):.1f}", f"{max(after):.1f}", f"{resident:.0f}",
            f"{load:.2f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--writes", type=int, default=20, help="write requests (batches), at least 2")
    parser.add_argument("--write-batch", type=int, default=100)
    parser.add_argument("--models", nargs="+", default=["models/fast"])
    parser.add_argument("--workers", type=int, default=1, help="the server's worker processes")
    parser.add_argument("--section", default=SECTION, help="the report's section in docs/benchmarks.md")
    parser.add_argument("--title", default="", help="what the section's title adds (e.g. which code ran)")
    parser.add_argument("--no-report", action="store_true", help="print the table, leave docs/benchmarks.md")
    args = parser.parse_args()
    if args.writes < 2:
        parser.error("--writes: at least 2 (the first is reported apart from the others)")
    texts = real_questions(args.questions + 500 + args.writes * args.write_batch)
    CACHE.mkdir(parents=True, exist_ok=True)
    source = collection_file(texts[:args.questions], CACHE / f"questions-{args.questions}.jsonl")
    queries = [text[:QUERY_CHARS] for text in texts[args.questions:args.questions + 500]]
    to_write = texts[args.questions + 500:]
    rows = []
    for model in args.models:
        with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
            rows.append(measure(model, source, to_write, queries, args, Path(scratch)))
    table = markdown_table(HEADER, rows)
    print(table)
    if args.no_report:
        return
    body = (f"{args.questions:,} real questions (hnsw), one `askalike serve` ({args.workers} worker(s), one "
            f"compute thread each), nothing else running: {args.writes} POSTs of {args.write_batch} new "
            "questions one after another, each followed by one search (k=10). \"CPU s\" is the "
            "user + system time of the worker that took the write over the write and the 0.2 s after "
            "it (\"other worker's\": the other workers', opening the new state); the first write is "
            "apart (it reads what the later writes keep in memory); \"RSS\": the workers' resident "
            "memory, summed, after the writes.\n\n" + table)
    write_section(args.section, f"Write cost (askalike serve, {args.questions:,} questions){args.title}",
                  f"python -m bench.write_cost --questions {args.questions} --writes {args.writes} "
                  f"--write-batch {args.write_batch} --models {' '.join(args.models)} "
                  f"--workers {args.workers}"
                  + (f" --section {args.section} --title {shlex.quote(args.title)}"
                     if args.section != SECTION or args.title else ""), body)


if __name__ == "__main__":
    main()
