"""What the split of kept-alive connections between two workers does to search latency: 8
hybrid clients on `askalike serve --workers 2` over the bench-serve index of `models/fast`
(100,000 questions), their connections split as asked (4/4, 6/2, ...), idle and then with a
writer adding 10,000 questions in writes of 100 (as `bench.serve`'s writer level). Each split
runs on a fresh server over a fresh copy of the index. Besides the figures of all 8 clients, the
p99 of each worker's clients (the workers in the order of their process ids; the writer's
connection may reach either).

The connections are placed by opening 40 and keeping, of those each worker holds (read with
`ss -tnp`, iproute2), as many as the split asks; the rest are closed before the clients start.

    python -m bench.experiments.connection_split [--splits 4/4 6/2 5/3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import http.client
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

import numpy as np

from bench.harness import real_questions
from bench.serve import (
    CACHE,
    KEY,
    QUERIES,
    QUERY_CHARS,
    SERVER_THREADS,
    askalike_writer,
    cached_index,
    collection_file,
    free_port,
    process,
    thread_env,
    wait_until_up,
)

QUESTIONS, WORKERS = 100_000, 2


def worker_of_each_client_port(port: int) -> dict[int, int]:
    """The worker process that holds each connection to ``port``, by the client's port."""
    listing = subprocess.run(["ss", "-tnpH", "state", "established", f"sport = :{port}"],
                             capture_output=True, text=True, check=True).stdout
    held = {}
    for line in listing.splitlines():
        owner, ports = re.search(r"pid=(\d+)", line), re.findall(r":(\d+)\s", line + " ")
        if owner and len(ports) == 2:
            held[int(ports[1])] = int(owner.group(1))
    return held


def split_connections(port: int, split: tuple[int, ...]) -> list[http.client.HTTPConnection]:
    opened = []
    for _ in range(40):
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        connection.request("GET", "/health")
        connection.getresponse().read()
        opened.append(connection)
    held = worker_of_each_client_port(port)
    workers = sorted(set(held.values()))
    kept = []
    for worker, count in zip(workers, split, strict=True):
        kept += [c for c in opened if held.get(c.sock.getsockname()[1]) == worker][:count]
    for connection in opened:
        if connection not in kept:
            connection.close()
    if len(kept) != sum(split):
        raise SystemExit(f"could not place the connections {split} (the workers held "
                         f"{[list(held.values()).count(w) for w in workers]} of 40)")
    return kept


def searching(connections: list[http.client.HTTPConnection], queries: list[str], seconds: float,
              write: Callable[[], object] | None) -> tuple[float, list[list[float]]]:
    """Searches a second and each connection's latencies (ms), ``connections`` searching for
    ``seconds`` (and, with ``write``, until it has written)."""
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in connections]

    def client(offset: int, connection: http.client.HTTPConnection) -> None:
        number = offset
        while not stop.is_set():
            started = time.perf_counter()
            connection.request("GET", "/search?" + urlencode(
                {"q": queries[number % len(queries)], "k": 10, "mode": "hybrid"}))
            answer = connection.getresponse()
            answer.read()
            if answer.status != 200:
                raise SystemExit(f"a search answered {answer.status}")
            latencies[offset].append((time.perf_counter() - started) * 1000)
            number += len(connections)

    threads = [threading.Thread(target=client, args=pair) for pair in enumerate(connections)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    if write is not None:
        write()
    time.sleep(max(0.0, seconds - (time.perf_counter() - started)))
    stop.set()
    for thread in threads:
        thread.join()
    return sum(map(len, latencies)) / (time.perf_counter() - started), latencies


def p99_by_worker(port: int, connections: list[http.client.HTTPConnection],
                  latencies: list[list[float]]) -> str:
    """The p99 of each worker's connections, the workers in the order of their process ids."""
    held = worker_of_each_client_port(port)
    by_worker: dict[int, list[float]] = {}
    for connection, own in zip(connections, latencies, strict=True):
        by_worker.setdefault(held[connection.sock.getsockname()[1]], []).extend(own)
    return " / ".join(f"{np.percentile(by_worker[worker], 99):.1f}" for worker in sorted(by_worker))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splits", nargs="+", default=["4/4", "6/2", "5/3"])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--writes", type=int, default=10_000)
    args = parser.parse_args()
    texts = real_questions(QUESTIONS + QUERIES + args.writes)  # as bench.serve takes them
    CACHE.mkdir(parents=True, exist_ok=True)
    source = collection_file(texts[:QUESTIONS], CACHE / f"questions-{QUESTIONS}.jsonl")
    index = cached_index("models/fast", source, QUESTIONS, "hnsw")
    queries = [text[:QUERY_CHARS] for text in texts[QUESTIONS:QUESTIONS + QUERIES]]
    to_write = texts[QUESTIONS + QUERIES:]
    print("| split | writer | searches/s | p50 ms | p99 ms | p99 ms by worker |\n|---|---|---|---|---|---|")
    for split in [tuple(int(n) for n in text.split("/")) for text in args.splits]:
        with tempfile.TemporaryDirectory() as work:
            served, keys = Path(work) / "index", Path(work) / "keys"
            shutil.copytree(index, served)
            keys.write_text(KEY + "\n")
            port = free_port()
            command = [sys.executable, "-m", "askalike.app", "serve", "--index", str(served), "--port",
                       str(port), "--api-keys", str(keys), "--workers", str(WORKERS)]
            with process(command, Path(work) / "serve.log", {"ASKALIKE_API_KEYS": "",
                                                              **thread_env(SERVER_THREADS)}) as child:
                wait_until_up(f"http://127.0.0.1:{port}/ready", child, Path(work) / "serve.log")
                writer = askalike_writer(f"http://127.0.0.1:{port}", 100)
                for label, write in (("idle", None),
                                     ("adding", lambda write=writer: write(to_write, "split-"))):
                    connections = split_connections(port, split)
                    rate, latencies = searching(connections, queries, args.seconds, write)
                    by_worker = p99_by_worker(port, connections, latencies)
                    for connection in connections:
                        connection.close()
                    every = np.concatenate(latencies)
                    print(f"| {'/'.join(map(str, split))} | {label} | {rate:.1f} | "
                          f"{np.percentile(every, 50):.1f} | {np.percentile(every, 99):.1f} | {by_worker} |",
                          flush=True)


if __name__ == "__main__":
    main()
