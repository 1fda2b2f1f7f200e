"""Load on `askalike serve`: searches per second and p50/p95/p99 latency with N concurrent
clients, idle and while a writer adds questions through the API, for each model, and the same
load on txtai's API (all-MiniLM-L6-v2 over the same questions) as the peer.

    python -m bench.serve [--questions 100000] [--clients 1 8 32] [--seconds 20] [--writes 5000]
                          [--models models/fast models/accurate] [--peer-python PYTHON]

Each client sends one search at a time (GET /search, k=10, the model's default mode) and the next
as soon as the answer is in, for ``--seconds`` (idle), or for as long as the writer runs (at least
``--seconds``): the writer POSTs ``--writes`` new questions in batches of ``--write-batch``. A
request that fails (not 200) counts as an error. After the runs, the question count must be the
collection plus every question written: nothing lost, nothing doubled.

Indexes are built once and kept under ~/.cache/askalike/bench-serve (each run serves a copy, so
the writes never reach the cache). The queries are real questions not in the collection, cut to
their first 60 characters, as someone typing would send them. The peer runs in its own virtual
environment (``pip install 'txtai[api]'``; ``--peer-python`` names its interpreter; without it
the peer is left out and the report says so); bench/txtai_peer.py builds its index.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import numpy as np

from bench.common import ROOT, markdown_table, real_questions, write_section
from core.model_dir import PRETRAINED

CACHE = Path.home() / ".cache" / "askalike" / "bench-serve"
KEY = "bench-serve-key-0123456789abcdef"
QUERY_CHARS = 60
QUERIES = 500
K = 10
PEER_MODEL = "all-MiniLM-L6-v2"

Request = Callable[[str], str]  # query -> the path and query string of its search


@dataclass
class Level:
    """One load level's figures."""

    clients: int
    writing: bool
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    written: int = 0
    failed_writes: int = 0  # write requests not answered 200 (their questions not counted as written)

    def row(self, system: str) -> list[object]:
        p50, p95, p99 = np.percentile(self.latencies_ms, [50, 95, 99]) if self.latencies_ms else (0, 0, 0)
        return [system, self.clients, "writer adding" if self.writing else "idle",
                f"{len(self.latencies_ms) / self.seconds:.1f}", f"{p50:.1f}", f"{p95:.1f}", f"{p99:.1f}",
                self.errors, self.written if self.writing else "-",
                self.failed_writes if self.writing else "-"]


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_up(url: str, process: subprocess.Popen, log: Path, timeout_s: float = 1800) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the server at {url} stopped:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not answer in {timeout_s} s")
        time.sleep(0.5)


@contextmanager
def process(command: list[str], ready_url: str, log: Path, env: dict[str, str] | None = None
            ) -> Iterator[None]:
    """A server process, once ``ready_url`` answers 200; stopped afterwards."""
    with log.open("w") as output:
        child = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
                                 env={**os.environ, **(env or {})})
        try:
            wait_until_up(ready_url, child, log)
            yield
        finally:
            child.terminate()
            child.wait(30)


def collection_file(texts: list[str], path: Path) -> Path:
    if not path.exists():
        with path.open("w") as out:
            for number, text in enumerate(texts):
                out.write(json.dumps({"id": f"c{number}", "title": text}) + "\n")
    return path


def cached_index(model: str, source: Path, count: int, index_type: str) -> Path:
    """The index of ``source`` by ``model``, built once (``askalike index``)."""
    directory = CACHE / f"{Path(model).name}-{count}-{index_type}"
    if not (directory / "manifest.json").exists():
        print(f"building {directory} ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "app", "index", str(source), "--model", model,
                        "--index", str(directory), "--index-type", index_type], cwd=ROOT, check=True)
    return directory


def run_level(url: str, request: Request, queries: list[str], clients: int, seconds: float,
              writer: Callable[[], tuple[int, int]] | None) -> Level:
    """``clients`` searching for ``seconds`` (and, with ``writer``, until it has written). Each
    client keeps one connection (the standard library's: the load generator shares the cores
    with the server, and it costs a quarter of the CPU a request that httpx's does)."""
    level = Level(clients, writer is not None)
    lock, stop = threading.Lock(), threading.Event()
    address = urlsplit(url)

    def client(offset: int) -> None:
        connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
        number = offset
        while not stop.is_set():
            query = queries[number % len(queries)]
            number += clients
            started = time.perf_counter()
            try:
                connection.request("GET", request(query))
                answer = connection.getresponse()
                answer.read()
                ok = answer.status == 200
            except (OSError, http.client.HTTPException):
                ok = False
                connection.close()  # the next request opens a new connection
            elapsed = (time.perf_counter() - started) * 1000
            with lock:
                if ok:
                    level.latencies_ms.append(elapsed)
                else:
                    level.errors += 1
        connection.close()

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    try:  # the clients stop however the writer ends (a writer that raised once left them running)
        if writer is not None:
            level.written, level.failed_writes = writer()
        time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    level.seconds = time.perf_counter() - started
    return level


