"""Load on `askalike serve` beside txtai's API as the peer: searches per second and p50/p95/p99
latency with N concurrent clients, idle and while a writer adds questions through the API.

    python -m bench.serve [--questions 100000] [--clients 1 8 32] [--seconds 20] [--writes 5000]
                          [--models models/fast models/accurate] [--workers 2 1]
                          [--modes hybrid dense] [--peer-python PYTHON] [--peer-modes dense hybrid]

What is the same for every system (issue 55):

- threads: every server process runs under ``bench.harness.thread_env(1)`` (one compute thread a
  worker: OpenMP, MKL, OpenBLAS, and so torch; tokenizers' pool off), the setting
  ``askalike serve`` pins its own workers to;
- workers: each system at each count of ``--workers`` (default: one a core, and 1), except
  txtai's writes: each of its processes holds its own copy of the index, and a write reaches only
  the one that takes it. Before the runs, a probe checks them on a throwaway txtai server of each
  worker count above 1 as the runs write (``PROBE_ROUNDS`` batches of ``--write-batch`` texts,
  add then upsert each), then asks its count ``PROBE_COUNTS`` times on new connections (which
  reach different workers); where a write fails or a count misses a write, txtai's writer levels
  at that count are left out and the report says so (they then run at 1 worker only), and its
  idle levels run on servers that never saw a write;
- index type: askalike's ``--index-type`` (HNSW by default) and txtai's faiss backend built
  with the same FAISS structure (``IDMap,HNSW32``; bench/txtai_peer.py);
- mode: askalike in each of ``--modes`` (``mode=`` in the query string), txtai in each of
  ``--peer-modes`` (dense: its plain index; hybrid: an index with its BM25 beside it);
- order and load: all servers are up at once, each on its own copy of its index; at each level
  (clients, idle or writing) the systems run one after another, in an order that reverses from
  one level to the next (``bench.harness.alternated``), and each row carries the 1-minute load
  average when it started.

Each client sends one search at a time (GET /search, k=10) and the next as soon as the answer is
in, for ``--seconds`` (idle), or for as long as the writer runs (at least ``--seconds``): the
writer POSTs ``--writes`` new questions in batches of ``--write-batch``. A request that fails
(not 200) counts as an error. After the runs, each server's question count must be its
collection plus every question written to it: nothing lost, nothing doubled.

Indexes are built once and kept under ~/.cache/askalike/bench-serve (each server serves a copy,
so the writes never reach the cache). The queries are real questions not in the collection, cut
to their first 60 characters, as someone typing would send them. The peer runs in its own
virtual environment (``pip install 'txtai[api]'``; ``--peer-python`` names its interpreter;
without it the peer is left out and the report says so).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlsplit

import httpx
import numpy as np

from askalike.core.model_dir import PRETRAINED
from askalike.indexer.index_types import Hnsw
from bench.harness import (
    ROOT,
    alternated,
    describe_threads,
    load_average,
    markdown_table,
    real_questions,
    thread_env,
    write_section,
)

CACHE = Path.home() / ".cache" / "askalike" / "bench-serve"
KEY = "bench-serve-key-0123456789abcdef"
QUERY_CHARS = 60
QUERIES = 500
K = 10
PEER_MODEL = "all-MiniLM-L6-v2"
PEER_SCRIPT = ROOT / "bench" / "txtai_peer.py"
SERVER_THREADS = 1  # compute threads a server process: what `askalike serve` pins its workers to
COUNT_WAIT_S = 10.0
PROBE_ROUNDS = 10  # add + upsert rounds (of --write-batch texts) checking a multi-worker txtai server
PROBE_COUNTS = 20  # counts asked afterwards, each on a new connection: every worker must see the writes
# the FAISS structure of txtai's faiss backend for each of askalike's index types (txtai adds
# with ids, hence the IDMap); None: txtai cannot build the same one here
PEER_COMPONENTS: dict[str, str | None] = {"flat": "IDMap,Flat", "hnsw": f"IDMap,HNSW{Hnsw.LINKS}",
                                          "ivf": None, "ivfpq": None}

Request = Callable[[str], str]  # query -> the path and query string of its search


@dataclass
class Writes:
    """What a writer did: questions written, requests that failed, each request's time."""

    written: int = 0
    failed: int = 0
    times_ms: list[float] = field(default_factory=list)


