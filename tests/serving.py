"""What the server tests share: an application over an index, with a key, ready to answer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient

from app.server.api import create_app
from app.server.settings import Limits, ServerSettings

KEY = "test-key-0123456789abcdef"
WRITE = {"Authorization": f"Bearer {KEY}"}
WRONG = {"Authorization": "Bearer not-the-key-0123456789"}


def wait_ready(client: TestClient, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while client.get("/ready").status_code != 200:
        assert time.monotonic() < deadline, client.get("/ready").json()
        time.sleep(0.05)


@contextmanager
def serving(index_dir: Path, tmp_path: Path, limits: Limits | None = None, **options: object
            ) -> Iterator[TestClient]:
    """A TestClient of the server over ``index_dir`` (keys: ``KEY``), once its index is loaded."""
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# the test's key\n{KEY}\n")
    settings = ServerSettings(str(index_dir), keys_file=str(keys), limits=limits or Limits(), **options)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        wait_ready(client)
        yield client
