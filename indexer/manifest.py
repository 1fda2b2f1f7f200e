"""An index directory: its manifest (what the FAISS file holds and how it was built), the FAISS
file itself, the default SQLite database and the lock that keeps two index runs apart."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from indexer.store import EncoderIdentity
from train.errors import UserError

MANIFEST_FILE = "manifest.json"
LOCK_FILE = "index.lock"
FORMAT_VERSION = 1


class IndexDirectoryError(UserError):
    """An index directory that is missing, busy, damaged, or used with the wrong encoder."""


@dataclass
class Manifest:
    encoder: EncoderIdentity
    database: str  # the database URL, password hidden
    index_type: str
    parameters: dict[str, Any]
    count: int  # vectors in the FAISS file
    generation: int  # the store generation the FAISS file was built from
    faiss_file: str  # a name inside the index directory
    faiss_sha256: str
    faiss_bytes: int
    updated_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    format: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str) -> Manifest:
        values = json.loads(text)
        values["encoder"] = EncoderIdentity(**values["encoder"])
        return cls(**values)


def faiss_file_name(generation: int) -> str:
    return f"vectors-{generation:08d}.faiss"


def read_manifest(index_dir: Path) -> Manifest | None:
    path = index_dir / MANIFEST_FILE
    if not path.is_file():
        return None
    try:
        manifest = Manifest.from_json(path.read_text())
    except (ValueError, KeyError, TypeError) as err:
        raise IndexDirectoryError(f"{path}: unreadable manifest ({err}); run `askalike check --repair "
                          f"--index {index_dir}` to rebuild it from the database") from None
    if manifest.format != FORMAT_VERSION:
        raise IndexDirectoryError(f"{path}: manifest format {manifest.format}, this askalike reads "
                          f"{FORMAT_VERSION}")
    return manifest


def write_manifest(index_dir: Path, manifest: Manifest) -> None:
    """Replace the manifest atomically, then drop FAISS files it no longer names."""
    path = index_dir / MANIFEST_FILE
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w") as handle:
        handle.write(manifest.to_json())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    for old in index_dir.glob("vectors-*.faiss"):
        if old.name != manifest.faiss_file:
            old.unlink(missing_ok=True)


@contextmanager
def index_lock(index_dir: Path) -> Iterator[None]:
    """Exclusive use of an index directory for writing; a second writer is refused at once."""
    index_dir.mkdir(parents=True, exist_ok=True)
    with open(index_dir / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise IndexDirectoryError(f"{index_dir} is being written by {holder}: wait for that run to "
                              "finish (an index directory takes one writer at a time)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"askalike pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)
