"""What an index directory is: the files in it, what each name means, the lock that keeps two
writers apart and the id that ties the directory to its database.

    manifest.json          which FAISS and BM25 files are current, how they were built (manifest.py)
    vectors-GENERATION.faiss, lexical-GENERATION.npz
                           caches of the database, rebuilt from it by `askalike check --repair`
    vectors-GENERATION-added.faiss, lexical-GENERATION-added.npz
                           the questions added since the main FAISS and BM25 files (indexer/sync.py)
    askalike.sqlite3       the default database (questions and vectors), unless --db names another
    index.id               the directory's id, recorded in its database (a database serves one index)
    index.lock             held by the one writer
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from askalike.core.errors import UserError
from askalike.core.files import remove_stale_temporaries, write_text_atomically

MANIFEST_FILE = "manifest.json"
LOCK_FILE = "index.lock"
ID_FILE = "index.id"
SQLITE_FILE = "askalike.sqlite3"
FAISS_FILES, LEXICAL_FILES = "vectors-*.faiss", "lexical-*.npz"
OWN_DATABASE = ""  # the manifest's database when it is the SQLite file in the index directory
REPAIR_HINT = "askalike check --repair --index {dir}"


class IndexDirectoryError(UserError):
    """An index directory that is missing, busy, damaged, or used with the wrong encoder."""


class IndexBusyError(IndexDirectoryError):
    """Another process holds the index directory's writer lock (a run in progress)."""


def holds_index(index_dir: Path) -> bool:
    """Does ``index_dir`` hold (part of) an askalike index: its manifest, or what a first run
    writes before it (the directory's id, its SQLite database, the writer's lock)? A directory
    of other files does not."""
    return any((index_dir / name).exists() for name in (MANIFEST_FILE, ID_FILE, SQLITE_FILE, LOCK_FILE))


def not_an_index(index_dir: Path) -> IndexDirectoryError:
    """The error for a directory of other files given as an index."""
    return IndexDirectoryError(f"{index_dir}: not an askalike index (no {MANIFEST_FILE}, no database, "
                               "other files): give --index the directory an index was built in, or a "
                               "new or empty one to build an index in")


def faiss_file_name(generation: int) -> str:
    return f"vectors-{generation:08d}.faiss"


def added_file_name(generation: int) -> str:
    return f"vectors-{generation:08d}-added.faiss"


def lexical_file_name(generation: int) -> str:
    return f"lexical-{generation:08d}.npz"


def lexical_added_file_name(generation: int) -> str:
    return f"lexical-{generation:08d}-added.npz"


def default_database_url(index_dir: Path) -> str:
    return f"sqlite:///{(index_dir / SQLITE_FILE).resolve()}"


def database_entry(index_dir: Path, url: str, masked: str) -> str:
    """The manifest's ``database`` entry for the database at ``url`` (``masked``: the URL with its
    password hidden): OWN_DATABASE for the directory's own SQLite file, so that the directory can
    be moved or copied, else the masked URL."""
    return OWN_DATABASE if url == default_database_url(index_dir) else masked


def _names_own_database(recorded: str, index_dir: Path) -> bool:
    """Does a manifest's database mean the index directory's own SQLite file? Yes for
    OWN_DATABASE, and for an older manifest's absolute URL of an ``askalike.sqlite3`` that is
    no longer there (the directory was moved or copied) while this directory has its own."""
    if recorded in (OWN_DATABASE, default_database_url(index_dir)):
        return True
    prefix = "sqlite:///"
    return (recorded.startswith(prefix) and recorded.endswith("/" + SQLITE_FILE)
            and not Path(recorded.removeprefix(prefix)).exists()
            and (index_dir / SQLITE_FILE).is_file())


def database_url_of_entry(index_dir: Path, recorded: str | None, env_var: str) -> str:
    """The database URL a manifest's ``database`` entry means, ``database_entry`` the other way
    (None: no manifest yet, so the directory's own); one recorded with its password hidden must
    be given again (``env_var``)."""
    if recorded is None or _names_own_database(recorded, index_dir):
        return default_database_url(index_dir)
    if "***" in recorded:
        raise IndexDirectoryError(f"{index_dir} uses the database {recorded}: pass its URL with the "
                                  f"password by --db or ${env_var}")
    return recorded


@contextmanager
def index_lock(index_dir: Path) -> Iterator[None]:
    """Exclusive use of an index directory for writing; a second writer is refused at once.
    Temporaries a killed writer left behind are removed once the lock is held."""
    with _lock_file(index_dir) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            raise _busy(index_dir, handle.read().strip() or "another process", "wait for that run to "
                        "finish (an index directory takes one writer at a time)") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"askalike pid {os.getpid()}")
        handle.flush()
        remove_stale_temporaries(index_dir)
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _lock_file(index_dir: Path) -> IO[str]:
    """The lock file, opened for writing (the directory made first); an IndexDirectoryError
    when the directory cannot be written (read-only, not ours, under /proc)."""
    try:
        if index_dir.exists() and not index_dir.is_dir():
            raise IndexDirectoryError(f"{index_dir}: not a directory; give --index a directory (new "
                                      "or holding an index)")
        index_dir.mkdir(parents=True, exist_ok=True)
        return open(index_dir / LOCK_FILE, "a+", encoding="utf-8")
    except OSError as err:
        raise IndexDirectoryError(f"{index_dir}: cannot write to the index directory "
                                  f"({err.strerror or err}); indexing, deleting and repairing need "
                                  "write access to it (searching needs only read access)") from None


def _busy(index_dir: Path, holder: str, advice: str) -> IndexBusyError:
    return IndexBusyError(f"{index_dir} is being written by {holder}: {advice}")


def require_no_writer(index_dir: Path, advice: str) -> None:
    """Refuse (with ``advice``) while an index run holds the directory's lock. The lock is only
    tried when the lock file names a holder (a writer writes its pid there, and clears it when
    done), and only for an instant; nothing is created."""
    try:
        with open(index_dir / LOCK_FILE, encoding="utf-8") as handle:
            holder = handle.read().strip()
            if not holder:
                return
            try:
                fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise _busy(index_dir, holder, advice) from None
            fcntl.flock(handle, fcntl.LOCK_UN)  # a killed writer's pid: no run in progress
    except OSError:  # no lock file, or not readable: no writer to wait for
        return


def index_id(index_dir: Path) -> str | None:
    """The id that ties an index directory to its database (None: an older index without one)."""
    path = index_dir / ID_FILE
    return path.read_text(encoding="utf-8").strip() or None if path.is_file() else None


def ensure_index_id(index_dir: Path) -> str:
    """The directory's id, made on its first index run (written before the database is claimed,
    so that an interrupted first run is still recognised by its re-run)."""
    existing = index_id(index_dir)
    if existing is not None:
        return existing
    new = uuid.uuid4().hex
    write_text_atomically(index_dir / ID_FILE, new + "\n")
    return new
