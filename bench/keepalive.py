"""Latency of one client on one kept-alive connection to ``askalike serve``: the median of
``--requests`` requests per endpoint, at each ``--workers`` count. Several uvicorn workers share
a socket that asyncio did not mark TCP (protocol 0), so TCP_NODELAY was off on their
connections and each answer waited on Nagle's algorithm (about 44 ms);
``app.server.protocol.NoDelayHTTP`` sets it on every connection.

    .venv/bin/python -m bench.keepalive --index DIR [--workers 1 2] [--requests 50]
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import markdown_table
from bench.serve import free_port, wait_until_up

REQUESTS = (("GET", "/health", None), ("GET", "/search?q=renew+permit&k=5", None),
            ("POST", "/search", b'{"queries": ["renew permit"], "k": 5}'))


def medians(port: int, count: int) -> list[float]:
    """The median milliseconds of each of REQUESTS, ``count`` times on one connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    figures = []
    for method, path, body in REQUESTS:
        times = []
        for _ in range(count + 1):  # the first one opens the connection: not counted
            started = time.perf_counter()
            connection.request(method, path, body, {"Content-Type": "application/json"})
            connection.getresponse().read()
            times.append(1000 * (time.perf_counter() - started))
        figures.append(statistics.median(times[1:]))
    connection.close()
    return figures


def served(index: Path, workers: int, count: int, log: Path) -> list[float]:
    port = free_port()
    with log.open("w") as output:
        command = [sys.executable, "-m", "askalike.app", "serve", "--index", str(index), "--port", str(port),
                   "--workers", str(workers)]
        server = subprocess.Popen(command, stdout=output, stderr=output)
    try:
        wait_until_up(f"http://127.0.0.1:{port}/ready", server, log, timeout_s=300)
        return medians(port, count)
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--requests", type=int, default=50)
    args = parser.parse_args()
    log = Path(tempfile.gettempdir()) / "askalike-keepalive-server.log"
    rows = [[workers, *(f"{ms:.2f}" for ms in served(args.index, workers, args.requests, log))]
            for workers in args.workers]
    columns = [f"{method} {path.split('?')[0]} median ms" for method, path, _ in REQUESTS]
    print(markdown_table(["workers", *columns], rows))


if __name__ == "__main__":
    main()