def batches(texts: list[str], prefix: str, size: int) -> Iterator[list[dict[str, str]]]:
    for start in range(0, len(texts), size):
        yield [{"id": f"{prefix}{start + i}", "title": text}
               for i, text in enumerate(texts[start:start + size])]


Writer = Callable[[], tuple[int, int]]  # () -> (questions written, write requests that failed)


def askalike_writer(url: str, texts: list[str], prefix: str, size: int) -> Writer:
    def write() -> tuple[int, int]:
        written = failed = 0
        with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {KEY}"}) as http:
            for batch in batches(texts, prefix, size):
                answer = http.post("/questions", json=batch)
                if answer.status_code == 200:
                    written += answer.json()["added"]
                else:
                    failed += 1
                    print(f"a write failed: {answer.status_code} {answer.text[:200]}", file=sys.stderr)
        return written, failed
    return write


def txtai_writer(url: str, texts: list[str], prefix: str, size: int) -> Writer:
    def write() -> tuple[int, int]:
        written = failed = 0
        with httpx.Client(base_url=url, timeout=600) as http:
            for batch in batches(texts, prefix, size):
                documents = [{"id": item["id"], "text": item["title"]} for item in batch]
                answers = [http.post("/add", json=documents), http.get("/upsert")]
                if all(answer.status_code == 200 for answer in answers):
                    written += len(batch)
                else:
                    failed += 1
                    print(f"a peer write failed: {[a.status_code for a in answers]}", file=sys.stderr)
        return written, failed
    return write


def measure(system: str, url: str, request: Request, queries: list[str], args: argparse.Namespace,
            texts_to_write: list[str], writer: Callable[[str, list[str], str, int], Writer]) -> list[Level]:
    levels = []
    for clients in args.clients:
        levels.append(run_level(url, request, queries, clients, args.seconds, None))
        print(markdown_table(["system"], [levels[-1].row(system)]), file=sys.stderr)
        texts = texts_to_write[:args.writes]
        texts_to_write = texts_to_write[args.writes:]
        levels.append(run_level(url, request, queries, clients, args.seconds,
                                writer(url, texts, f"w{clients}-", args.write_batch)))
        print(markdown_table(["system"], [levels[-1].row(system)]), file=sys.stderr)
    return levels


def askalike_levels(model: str, source: Path, args: argparse.Namespace, queries: list[str],
                    to_write: list[str], work: Path) -> tuple[list[Level], str]:
    cached = cached_index(model, source, args.questions, args.index_type)
    served = work / f"{Path(model).name}-index"
    shutil.copytree(cached, served)
    keys = work / "keys"
    keys.write_text(KEY + "\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "app", "serve", "--index", str(served), "--port", str(port),
               "--api-keys", str(keys), "--workers", str(args.workers)]
    with process(command, f"{url}/ready", work / f"{Path(model).name}.log", {"ASKALIKE_API_KEYS": ""}):
        levels = measure(f"askalike {model}", url,
                         lambda q: "/search?" + urlencode({"q": q, "k": K}),
                         queries, args, to_write, askalike_writer)
        count = httpx.get(f"{url}/ready").json()["questions"]
    expected = args.questions + args.writes * len(args.clients)
    check = f"{count:,} questions after the runs, {expected:,} expected"
    if count != expected or any(level.failed_writes for level in levels):
        raise SystemExit(f"askalike {model}: {check}; failed writes: "
                         f"{sum(level.failed_writes for level in levels)}")
    return levels, check


