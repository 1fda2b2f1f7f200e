"""Several worker processes behind one port, each new connection handed to the worker that holds
the fewest open ones.

uvicorn's own workers share the listening socket: whichever is idle when connections arrive
accepts every one waiting. A few long-lived connections (kept-alive clients, a proxy's pool of
upstream connections) then often sit unevenly on the workers, and the clients of the busier one
wait the longest: at 100,000 questions with 8 clients and a writer, p99 37.1-39.5 ms with the
clients split 6/2 against 32.7-33.1 ms split 4/4 (issue 55; docs/benchmarks.md). Here the
parent process accepts, once every worker has started, and passes each connection (its
descriptor, over a Unix socket) to the ready worker holding the fewest; each worker says on that
socket when it is ready and when a connection of its own closes. Linux only
(``SOCK_SEQPACKET``); elsewhere uvicorn's workers serve.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import selectors
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE

log = logging.getLogger("uvicorn.error")

SUPPORTED = sys.platform.startswith("linux")
READY, CLOSED, STOPPING = b"r", b"c", b"s"  # what a worker tells the parent
CONNECTION = b"n"  # what the parent sends with each connection's descriptor
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
POLL_S = 0.5  # how often the parent looks for a signal to stop when nothing else wakes it
# how long the parent waits to hand a connection to a worker that is not reading its channel (one
# stuck that long loses the connection rather than stall every other worker's)
HANDOFF_TIMEOUT_S = 5.0


@dataclass(eq=False)
class _Worker:
    process: SpawnProcess
    channel: socket.socket  # the parent's end of the socket the worker's connections go through
    ready: bool = False  # takes connections now
    served: bool = False  # has been ready
    open: int = 0  # connections handed to it and not yet closed


class BalancedWorkers:
    """The parent process of ``config.workers`` workers that serve ``config``'s application."""

    def __init__(self, config: uvicorn.Config) -> None:
        self.config = config
        self.workers: list[_Worker] = []
        self._selector = selectors.DefaultSelector()
        self._stopping = False
        self._started = False  # every worker first started has been ready
        self._failed = False

    def run(self) -> None:
        """Serve until SIGINT or SIGTERM; exits with uvicorn's start-up failure status when a
        worker ends before it has served, at the start or with that status (the same failure
        would recur on every restart)."""
        listener = self.config.bind_socket()
        listener.listen(self.config.backlog)
        listener.setblocking(False)
        before = {stop_signal: signal.signal(stop_signal, self._stop) for stop_signal in STOP_SIGNALS}
        try:
            for _ in range(self.config.workers):
                self._start_worker()
            listening = False
            while not self._stopping:
                # connections wait in the backlog until every worker has started (else the first
                # ready would hold every kept-alive one), later while none is ready
                self._started = self._started or all(worker.ready for worker in self.workers)
                if listening != (self._started and any(worker.ready for worker in self.workers)):
                    listening = not listening
                    if listening:
                        self._selector.register(listener, selectors.EVENT_READ, self._accept)
                    else:
                        self._selector.unregister(listener)
                for key, _ in self._selector.select(POLL_S):
                    key.data(key.fileobj)
        finally:
            listener.close()
            self._stop_workers()
            for stop_signal, handler in before.items():
                signal.signal(stop_signal, handler)
        if self._failed:
            sys.exit(STARTUP_FAILURE)

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self._stopping = True

    def _start_worker(self) -> None:
        parent_end, worker_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        process = multiprocessing.get_context("spawn").Process(
            target=_run_worker, args=(self.config, worker_end))
        process.start()
        worker_end.close()
        parent_end.settimeout(HANDOFF_TIMEOUT_S)
        worker = _Worker(process, parent_end)
        self.workers.append(worker)
        self._selector.register(parent_end, selectors.EVENT_READ, lambda _: self._heard_from(worker))

    def _accept(self, listener: socket.socket) -> None:
        while any(worker.ready for worker in self.workers):  # none: one has just died
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # out of descriptors, a connection reset while it waited
                log.warning("cannot accept a connection: %s", err)
                return
            with connection:
                worker = min((worker for worker in self.workers if worker.ready), key=lambda w: w.open)
                try:
                    socket.send_fds(worker.channel, [CONNECTION], [connection.fileno()])
                    worker.open += 1
                except OSError as err:  # one that has just died (its channel says so next), or stuck
                    log.warning("cannot hand a connection to worker [%d]: %s", worker.process.pid, err)

    def _heard_from(self, worker: _Worker) -> None:
        try:
            message = worker.channel.recv(1)
        except OSError:
            message = b""
        if message == READY:
            worker.ready = worker.served = True
        elif message == STOPPING:  # it finishes what it has (SIGTERM to it alone)
            worker.ready = False
        elif message == CLOSED:
            worker.open -= 1
        elif not message:  # the worker has ended
            self._replace(worker)

    def _replace(self, worker: _Worker) -> None:
        self._selector.unregister(worker.channel)
        worker.channel.close()
        worker.process.join()
        self.workers.remove(worker)
        if self._stopping:
            return
        if not worker.served and (not self._started or worker.process.exitcode == STARTUP_FAILURE):
            log.error("worker [%d] failed to start (exit status %s); stopping", worker.process.pid,
                      worker.process.exitcode)
            self._failed = self._stopping = True
            return
        log.warning("worker [%d] ended (exit status %s); starting another", worker.process.pid,
                    worker.process.exitcode)
        self._start_worker()

    def _stop_workers(self) -> None:
        """Each worker stops as uvicorn's do on SIGTERM: it ends its connections gracefully."""
        for worker in self.workers:
            if worker.process.is_alive():
                worker.process.terminate()
        for worker in self.workers:
            worker.process.join()
            worker.channel.close()
        self._selector.close()


