"""The server's guards: API keys compared in constant time, the request body's size, and error
messages that give away no file path and no credential."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from core.credentials import masked_text

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# an absolute path (two parts at least): shown by its last part only
_PATH = re.compile(r"(?<![\w.])/+(?:[^\s/'\":,()]+/)+([^\s/'\":,()]*)")


class KeyChecker:
    """Tells whether a request's key (``Authorization: Bearer KEY``) is one of the keys. Every
    key is compared, by its SHA-256 (the same length whatever the key) in constant time, so that
    the time taken says nothing about which key or how much of it matched."""

    def __init__(self, keys: list[str]) -> None:
        self._digests = [hashlib.sha256(key.encode()).digest() for key in keys]

    def __bool__(self) -> bool:
        return bool(self._digests)

    def accepts(self, given: str) -> bool:
        """Is ``given`` (the key a request sent) one of the keys?"""
        digest = hashlib.sha256(given.strip().encode()).digest()
        matched = False
        for known in self._digests:
            matched |= hmac.compare_digest(digest, known)
        return matched and bool(given.strip())


def public_message(message: str) -> str:
    """``message`` fit for a client: one line, credentials masked, absolute paths cut to their
    last part (a client never learns where the server keeps its files)."""
    line = " ".join(masked_text(message).split())
    return _PATH.sub(lambda match: match[1] or "/", line)


class BodyLimit:
    """ASGI middleware: a request whose body is over ``limit`` bytes (by its Content-Length, or
    as it streams in) is answered 413 before the application reads it whole."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send)
            return
        received = 0

        async def counted() -> Message:
            nonlocal received
            message = await receive()
            received += len(message.get("body", b""))
            if received > self.limit:  # a body sent without its length: refused as it grows
                raise HTTPException(413, self._too_large())
            return message

        await self.app(scope, counted, send)

    def _too_large(self) -> str:
        return f"the request body is over the limit of {self.limit:,} bytes"

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": self._too_large()}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
