"""The connection to an index's database, through SQLAlchemy Core: URLs (parsed, their
passwords hidden in every message), SQLite opened read-only where nothing may be written, the
bound on waiting for another writer's lock, and database errors turned into ``StoreError``s that
say what happened to the transaction."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError

from askalike.core.credentials import masked_text, masked_url
from askalike.core.errors import UserError
from askalike.core.numbers import decimal


class StoreError(UserError):
    """A database that cannot be opened or does not belong to this index."""


_ESCAPE_HINT = "a password holding @ or : must write them as %40 and %3A"


def _parse_url(url: str) -> URL:
    """The parsed URL. Neither the parser's message nor a driver's is let near a URL whose
    password holds an unescaped ``@`` or ``:``: it would end up in the host or the port, which
    they quote."""
    try:
        parsed = make_url(url)
        parsed.port  # noqa: B018 - a port that is not a number raises here, not at connect
    except ArgumentError:
        reason = "it does not parse"
    except ValueError:
        reason = f"its port is not a number; {_ESCAPE_HINT}"
    else:
        if "@" not in (parsed.host or ""):
            return parsed
        reason = f"its host holds an @; {_ESCAPE_HINT}"
    raise StoreError(f"not a database URL: {masked_url(url)} ({reason}); expected e.g. "
                     "postgresql+psycopg://user@host:5432/db or sqlite:////path/file.sqlite3")


def absolute_sqlite_url(url: str) -> str:
    """``url`` with a relative SQLite file made absolute (against the working directory), so that
    the URL an index records names the same file from any directory; other URLs as given."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return url  # refused, with its reason, when it is opened
    database = parsed.database
    if (parsed.get_backend_name() != "sqlite" or not database or database == ":memory:"
            or database.startswith("file:") or Path(database).is_absolute()):
        return url
    return parsed.set(database=str(Path(database).resolve())).render_as_string(hide_password=False)


def _read_only_sqlite(path: Path, timeout: float) -> Any:
    """A connection factory for reading that never creates the database. SQLite reads a WAL
    database through a shared-memory file beside it: where the directory is writable, SQLite
    makes and removes it itself (``mode=rw``: the file must exist); where it is not, a running
    writer's is used read-only, and without a writer the file is opened as immutable."""
    if not path.is_file():
        raise StoreError(f"{path}: the database file is missing (deleted or moved?); rebuild the "
                         "index with `askalike index`")
    if os.access(path.parent, os.W_OK):
        options = "mode=rw"
    elif Path(f"{path}-wal").exists():
        options = "mode=ro"
    else:
        options = "mode=ro&immutable=1"
    uri = f"{path.resolve().as_uri()}?{options}"
    return lambda: sqlite3.connect(uri, uri=True, timeout=timeout, check_same_thread=False)


def _sqlite_pragmas(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        # WAL: searches read the last committed state while an index run writes
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()


LOCK_TIMEOUT_ENV_VAR = "ASKALIKE_DB_TIMEOUT"
DEFAULT_LOCK_TIMEOUT_S = 30.0
MAX_LOCK_TIMEOUT_S = 2_147_483  # PostgreSQL's lock_timeout is at most 2^31 - 1 ms


def lock_timeout_s() -> float:
    """How long a write waits for a lock another writer holds (``ASKALIKE_DB_TIMEOUT``)."""
    value = os.environ.get(LOCK_TIMEOUT_ENV_VAR, "")
    seconds = decimal(value) if value else DEFAULT_LOCK_TIMEOUT_S
    if seconds is None:
        raise StoreError(f"{LOCK_TIMEOUT_ENV_VAR}={value!r}: not a number of seconds")
    if not 0 <= seconds <= MAX_LOCK_TIMEOUT_S:
        raise StoreError(f"{LOCK_TIMEOUT_ENV_VAR}={value!r}: give a number of seconds from 0 to "
                         f"{MAX_LOCK_TIMEOUT_S:,}")
    return seconds


def database_reason(err: DatabaseError) -> str:
    """The first line of the driver's message (PostgreSQL adds detail lines), credentials hidden
    (a driver may echo the connection string)."""
    return masked_text((str(err.orig).strip().splitlines() or [type(err.orig).__name__])[0])


def _is_lock_timeout(err: OperationalError) -> bool:
    text = str(err.orig).lower()
    return "database is locked" in text or "lock timeout" in text or "busy" in text


class Database:
    """An engine for one database URL. ``read_only``: a SQLite file is opened for reading only
    and never created."""

    def __init__(self, url: str, busy_timeout_s: float | None = None, read_only: bool = False) -> None:
        self.url = url
        self.busy_timeout_s = lock_timeout_s() if busy_timeout_s is None else busy_timeout_s
        parsed = _parse_url(url)
        sqlite = parsed.get_backend_name() == "sqlite"
        # both wait (retrying) up to the bound for a lock another writer holds, then fail
        connect_args: dict[str, Any] = (
            {"timeout": self.busy_timeout_s} if sqlite
            else {"connect_timeout": 10, "options": f"-c lock_timeout={int(self.busy_timeout_s * 1000)}"})
        options: dict[str, Any] = {"connect_args": connect_args}
        if sqlite and read_only and parsed.database:
            options = {"creator": _read_only_sqlite(Path(parsed.database), self.busy_timeout_s)}
        elif sqlite and parsed.database:
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.engine = create_engine(url, **options)
        except (ArgumentError, ImportError) as err:
            raise StoreError(f"{masked_url(url)}: {masked_text(str(err))}") from None
        if sqlite and not read_only:
            _sqlite_pragmas(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction: committed whole or rolled back whole. A lock held by another
        writer past the bound, a full disk or a value the database refuses becomes a StoreError
        that says so."""
        try:
            with self.engine.begin() as connection:
                yield connection
        except DatabaseError as err:
            where = masked_url(self.url)
            if isinstance(err, OperationalError) and _is_lock_timeout(err):
                raise StoreError(
                    f"{where}: another program holds a write lock on the database; gave up after "
                    f"{self.busy_timeout_s:g} s (set {LOCK_TIMEOUT_ENV_VAR} to wait longer); "
                    "this transaction was rolled back, earlier ones are kept") from None
            reason = database_reason(err)
            raise StoreError(f"{where}: {reason} (this transaction was rolled back, earlier "
                             "ones are kept)") from None

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """A read: a database that vanished or is damaged becomes a StoreError naming it."""
        try:
            with self.engine.connect() as connection:
                yield connection
        except DatabaseError as err:
            reason = database_reason(err)
            raise StoreError(f"cannot read the database {masked_url(self.url)}: {reason}") from None