def _run_worker(config: uvicorn.Config, channel: socket.socket) -> None:
    config.configure_logging()
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C reaches the parent too, which stops us
        _ChannelServer(config, channel).run()


class _ChannelServer(uvicorn.Server):
    """A worker's uvicorn server with no socket to listen on: its connections come over
    ``channel`` from the parent, which it tells when it is ready and when one closes."""

    def __init__(self, config: uvicorn.Config, channel: socket.socket) -> None:
        super().__init__(config)
        self._channel = channel
        self._connecting: set[asyncio.Task[object]] = set()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])  # the lifespan (the index loaded), and no listener
        self._channel.setblocking(False)
        asyncio.get_running_loop().add_reader(self._channel.fileno(), self._receive)
        self._tell(READY)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._tell(STOPPING)
        asyncio.get_running_loop().remove_reader(self._channel.fileno())
        self._refuse_waiting()
        await super().shutdown(sockets=sockets)
        self._channel.close()

    def _refuse_waiting(self) -> None:
        """Close the connections the parent sent before it read STOPPING: none has been read."""
        while True:
            try:
                message, descriptors, _, _ = socket.recv_fds(self._channel, 1, 1)
            except (BlockingIOError, InterruptedError):
                return
            for descriptor in descriptors:
                socket.socket(fileno=descriptor).close()
            if not message:
                return

    def _receive(self) -> None:
        try:
            message, descriptors, _, _ = socket.recv_fds(self._channel, 1, 1)
        except (BlockingIOError, InterruptedError):
            return
        if not message:  # the parent has ended: so do we
            asyncio.get_running_loop().remove_reader(self._channel.fileno())
            self.should_exit = True
            return
        for descriptor in descriptors:
            task = asyncio.ensure_future(self._connect(socket.socket(fileno=descriptor)))
            self._connecting.add(task)
            task.add_done_callback(self._connecting.discard)

    async def _connect(self, connection: socket.socket) -> None:
        protocol = self.config.http_protocol_class(config=self.config, server_state=self.server_state,
                                                   app_state=self.lifespan.state)
        protocol.on_close = closed = _once(lambda: self._tell(CLOSED))
        try:
            await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, connection)
        except OSError:  # closed by its client before it was taken
            connection.close()
            closed()

    def _tell(self, message: bytes) -> None:
        try:
            self._channel.send(message)
        except OSError as err:  # a parent that has ended, or stopped reading
            log.warning("cannot tell the parent process %r: %s", message, err)


def _once(action: Callable[[], None]) -> Callable[[], None]:
    """``action``, done at the first call only."""
    done = False

    def call() -> None:
        nonlocal done
        if not done:
            done = True
            action()
    return call
