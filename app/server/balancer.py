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
(``SOCK_SEQPACKET``); elsewhere uvicorn's workers serve. Unlike uvicorn's supervisor it has no
SIGHUP restart, no SIGTTIN/SIGTTOU to change the number of workers and no TLS or Unix socket
(``askalike serve`` uses none of them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import selectors
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from multiprocessing.context import SpawnProcess
from types import FrameType

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from askalike.app.server.protocol import NoDelayHTTP

log = logging.getLogger("uvicorn.error")

SUPPORTED = sys.platform.startswith("linux")
READY, STOPPING = b"r", b"s"  # what a worker tells the parent, besides its closes
CLOSED = b"c"  # a worker's count of its connections closed so far follows (a later one makes up a lost one)
CONNECTION = b"n"  # what the parent sends with each connection's descriptor
COUNT = struct.Struct("<Q")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
POLL_S = 0.5  # how often the parent looks for a signal to stop when nothing else wakes it
ACCEPTS_A_ROUND = 64  # then the workers' messages are read before more connections are taken


@dataclass(eq=False)
class _Worker:
    process: SpawnProcess
    channel: socket.socket  # the parent's end of the socket the worker's connections go through
    ready: bool = False  # takes connections now
    served: bool = False  # has been ready
    handed: int = 0  # connections handed to it
    closed: int = 0  # of those, closed (as it last said)

    @property
    def holding(self) -> int:
        return self.handed - self.closed


class BalancedWorkers:
    """The parent process of ``config.workers`` workers that serve ``config``'s application."""

    def __init__(self, config: uvicorn.Config) -> None:
        if config.uds or config.fd is not None or config.is_ssl:
            raise ValueError("balanced workers listen on a host and port, without TLS")
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
        parent_end.setblocking(False)  # a worker that does not read is passed over, never waited for
        worker = _Worker(process, parent_end)
        self.workers.append(worker)
        self._selector.register(parent_end, selectors.EVENT_READ, lambda _: self._heard_from(worker))

    def _accept(self, listener: socket.socket) -> None:
        for _ in range(ACCEPTS_A_ROUND):
            try:
                connection, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # out of descriptors, a connection reset while it waited
                log.warning("cannot accept a connection: %s", err)
                return
            with connection:
                self._hand_over(connection)

    def _hand_over(self, connection: socket.socket) -> None:
        """To the ready worker holding the fewest connections; past one whose channel is full."""
        for worker in sorted((worker for worker in self.workers if worker.ready), key=lambda w: w.holding):
            try:
                socket.send_fds(worker.channel, [CONNECTION], [connection.fileno()])
            except OSError:  # full (not reading), or just ended (its channel says so next)
                continue
            worker.handed += 1
            return
        log.warning("no worker could take a connection: closed")

    def _heard_from(self, worker: _Worker) -> None:
        try:
            message = worker.channel.recv(1 + COUNT.size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:  # reset: as good as ended
            message = b""
        if message == READY:
            worker.ready = worker.served = True
        elif message == STOPPING:  # it finishes what it has (SIGTERM to it alone)
            worker.ready = False
        elif message[:1] == CLOSED:
            worker.closed = max(worker.closed, COUNT.unpack(message[1:])[0])
        elif not message:  # it is ending: replaced once its process has exited
            worker.ready = False
            self._selector.unregister(worker.channel)
            self._selector.register(worker.process.sentinel, selectors.EVENT_READ,
                                    lambda _: self._replace(worker))

    def _replace(self, worker: _Worker) -> None:
        self._selector.unregister(worker.process.sentinel)
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
    ``channel`` from the parent, which it tells when it is ready, how many of them have closed,
    and when it stops."""

    def __init__(self, config: uvicorn.Config, channel: socket.socket) -> None:
        super().__init__(config)
        self._channel = channel
        self._connecting: set[asyncio.Task[None]] = set()
        self._closed = 0  # connections closed so far

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        if not issubclass(self.config.http_protocol_class, NoDelayHTTP):
            raise TypeError("balanced workers count closes with askalike's HTTP protocol only")
        await super().startup(sockets=[])  # the lifespan (the index loaded), and no listener
        self._channel.setblocking(False)
        asyncio.get_running_loop().add_reader(self._channel.fileno(), self._receive)
        self._tell(READY)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        self._tell(STOPPING)
        loop.add_reader(self._channel.fileno(), self._refuse_waiting)  # in place of _receive
        self._refuse_waiting()
        await super().shutdown(sockets=sockets)
        loop.remove_reader(self._channel.fileno())
        loop.remove_writer(self._channel.fileno())
        self._channel.close()

    def _next(self) -> tuple[bytes, list[int]]:
        """The parent's next message and the descriptors with it; (b"", []) once it has ended."""
        try:
            message, descriptors, _, _ = socket.recv_fds(self._channel, 1, 1)
        except (BlockingIOError, InterruptedError):
            raise  # nothing yet: not an end
        except OSError:  # reset: the parent has ended with messages unread
            return b"", []
        if message and not descriptors:  # the kernel dropped it (this process out of descriptors)
            self._connection_closed()
        return message, descriptors

    def _receive(self) -> None:
        try:
            message, descriptors = self._next()
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

    def _refuse_waiting(self) -> None:
        """Close, unread, the connections the parent sent before it read STOPPING (their clients
        may open them again at once: the parent then hands them to another worker)."""
        while True:
            try:
                message, descriptors = self._next()
            except (BlockingIOError, InterruptedError):
                return
            for descriptor in descriptors:
                socket.socket(fileno=descriptor).close()
                self._connection_closed()
            if not message:  # the parent has ended: nothing more will come
                asyncio.get_running_loop().remove_reader(self._channel.fileno())
                return

    async def _connect(self, connection: socket.socket) -> None:
        protocol = self.config.http_protocol_class(config=self.config, server_state=self.server_state,
                                                   app_state=self.lifespan.state)
        protocol.on_close = self._connection_closed
        await asyncio.get_running_loop().connect_accepted_socket(lambda: protocol, connection)

    def _connection_closed(self) -> None:
        self._closed += 1
        self._say_closed()

    def _say_closed(self) -> None:
        """The count of closes, now or (the channel full) once it can be written: the latest
        count makes up for any not sent."""
        loop = asyncio.get_running_loop()
        if self._tell(CLOSED + COUNT.pack(self._closed)):
            loop.remove_writer(self._channel.fileno())
        else:
            loop.add_writer(self._channel.fileno(), self._say_closed)

    def _tell(self, message: bytes) -> bool:
        """Whether ``message`` is off: sent, or the parent has ended (this worker then stops);
        False: the channel is full."""
        try:
            self._channel.send(message)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:  # the parent has ended
            self.should_exit = True
        return True
