"""The HTTP protocol of ``askalike serve``: uvicorn's own, with Nagle's algorithm off on every
connection it accepts.

asyncio turns Nagle's algorithm off (TCP_NODELAY) only on sockets made with protocol
``IPPROTO_TCP``. The listening socket that uvicorn binds for several workers is made with
protocol 0, and so are the connections accepted from it: there, a response written in two sends
(its head, then its body) waited for the client's delayed ACK, about 40 ms, on every request of a
kept-alive connection after the first (issue 55). A single worker's socket was not affected.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from uvicorn.protocols.http.auto import AutoHTTPProtocol


class NoDelayHTTP(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
    """uvicorn's HTTP protocol (httptools where it is installed, else h11), each accepted TCP
    connection with TCP_NODELAY set; ``on_close``, where set (``balancer``), is called once the
    connection has ended."""

    on_close: Callable[[], None] | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.on_close is not None:
            self.on_close()