Writer = Callable[[list[str], str], Writes]  # (texts, id prefix) -> what it did


@dataclass
class Level:
    """One system's figures at one load level."""

    clients: int
    writing: bool
    load_average: float
    latencies_ms: list[float] = field(default_factory=list)
    errors: int = 0
    seconds: float = 0.0
    written: int = 0
    failed_writes: int = 0  # write requests not answered 200 (their questions not counted as written)
    write_ms: list[float] = field(default_factory=list)  # each write request's time

    @property
    def searches_per_s(self) -> float:
        return len(self.latencies_ms) / self.seconds if self.seconds else 0.0

    def percentiles(self) -> tuple[float, float, float]:
        if not self.latencies_ms:
            return 0.0, 0.0, 0.0
        p50, p95, p99 = np.percentile(self.latencies_ms, [50, 95, 99])
        return float(p50), float(p95), float(p99)


@dataclass
class Server:
    """One server process: a system at a worker count, on its own copy of its index."""

    system: str  # "askalike models/accurate", "txtai all-MiniLM-L6-v2"
    workers: int
    url: str
    collection: int
    writer: Writer
    count: Callable[[], int]
    trivial: str = "/health"  # a request that does no work: its time is the server's and HTTP's floor
    index: str = ""  # what its index holds beyond the dense vectors, if it says so ("hybrid index")
    keepalive_ms: float = 0.0  # the median time of ``trivial`` on a kept-alive connection
    writes_ok: bool = True
    note: str = ""
    written: int = 0
    failed_writes: int = 0
    batches_used: int = 0  # writer levels run so far (each writes texts of its own)

    def record(self, written: int, failed: int) -> None:
        self.written += written
        self.failed_writes += failed

    def check(self) -> str:
        """The count served after the runs against the collection and every write; asked again
        for up to ``COUNT_WAIT_S`` (a worker opens a write made through another one when its
        follower next looks, and the connection may reach either)."""
        expected, deadline = self.collection + self.written, time.monotonic() + COUNT_WAIT_S
        while (count := self.count()) != expected and time.monotonic() < deadline:
            time.sleep(0.2)
        index = f" ({self.index})" if self.index else ""
        return (f"{self.system}{index}, {self.workers} worker(s): {count:,} after the runs, {expected:,} "
                f"expected (the collection and every write answered 200)"
                + ("" if count == expected else ": **MISMATCH**")
                + (f"; {self.failed_writes} write request(s) failed" if self.failed_writes else ""))


@dataclass
class Target:
    """What a row measures: one server searched in one mode."""

    server: Server
    mode: str
    request: Request
    levels: list[Level] = field(default_factory=list)

    def rows(self) -> list[list[object]]:
        rows = []
        for level in self.levels:
            p50, p95, p99 = level.percentiles()
            rows.append([self.server.system, self.mode, self.server.workers, level.clients,
                         "adding" if level.writing else "idle", f"{level.searches_per_s:.1f}",
                         f"{p50:.1f}", f"{p95:.1f}", f"{p99:.1f}", level.errors,
                         level.written if level.writing else "-",
                         level.failed_writes if level.writing else "-",
                         f"{np.median(level.write_ms):.0f}" if level.write_ms else "-",
                         f"{level.load_average:.2f}"])
        return rows


