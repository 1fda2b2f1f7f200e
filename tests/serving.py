"""What the server tests share: an application over an index, with a key, ready to answer."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from askalike.app.server import models
from askalike.app.server.api import create_app
from askalike.app.server.settings import Limits, ServerSettings

KEY = "test-key-0123456789abcdef"
WRITE = {"Authorization": f"Bearer {KEY}"}
WRONG = {"Authorization": "Bearer not-the-key-0123456789"}


def eventually(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds within a minute (what a server's own thread does in the
    background: a busy machine's wait, not a timing)."""
    deadline = time.monotonic() + 60
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def wait_ready(client: TestClient, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.get("/ready").status_code != 200:
        assert time.monotonic() < deadline, client.get("/ready").json()
        time.sleep(0.05)


@contextmanager
def serving(index_dir: Path, tmp_path: Path, limits: Limits | None = None, **options: object
            ) -> Iterator[TestClient]:
    """A TestClient of the server over ``index_dir`` (keys: ``KEY``), once its index is loaded."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# the test's key\n{KEY}\n")
    settings = ServerSettings(str(index_dir), keys_file=str(keys), limits=limits or Limits(), **options)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        wait_ready(client)
        yield client


def assert_answered_as_documented(client: TestClient, answer: httpx.Response, path: str,
                                  method: str) -> None:
    """``answer`` (to ``method`` ``path``, as /openapi.json spells the path) has a status that
    /openapi.json, and so docs/api.md, documents for it, and is exactly what the schema it names
    says: that schema's model validates it strictly (no other key, no string for a number)."""
    responses = client.get("/openapi.json").json()["paths"][path][method]["responses"]
    assert str(answer.status_code) in responses, (answer.status_code, answer.text)
    schema = responses[str(answer.status_code)]["content"]["application/json"]["schema"]
    getattr(models, schema["$ref"].rsplit("/", 1)[1]).model_validate_json(answer.content, strict=True)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def listening(index_dir: Path, tmp_path: Path, **options: object) -> Iterator[str]:
    """The server over ``index_dir`` on a real uvicorn, in a thread: its base URL, once ready."""
    import uvicorn

    keys = tmp_path / "keys.txt"
    keys.write_text(f"{KEY}\n")
    settings = ServerSettings(str(index_dir), keys_file=str(keys), **options)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port,
                                          log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not get ready"
            time.sleep(0.05)
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
