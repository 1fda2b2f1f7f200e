"""serve --workers N on Linux: the parent process hands each connection to the worker holding the
fewest open (``app/server/balancer.py``), replaces a worker that dies and stops on SIGTERM. The
workers serve ``worker_pid_app``, which answers with the id of the process that served it."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
import uvicorn
from serving import eventually, free_port
from uvicorn.config import STARTUP_FAILURE

from askalike.app.server.balancer import (
    CLOSED,
    COUNT,
    READY,
    STOPPING,
    SUPPORTED,
    BalancedWorkers,
    _Worker,
)

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="the balanced workers pass connections over "
                                                      "Unix sockets of SOCK_SEQPACKET (Linux)")
APP = Path(__file__).with_name("worker_pid_app.py")


@contextlib.contextmanager
def balanced(app: str = "worker_pid_app:app") -> Iterator[tuple[subprocess.Popen, int, int]]:
    """Two balanced workers serving ``app``: the parent process, its port and the worker that
    answered a first connection, kept open. Connections wait in the parent's backlog until both
    workers have started, so one request says they have; closing it would leave a close that the
    parent counts a moment later (when the worker tells it), and the tests' own counts open. The
    processes' output goes to a file (a pipe nobody reads would fill, and block them)."""
    port = free_port()
    with tempfile.TemporaryFile("w+") as output:
        parent = subprocess.Popen([sys.executable, str(APP), app, str(port)], stdout=output,
                                  stderr=subprocess.STDOUT, text=True)
        first = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
        try:
            assert eventually(lambda: parent.poll() is not None or _connected(first)), _read(output)
            assert parent.poll() is None, _read(output)
            yield parent, port, _pid(first)
        finally:
            first.close()
            if parent.poll() is None:
                parent.kill()
                parent.wait()


def _read(output: IO[str]) -> str:
    output.seek(0)
    return output.read()


def _connected(connection: http.client.HTTPConnection) -> bool:
    try:
        connection.connect()
    except ConnectionRefusedError:  # the parent has not listened yet
        return False
    return True


def _connect(port: int, count: int) -> list[http.client.HTTPConnection]:
    """``count`` kept-alive connections, all opened before the first request (as a load
    generator's clients start together)."""
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=30) for _ in range(count)]
    for connection in connections:
        connection.connect()
    return connections


def _pid(connection: http.client.HTTPConnection) -> int:
    connection.request("GET", "/")
    answer = connection.getresponse()
    assert answer.status == 200
    return int(answer.read())


def _workers(port: int, connections: int) -> set[int]:
    """The workers that ``connections`` new connections reach (none where it does not answer)."""
    try:
        opened = _connect(port, connections)
    except OSError:
        return set()
    try:
        return {_pid(connection) for connection in opened}
    except (OSError, http.client.HTTPException):
        return set()
    finally:
        for connection in opened:
            connection.close()


def test_connections_opened_together_are_split_evenly_and_a_closed_one_is_counted_as_closed():
    with balanced() as (_, port, first):
        held = _connect(port, 8)
        by_worker = Counter(_pid(connection) for connection in held)
        by_worker[first] += 1  # the first connection, still open
        # each to the worker holding the fewest: never more than one apart (uvicorn's own
        # workers: 8/0 or 7/1 of the eight)
        assert sorted(by_worker.values()) == [4, 5]

        other = next(worker for worker in by_worker if worker != first)
        for connection in held:  # the other worker's closed: it holds none, the first at least 4
            if _pid(connection) == other:
                connection.close()

        # four new ones all go to the emptied worker; the parent may accept them before it has
        # read the worker's notes of the closes, and so they are tried again (each try closes its
        # own: not `eventually`, which tries once more after a success)
        deadline = time.monotonic() + 60
        while True:
            fresh = _connect(port, 4)
            went = Counter(_pid(connection) for connection in fresh)
            for connection in fresh:
                connection.close()
            if went == {other: 4}:
                break
            assert time.monotonic() < deadline, went


def test_a_worker_that_dies_is_replaced():
    with balanced() as (_, port, _first):
        before = _workers(port, 8)
        killed = min(before)
        os.kill(killed, signal.SIGKILL)
        assert eventually(lambda: len(after := _workers(port, 8)) == 2 and killed not in after)


def test_sigterm_stops_the_parent_and_its_workers():
    with balanced() as (parent, port, _first):
        workers = _workers(port, 8)
        parent.terminate()
        assert parent.wait(60) == 0
        assert len(workers) == 2 and not any(_running(pid) for pid in workers)


def test_the_workers_end_with_a_parent_killed_outright():
    with balanced() as (parent, port, _first):
        workers = _workers(port, 8)
        parent.kill()
        parent.wait()
        assert len(workers) == 2
        assert eventually(lambda: not any(_running(pid) for pid in workers))


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs: not ended, nor ended and waiting for a parent that does not
    reap it (a zombie: an orphan's parent is whatever init the machine has)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_workers_that_fail_before_they_serve_stop_the_parent_with_uvicorns_status():
    port = free_port()
    failed = subprocess.run([sys.executable, str(APP), "worker_pid_app:missing", str(port)],
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == STARTUP_FAILURE, failed.stderr
    assert "failed to start" in failed.stderr


def test_the_parent_reads_each_message_of_a_worker():
    """What a worker says moves the parent's view of it: ready, its closes as a running count
    (a later count makes up for one lost), stopping (it is passed over from then on)."""
    parent_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with parent_end, worker_end:
        parent_end.setblocking(False)
        workers = BalancedWorkers(uvicorn.Config("worker_pid_app:app", host="127.0.0.1", port=0))
        worker = _Worker(process=None, channel=parent_end, handed=5)  # type: ignore[arg-type]
        for message in (READY, CLOSED + COUNT.pack(1), CLOSED + COUNT.pack(3)):
            worker_end.send(message)
            workers._heard_from(worker)
        assert worker.ready and worker.served and worker.holding == 2
        worker_end.send(STOPPING)
        workers._heard_from(worker)
        assert not worker.ready and worker.served and worker.holding == 2