HEADER = ["system", "mode", "workers", "clients", "writer", "searches/s", "p50 ms", "p95 ms", "p99 ms",
          "errors", "written", "failed writes", "write ms (median)", "load avg 1 min"]


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
def process(command: list[str], log: Path, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """A server process under the shared thread settings (and ``env``); stopped afterwards."""
    with log.open("w") as output:
        child = subprocess.Popen(command, cwd=ROOT, stdout=output, stderr=subprocess.STDOUT,
                                 env={**os.environ, **thread_env(SERVER_THREADS), **env})
        try:
            yield child
        finally:
            child.terminate()
            child.wait(60)


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
        subprocess.run([sys.executable, "-m", "askalike.app", "index", str(source), "--model", model,
                        "--index", str(directory), "--index-type", index_type], cwd=ROOT, check=True)
    return directory


def cached_peer_index(python: str, texts: list[str], index_type: str, mode: str, work: Path) -> Path:
    """txtai's index of ``texts`` (the same FAISS structure as askalike's ``index_type``; with
    its BM25 index for ``mode`` hybrid), built once by bench/txtai_peer.py."""
    components = PEER_COMPONENTS[index_type]
    if components is None:
        raise SystemExit(f"txtai's faiss backend builds no {index_type} index like askalike's here: "
                         "run the peer with --index-type flat or hnsw")
    directory = CACHE / f"txtai-{len(texts)}-{index_type}-{mode}"
    if not (directory / "config.json").exists():
        print(f"building {directory} ...", file=sys.stderr)
        texts_file = work / "peer-texts.json"
        texts_file.write_text(json.dumps(texts))
        subprocess.run([python, str(PEER_SCRIPT), "build", str(PRETRAINED[PEER_MODEL]()), str(texts_file),
                        str(directory), "--components", components, "--content"]
                       + (["--hybrid"] if mode == "hybrid" else []),
                       check=True, stdout=sys.stderr, env={**os.environ, **thread_env(os.cpu_count() or 1)})
    return directory


def run_level(url: str, request: Request, queries: list[str], clients: int, seconds: float,
              write: Callable[[], Writes] | None) -> Level:
    """``clients`` searching for ``seconds`` (and, with ``write``, until it has written). Each
    client keeps one connection (the standard library's: the load generator shares the cores
    with the server, and it costs a quarter of the CPU a request that httpx's does)."""
    level = Level(clients, write is not None, load_average())
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
        if write is not None:
            writes = write()
            level.written, level.failed_writes, level.write_ms = (writes.written, writes.failed,
                                                                  writes.times_ms)
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


def askalike_writer(url: str, size: int) -> Writer:
    def write(texts: list[str], prefix: str) -> Writes:
        writes = Writes()
        with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {KEY}"}) as http:
            for batch in batches(texts, prefix, size):
                started = time.perf_counter()
                try:
                    answer = http.post("/questions", json=batch)
                except httpx.TransportError as err:  # a worker that died: a failed write, not a crash
                    writes.failed += 1
                    print(f"a write failed: {err!r}", file=sys.stderr)
                    continue
                finally:
                    writes.times_ms.append((time.perf_counter() - started) * 1000)
                if answer.status_code == 200:
                    writes.written += answer.json()["added"]
                else:
                    writes.failed += 1
                    print(f"a write failed: {answer.status_code} {answer.text[:200]}", file=sys.stderr)
        return writes
    return write


def txtai_writer(url: str, size: int) -> Writer:
    def write(texts: list[str], prefix: str) -> Writes:
        writes = Writes()
        with httpx.Client(base_url=url, timeout=600) as http:
            for batch in batches(texts, prefix, size):
                documents = [{"id": item["id"], "text": item["title"]} for item in batch]
                statuses: list[object]
                started = time.perf_counter()
                try:
                    statuses = [http.post("/add", json=documents).status_code,
                                http.get("/upsert").status_code]
                except httpx.TransportError as err:  # a worker that died: a failed write, not a crash
                    statuses = [repr(err)]
                writes.times_ms.append((time.perf_counter() - started) * 1000)
                if statuses == [200, 200]:
                    writes.written += len(batch)
                else:
                    writes.failed += 1
                    print(f"a peer write failed: {statuses}", file=sys.stderr)
        return writes
    return write


def keepalive_ms(url: str, path: str, requests: int = 20) -> float:
    """The median time of ``path`` on one kept-alive connection, the first request left out: the
    floor of every search a client on a kept-alive connection sends. uvicorn's ``--workers N`` (N
    > 1) serves on a socket without TCP_NODELAY (Kludex/uvicorn#3149), and a response then waits
    for the client's delayed ACK, about 40 ms on Linux; ``askalike serve`` sets it on each
    connection itself (``app/server/protocol.py``), a peer on uvicorn may not."""
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=60)
    times = []
    for _ in range(requests + 1):
        started = time.perf_counter()
        connection.request("GET", path)
        connection.getresponse().read()
        times.append((time.perf_counter() - started) * 1000)
    connection.close()
    return float(np.median(times[1:]))


