"""The server's guards: API keys compared in constant time, the request body's size, the text of
paths and parameters, answers whose text no terminal acts on, and error messages that give away
no file path and no credential."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from askalike.app.safe_text import json_line
from askalike.core.credentials import masked_text

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


class SafeJSONResponse(JSONResponse):
    """JSON as ``search --json`` prints it (``json_line``): stored text exact, but DEL, C1 and
    bidirectional controls escaped (``\\u009b``) as JSON escapes C0 ones, so that a client that
    prints an answer prints nothing a terminal acts on."""

    def render(self, content: Any) -> bytes:
        return json_line(content).encode("utf-8")


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
        await _send_error(send, 413, self._too_large())


class TextGuard:
    """ASGI middleware: a request whose path or query string, once percent-decoded, is not
    UTF-8 or holds a NUL is answered 400 naming the parameter. (Starlette would put U+FFFD in
    place of the bytes, and a NUL reaches the database; the CLI refuses both.)"""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and (problem := _text_problem(scope)):
            await _send_error(send, 400, problem)
            return
        await self.app(scope, receive, send)


def _text_problem(scope: Scope) -> str | None:
    """What is wrong with the text of a request's path and query parameters (None: nothing)."""
    raw_path = scope.get("raw_path") or scope["path"].encode()
    fields = [("the path", raw_path)]
    for part in scope.get("query_string", b"").split(b"&"):
        name, _, value = part.partition(b"=")
        fields.append((f"parameter {unquote_to_bytes(name.replace(b'+', b' ')).decode('utf-8', 'replace')}",
                       value.replace(b"+", b" ")))
        fields.append(("a parameter name", name.replace(b"+", b" ")))
    for what, quoted in fields:
        text = unquote_to_bytes(quoted)
        try:
            text.decode("utf-8")
        except UnicodeDecodeError as err:
            return f"{what} is not valid UTF-8 (byte {err.start} of it): send text in UTF-8"
        if b"\x00" in text:
            return f"{what} holds a NUL character: send text"
    return None


async def _send_error(send: Send, status: int, message: str) -> None:
    """An error answered before the application runs, as the application answers them."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def unknown_parameters(unknown: list[str], known: list[str]) -> str:
    """The message for parameters an endpoint does not take: each named, with its spelling
    where it is a known one spelt another way (``min_match``: ``min-match``, the CLI's spelling)."""
    def spelt(name: str) -> str:
        other = next((k for k in known if k.replace("-", "_") == name.replace("-", "_")), None)
        return f"{name} (spelt {other}, as the CLI's --{other})" if other else name
    return (f"unknown parameter{'s' if len(unknown) > 1 else ''} {', '.join(map(spelt, unknown))}: "
            f"this endpoint takes {', '.join(known) or 'no parameters'}")