def peer_levels(python: str, texts: list[str], args: argparse.Namespace, queries: list[str],
                to_write: list[str], work: Path) -> tuple[list[Level], str]:
    model = str(PRETRAINED[PEER_MODEL]())
    cached = CACHE / f"txtai-{args.questions}"
    texts_file = work / "peer-texts.json"
    texts_file.write_text(json.dumps(texts))
    if not cached.exists():
        print(f"building {cached} ...", file=sys.stderr)
        subprocess.run([python, str(ROOT / "bench" / "txtai_peer.py"), model, str(texts_file), str(cached)],
                       check=True)
    served = work / "txtai-index"
    shutil.copytree(cached, served)
    config = work / "txtai.yml"
    config.write_text(f"path: {served}\nwritable: true\nembeddings:\n  path: {model}\n  content: true\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [python, "-m", "uvicorn", "txtai.api:app", "--port", str(port), "--workers",
               str(args.peer_workers), "--log-level", "warning"]
    with process(command, f"{url}/count", work / "txtai.log", {"CONFIG": str(config)}):
        levels = measure(f"txtai {PEER_MODEL}", url,
                         lambda q: "/search?" + urlencode({"query": q, "limit": K}),
                         queries, args, to_write, txtai_writer)
        count = int(httpx.get(f"{url}/count").json())
    expected = args.questions + sum(level.written for level in levels)
    check = (f"{count:,} texts after the runs, {expected:,} expected (the collection and every write "
             f"answered 200){'' if count == expected else ': MISMATCH'}")
    return levels, check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--writes", type=int, default=5000, help="questions the writer adds per level")
    parser.add_argument("--write-batch", type=int, default=100)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="askalike's server processes; default one a core")
    parser.add_argument("--peer-workers", type=int, default=1,
                        help="txtai's: each of its processes loads its own copy of the index, and a write "
                             "reaches only the one that takes it (at 2 workers its writes "
                             "failed with 500 here)")
    parser.add_argument("--index-type", default="hnsw")
    parser.add_argument("--models", nargs="+", default=["models/fast", "models/accurate"])
    parser.add_argument("--peer-python", help="the interpreter of a virtual environment with txtai[api]")
    parser.add_argument("--no-report", action="store_true", help="print the table, leave docs/benchmarks.md")
    args = parser.parse_args()

    CACHE.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    needed = args.questions + QUERIES + args.writes * len(args.clients)
    texts = real_questions(needed)
    collection, queries = texts[:args.questions], [t[:QUERY_CHARS] for t in texts[args.questions:][:QUERIES]]
    to_write = texts[args.questions + QUERIES:]
    source = collection_file(collection, CACHE / f"questions-{args.questions}.jsonl")
    rows, checks = [], []
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        for model in args.models:
            levels, check = askalike_levels(model, source, args, queries, to_write, Path(work))
            rows += [level.row(f"askalike {model}") for level in levels]
            checks.append(f"askalike {model}: {check}")
        if args.peer_python:
            levels, check = peer_levels(args.peer_python, collection, args, queries, to_write, Path(work))
            rows += [level.row(f"txtai {PEER_MODEL}") for level in levels]
            checks.append(f"txtai: {check}")
    table = markdown_table(["system", "clients", "load", "searches/s", "p50 ms", "p95 ms", "p99 ms",
                            "errors", "written", "failed writes"], rows)
    print(table)
    if args.no_report:
        return
    command = (f"python -m bench.serve --questions {args.questions} "
               f"--clients {' '.join(map(str, args.clients))} "
               f"--seconds {args.seconds:g} --writes {args.writes} --write-batch {args.write_batch} "
               f"--models {' '.join(args.models)}"
               f" --workers {args.workers}"
               + (f" --peer-python ~/.cache/askalike/txtai-venv/bin/python --peer-workers {args.peer_workers}"
                  if args.peer_python else ""))
    peer = "" if args.peer_python else "\n\nThe txtai peer was not run (no `--peer-python`)."
    workers = f"{args.workers} askalike worker process(es)" + (
        f", {args.peer_workers} txtai worker(s)" if args.peer_python else "")
    body = (f"{args.questions:,} real questions ({args.index_type} indexes), k={K}, queries cut to "
            f"{QUERY_CHARS} characters; {workers}. Each client sends one search "
            f"at a time; \"writer adding\" runs while a client POSTs {args.writes:,} new questions in "
            f"batches of {args.write_batch} (and at least {args.seconds:g} s). Latency is what the client "
            f"measured, load generator and server sharing the machine, whose 1-minute load average "
            f"was {load_before[0]:.1f} before the run started (other programs' demand on its "
            f"{os.cpu_count()} cores).\n\n{table}\n\nCounts checked "
            f"after the runs: {'; '.join(checks)}.{peer}")
    write_section(f"serve-{args.questions}",
                  f"Serving: searches under load (askalike serve, {args.questions:,} questions)",
                  command, body)


if __name__ == "__main__":
    main()