def probe_writes(python: str, index: Path, workers: int, texts: list[str], args: argparse.Namespace,
                 work: Path) -> str:
    """Whether txtai's writes work at ``workers``: a throwaway server on its own copy of ``index``
    (the measured ones never see a write) takes ``PROBE_ROUNDS`` batches as the runs write them,
    then is asked its count ``PROBE_COUNTS`` times, each on a new connection. '' if every write
    answered 200 and every count holds every write, else what went wrong."""
    with ExitStack() as stack:
        probe = Plan()
        start_peer(stack, python, index, workers, "probe", args, work, probe)()
        server = probe.servers[0]
        size = args.write_batch
        for number in range(PROBE_ROUNDS):
            probed = server.writer(texts[number * size:(number + 1) * size], f"probe{number}-")
            server.record(probed.written, probed.failed)
        expected = server.collection + server.written
        short = sum(server.count() != expected for _ in range(PROBE_COUNTS))
    problems = [f"{server.failed_writes} of {PROBE_ROUNDS} writes failed"] if server.failed_writes else []
    problems += [f"{short} of {PROBE_COUNTS} counts missed writes that answered 200"] if short else []
    return (f"in a probe before the runs ({PROBE_ROUNDS} writes of {size} texts, add + upsert, to a "
            f"txtai server of {workers} workers), {' and '.join(problems)}" if problems else "")


@dataclass
class Plan:
    """The servers of a run, their search targets and the texts each writer level adds."""

    targets: list[Target] = field(default_factory=list)
    servers: list[Server] = field(default_factory=list)


def start_askalike(stack: ExitStack, model: str, source: Path, workers: int, modes: list[str],
                   args: argparse.Namespace, work: Path, plan: Plan) -> Callable[[], None]:
    """Start askalike's server for ``model`` at ``workers``; returns what waits until it is up."""
    cached = cached_index(model, source, args.questions, args.index_type)
    name = f"{Path(model).name}-{workers}"
    served = work / f"{name}-index"
    shutil.copytree(cached, served)
    keys = work / "keys"
    keys.write_text(KEY + "\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "askalike.app", "serve", "--index", str(served), "--port", str(port),
               "--api-keys", str(keys), "--workers", str(workers)]
    log = work / f"{name}.log"
    child = stack.enter_context(process(command, log, {"ASKALIKE_API_KEYS": ""}))
    server = Server(f"askalike {model}", workers, url, args.questions, askalike_writer(url, args.write_batch),
                    lambda: httpx.get(f"{url}/ready").json()["questions"])
    plan.servers.append(server)
    for mode in modes:
        plan.targets.append(Target(server, mode, lambda q, mode=mode: "/search?" + urlencode(
            {"q": q, "k": K, "mode": mode})))
    return lambda: wait_until_up(f"{url}/ready", child, log)


