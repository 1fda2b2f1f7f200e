"""Writing files so that a reader never sees half of one, and hashing them.

Light (standard library only): train/, indexer/, retrieval/ and app/ all use it.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from askalike.core.errors import UserError


class OutputError(UserError):
    """An output path that cannot be written (a directory, a missing parent, no permission)."""


def temporary_name(path: Path) -> Path:
    """Where ``path`` is written before it is renamed into place: hidden, and per process."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def remove_stale_temporaries(directory: Path, pattern: str = ".*.tmp") -> None:
    """Drop temporaries that a killed writer left (call only while holding the writer's lock)."""
    for leftover in directory.glob(pattern):
        leftover.unlink(missing_ok=True)


def require_output_file(path: Path) -> None:
    """Refuse an output path that can never be a file, before any work is done for it."""
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; give a file name")
    if not path.parent.is_dir():
        raise OutputError(f"{path}: the directory {path.parent} does not exist")


@contextmanager
def atomic_write(path: Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; when the block succeeds the file is
    synced and renamed onto ``path``, else removed: readers see the old file or the new one.
    A path that cannot be written raises :class:`OutputError` naming it."""
    require_output_file(path)
    temporary = temporary_name(path)
    try:
        yield temporary
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except OSError as err:
        raise OutputError(f"{path}: cannot write ({err.strerror or err})") from None
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    with atomic_write(path) as temporary:
        temporary.write_text(text, encoding="utf-8")


def files_sha256(paths: Iterable[Path]) -> str:
    """The sha256 (hex) of the files' contents, one after the other, read a MiB at a time."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for chunk in iter(lambda handle=handle: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    return files_sha256([path])


FileIdentity = tuple[int, int, int, int, int]  # device, inode, size, modification and change time


def _identity(path: Path) -> FileIdentity:
    status = os.stat(path)
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns


_known_digests: dict[Path, tuple[FileIdentity, str]] = {}
_known_lock = threading.Lock()  # a process may write several indexes at once
# the coarsest clock a file system stamps changes by (one kernel tick, 1 to 10 ms, before Linux's
# fine-grained timestamps), with room to spare
TIMESTAMP_RESOLUTION_NS = 20_000_000


def remember_sha256(path: Path, digest: str) -> None:
    """Note the sha256 of a file this process has just written (and renamed into place), so
    that ``known_sha256`` need not read it again while it is unchanged. Waits, as git does for a
    "racily clean" file, until the file system's clock has moved past the file's last change:
    a change within the same tick would leave its times as they were."""
    identity = _identity(path)
    wait_ns = identity[4] + TIMESTAMP_RESOLUTION_NS - time.time_ns()
    if wait_ns > 0:
        time.sleep(wait_ns / 1e9)
    _remember(path, identity, digest)


def _remember(path: Path, identity: FileIdentity, digest: str) -> None:
    """Keep ``digest`` for ``path`` as it is (``identity``); forget the files of the same
    directory that are gone (an index's earlier generations)."""
    key = path.resolve()
    with _known_lock:
        gone = [known for known in _known_digests if known.parent == key.parent and not known.exists()]
        for known in gone:
            del _known_digests[known]
        _known_digests[key] = (identity, digest)


def known_sha256(path: Path) -> str:
    """The sha256 of ``path``: remembered where this process wrote or read the file and it is
    still the same file, unchanged since (device, inode, size, modification and change times),
    else read. A server that writes a 100,000-question index then opens it verified without
    hashing its 170 MB again, and a server's other workers hash it once, not at every write that
    leaves it as it is; a file replaced or altered by anyone is hashed. A file read within a
    clock tick of its last change is not remembered (a change in the same tick would leave its
    times as they were)."""
    remembered = _known_digests.get(path.resolve())
    identity = _identity(path)
    if remembered is not None and remembered[0] == identity:
        return remembered[1]
    settled = identity[4] + TIMESTAMP_RESOLUTION_NS <= time.time_ns()  # before the read begins
    digest = file_sha256(path)
    if settled and _identity(path) == identity:
        _remember(path, identity, digest)
    return digest