def start_peer(stack: ExitStack, python: str, index: Path, workers: int, mode: str,
               args: argparse.Namespace, work: Path, plan: Plan) -> Callable[[], None]:
    """Start txtai's API over a copy of ``index`` at ``workers``; returns what waits until it is up."""
    name = f"txtai-{mode}-{workers}"
    served = work / f"{name}-index"
    shutil.copytree(index, served)
    config = work / f"{name}.yml"
    config.write_text(f"path: {served}\nwritable: true\nembeddings:\n  path: {PRETRAINED[PEER_MODEL]()}\n"
                      "  content: true\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [python, "-m", "uvicorn", "txtai.api:app", "--port", str(port), "--workers", str(workers),
               "--log-level", "warning"]
    log = work / f"{name}.log"
    child = stack.enter_context(process(command, log, {"CONFIG": str(config)}))
    server = Server(f"txtai {PEER_MODEL}", workers, url, args.questions, txtai_writer(url, args.write_batch),
                    lambda: int(httpx.get(f"{url}/count").json()), trivial="/count", index=f"{mode} index")
    plan.servers.append(server)
    plan.targets.append(Target(server, mode, lambda q: "/search?" + urlencode({"query": q, "limit": K})))
    return lambda: wait_until_up(f"{url}/count", child, log)


def run_all(plan: Plan, queries: list[str], to_write: list[str], args: argparse.Namespace) -> None:
    """Every level, the targets in an order that reverses from one level to the next."""
    levels = [(clients, writing) for clients in args.clients for writing in (False, True)]
    for (clients, writing), order in zip(levels, alternated(plan.targets, len(levels)), strict=True):
        for target in order:
            server = target.server
            if writing and not server.writes_ok:
                continue
            write = None
            if writing:
                start = server.batches_used * args.writes
                texts = to_write[start:start + args.writes]
                server.batches_used += 1
                prefix = f"w{server.batches_used}-"

                def write(texts: list[str] = texts, prefix: str = prefix, server: Server = server
                          ) -> Writes:
                    writes = server.writer(texts, prefix)
                    server.record(writes.written, writes.failed)
                    return writes
            target.levels.append(run_level(server.url, target.request, queries, clients, args.seconds, write))
            print(markdown_table(HEADER, target.rows()[-1:]), file=sys.stderr, flush=True)


def is_peer(target: Target) -> bool:
    return target.server.system.startswith("txtai")


def ratios(plan: Plan) -> str:
    """askalike over txtai at the same workers, mode, clients and writer: searches/s and p99."""
    peers = {(t.server.workers, t.mode, level.clients, level.writing): level
             for t in plan.targets if is_peer(t) for level in t.levels}
    rows = []
    for target in plan.targets:
        for level in [] if is_peer(target) else target.levels:
            peer = peers.get((target.server.workers, target.mode, level.clients, level.writing))
            if peer is None or not peer.searches_per_s:
                continue
            rows.append([target.server.system.removeprefix("askalike "), target.mode, target.server.workers,
                         level.clients, "adding" if level.writing else "idle",
                         f"{level.searches_per_s:.1f}", f"{peer.searches_per_s:.1f}",
                         f"{level.searches_per_s / peer.searches_per_s:.2f}x",
                         f"{level.percentiles()[2]:.1f}", f"{peer.percentiles()[2]:.1f}"])
    header = ["askalike model", "mode", "workers", "clients", "writer", "askalike searches/s",
              "txtai searches/s", "ratio", "askalike p99 ms", "txtai p99 ms"]
    return markdown_table(header, rows) if rows else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=100_000)
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--writes", type=int, default=5000, help="questions a writer level adds")
    parser.add_argument("--write-batch", type=int, default=100)
    parser.add_argument("--workers", type=int, nargs="+",
                        default=sorted({os.cpu_count() or 1, 1}, reverse=True),
                        help="server processes; every system at each count (default: one a core, and 1)")
    parser.add_argument("--modes", nargs="+", default=["hybrid", "dense"],
                        choices=["hybrid", "dense", "lexical"], help="askalike's search modes")
    parser.add_argument("--index-type", default="hnsw")
    parser.add_argument("--models", nargs="+", default=["models/fast", "models/accurate"])
    parser.add_argument("--peer-python", help="the interpreter of a virtual environment with txtai[api]")
    parser.add_argument("--peer-modes", nargs="+", default=["dense", "hybrid"], choices=["dense", "hybrid"],
                        help="txtai's: dense, and hybrid (its BM25 index beside the dense one)")
    parser.add_argument("--no-report", action="store_true", help="print the table, leave docs/benchmarks.md")
    parser.add_argument("--section", help="the report's section in docs/benchmarks.md (default: "
                                          "serve-QUESTIONS; another name keeps that one)")
    parser.add_argument("--title", default="", help="what the section's title adds (e.g. which code ran)")
    args = parser.parse_args()

    CACHE.mkdir(parents=True, exist_ok=True)
    load_before = load_average()
    writer_levels = len(args.clients) * max(len(args.modes), 1)
    needed = args.questions + QUERIES + max(PROBE_ROUNDS * args.write_batch, args.writes * writer_levels)
    texts = real_questions(needed)
    collection, queries = texts[:args.questions], [t[:QUERY_CHARS] for t in texts[args.questions:][:QUERIES]]
    to_write = texts[args.questions + QUERIES:]
    source = collection_file(collection, CACHE / f"questions-{args.questions}.jsonl")
    plan = Plan()
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch, ExitStack() as stack:
        work = Path(scratch)
        peer_indexes = ({mode: cached_peer_index(args.peer_python, collection, args.index_type, mode, work)
                         for mode in args.peer_modes} if args.peer_python else {})
        failures = {workers: probe_writes(args.peer_python, next(iter(peer_indexes.values())), workers,
                                          to_write, args, work)
                    for workers in args.workers if peer_indexes and workers > 1}
        waits = [start_askalike(stack, model, source, workers, args.modes, args, work, plan)
                 for model in args.models for workers in args.workers]
        waits += [start_peer(stack, args.peer_python, index, workers, mode, args, work, plan)
                  for mode, index in peer_indexes.items() for workers in args.workers]
        for wait in waits:
            wait()
        for server in plan.servers:
            server.keepalive_ms = keepalive_ms(server.url, server.trivial)
        # the systems to compare next to each other: by workers, then mode, askalike before txtai
        plan.targets.sort(key=lambda t: (-t.server.workers, t.mode != "hybrid", t.mode, is_peer(t)))
        for server in plan.servers:
            if failures.get(server.workers) and server.system.startswith("txtai"):
                server.writes_ok = False
                server.note = (f"{failures[server.workers]}, so txtai's writer levels at "
                               f"{server.workers} workers are left out")
        run_all(plan, queries, to_write, args)
        checks = [server.check() for server in plan.servers]
    rows = [row for target in plan.targets for row in target.rows()]
    table = markdown_table(HEADER, rows)
    print(table)
    print("\n".join(checks))
    if args.no_report:
        return
    write_section(args.section or f"serve-{args.questions}",
                  f"Serving: searches under load (askalike serve, {args.questions:,} questions){args.title}",
                  command_line(args), report_body(args, plan, table, checks, load_before))


def command_line(args: argparse.Namespace) -> str:
    section = f" --section {args.section} --title {shlex.quote(args.title)}" if args.section else ""
    return (f"python -m bench.serve --questions {args.questions}{section} "
            f"--clients {' '.join(map(str, args.clients))} "
            f"--seconds {args.seconds:g} --writes {args.writes} --write-batch {args.write_batch} "
            f"--models {' '.join(args.models)} --workers {' '.join(map(str, args.workers))} "
            f"--modes {' '.join(args.modes)} --index-type {args.index_type}"
            + (" --peer-python ~/.cache/askalike/txtai-venv/bin/python "
               f"--peer-modes {' '.join(args.peer_modes)}" if args.peer_python else ""))


def report_body(args: argparse.Namespace, plan: Plan, table: str, checks: list[str], load_before: float
                ) -> str:
    notes = list(dict.fromkeys(server.note for server in plan.servers if server.note))
    peer = (f"The peer: txtai's API (`uvicorn txtai.api:app`) over {PEER_MODEL} in torch through "
            f"sentence-transformers, its faiss backend built as `{PEER_COMPONENTS.get(args.index_type)}`, "
            "the texts stored (`content: true`); hybrid is its `hybrid: true` (BM25 beside the dense "
            "index, fused at its default weights, 0.5 each)."
            if args.peer_python else "The txtai peer was not run (no `--peer-python`).")
    differs = ("What is not the same: the encoders (askalike runs its own models, "
               "`models/accurate` a fine-tuned all-MiniLM-L6-v2 in ONNX Runtime with int8 weights, "
               "`models/fast` a DAN in numpy; txtai runs all-MiniLM-L6-v2 in fp32 torch); HNSW's "
               "search depth (askalike's efSearch is the one its build recorded, 128 up to 500,000 "
               "questions; txtai has no setting for it, so FAISS's default, 16, applies: fewer "
               "candidates a search); the hybrid fusion (each system's own); the writes (askalike: "
               "one authenticated POST a batch; txtai: POST /add then GET /upsert, no key); how "
               "several workers take connections (askalike's parent process hands each to the "
               "worker holding the fewest open, on Linux; txtai's uvicorn workers accept whatever "
               "waits when they are idle)"
               + (f"; and txtai's writes at more than one worker: {'; '.join(notes)}" if notes else "")
               + "." if args.peer_python else "")
    compared = ratios(plan)
    return (f"{args.questions:,} real questions ({args.index_type} indexes), k={K}, queries cut to "
            f"{QUERY_CHARS} characters. Every server process runs under {describe_threads(SERVER_THREADS)} "
            "(askalike's ONNX Runtime sessions at 1 thread too); each system at "
            f"{', '.join(map(str, args.workers))} worker process(es); askalike in mode "
            f"{', '.join(args.modes)} (`mode=` of GET /search). "
            f"{peer} All servers were up at once, each on its own copy of its index; at each level the "
            "systems ran one after another, in an order that reversed from one level to the next "
            "(those compared side by side next to each other: by workers, then mode). "
            f"Each client sends one search at a time; writer \"adding\" runs while a client POSTs "
            f"{args.writes:,} new questions in batches of {args.write_batch} (and at least "
            f"{args.seconds:g} s), idle runs {args.seconds:g} s; \"write ms\" is the median time of "
            "one of its requests. Latency is what the client measured, "
            f"load generator and servers sharing the machine's {os.cpu_count()} cores; \"load avg 1 "
            f"min\" is the 1-minute load average when the row's run started (the runs before it "
            f"count in it; {load_before:.2f} before the servers started)."
            + (f"\n\n{differs}" if differs else "") + f"\n\n{table}"
            + (f"\n\naskalike over txtai at the same workers, mode, clients and writer:\n\n{compared}"
               if compared else "")
            + "\n\nA request that does no work (askalike's GET /health, txtai's GET /count), median of 20 "
            "on one kept-alive connection after the first, before the runs: the floor under every "
            "search of a client that keeps its connection (uvicorn's `--workers N` above 1 serves "
            "without TCP_NODELAY, Kludex/uvicorn#3149: a response then waits for the client's delayed "
            "ACK, about 40 ms on Linux; one worker is not affected; `askalike serve` sets TCP_NODELAY "
            "on each connection itself):\n\n"
            + markdown_table(["system", "workers", "ms"],
                             [[f"{server.system}" + (f" ({server.index})" if server.index else ""),
                               server.workers, f"{server.keepalive_ms:.1f}"] for server in plan.servers])
            + f"\n\nCounts checked after the runs: {'; '.join(checks)}.")


if __name__ == "__main__":
    main()
