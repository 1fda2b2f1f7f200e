"""A searcher that follows its index directory's commits, for a long-running process.

Each search answers from one ``Searcher``: the manifest, FAISS and BM25 files of one committed
state. A new commit (by this process, another server process or an ``askalike index`` run)
switches the manifest file by a rename; a thread of this process's own (``_Follower``, below
the searches' priority) opens the new state as soon as it sees it: woken by a search that finds
the manifest changed, or by its own look at the manifest every ``FOLLOW_POLL_S``. Searches do not
wait for that opening (at 100,000 questions it took 30-40 ms of CPU, about 10 ms since a state
keeps the main FAISS and BM25 files of the one before, ``manifest._open_mains``; the one search
that waited for it took 200-600 ms while a writer added questions): until it is done they answer from the
state before, as a search engine's near-real-time search does. A read that names one question or
must see every commit (``searching(latest=True)``: a question by its id, a write's lookups) opens
the newest state first. Searches already running finish on the old state, which is closed when
the last of them is done, on a thread of its own (``_RetiredSearchers``).

A write in this process holds ``committing()`` from its database commit until its new state is
open: searches meanwhile answer from the state before, and the writer opens the new one before it
answers (so its client's next search sees the write). One that changes stored text holds it
``exclusive``: no search runs meanwhile, else one between the two would read the new text of a
question ranked by its old vector. Adding and deleting questions need no such pause: until the
switch, a search ranks by the old files and skips ids no longer stored.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from askalike.core.encoder import Encoder
from askalike.core.priority import lower_thread_priority
from askalike.indexer.layout import MANIFEST_FILE
from askalike.retrieval.searcher import Searcher

log = logging.getLogger(__name__)

ManifestState = tuple[int, int, int] | None  # inode, size, modification time (None: no file)
# how long retired searchers are kept after their close, so that the search threads' last
# references to them (locals of frames that are returning) are gone before these are dropped; a
# reference kept longer (a traceback's frames) frees the searcher wherever it is dropped, as before
RETIRED_GRACE_S = 0.1
# how often the follower looks at the manifest when no search wakes it, and waits before it tries
# again to open a state that failed to open
FOLLOW_POLL_S = 0.2


def manifest_state(index_dir: Path) -> ManifestState:
    try:
        status = os.stat(index_dir / MANIFEST_FILE)
    except OSError:
        return None
    return status.st_ino, status.st_size, status.st_mtime_ns


class _ReadWriteLock:
    """Many readers or one writer; a waiting writer lets no new reader in."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._condition:
            self._condition.wait_for(lambda: not self._writing and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._condition:
                self._readers -= 1
                self._condition.notify_all()

    def open_to_readers(self) -> bool:
        """Whether a reader would get in at once (a glance, not a promise)."""
        return not self._writing and not self._writers_waiting

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._condition:
            self._writers_waiting += 1
            self._condition.wait_for(lambda: not self._writing and not self._readers)
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._condition:
                self._writing = False
                self._condition.notify_all()


def _close_each(batch: list[Searcher | None]) -> int:
    """Close the searchers of ``batch`` (a failure is logged, the next ones still closed)."""
    searchers = [searcher for searcher in batch if searcher is not None]
    for searcher in searchers:
        try:
            searcher.close()
        except Exception:
            log.exception("cannot close a replaced state of the index")
    return len(searchers)


class _RetiredSearchers:
    """Closes and frees the searchers that a new state replaced, on a thread of its own.
    Freeing one (its FAISS index mapped from the file, its BM25 arrays) takes 8-35 ms at 100,000
    questions; done by the search that used it last, it held up every request queued behind that
    search in a server's event loop (docs/benchmarks.md, "Serving while questions are added")."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Searcher | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="askalike-retired-searchers", daemon=True)
        self._thread.start()

    def put(self, searcher: Searcher) -> None:
        self._queue.put(searcher)

    def _run(self) -> None:
        stopping = False
        while not stopping:
            batch = [self._queue.get()]  # then whatever else waits: one grace for all of them
            while not self._queue.empty():
                batch.append(self._queue.get())
            stopping = None in batch
            if _close_each(batch):
                time.sleep(RETIRED_GRACE_S)
            del batch  # the last references, as a rule: their memory is freed here

    def stop(self) -> None:
        """Close what was put so far, then end the thread."""
        self._queue.put(None)
        self._thread.join()


class _Follower:
    """The thread that opens each new commit of a ``LiveSearcher``'s directory, below the
    searches' priority: when woken, and every ``FOLLOW_POLL_S`` otherwise."""

    def __init__(self, follow: Callable[[], bool]) -> None:
        self._follow = follow  # opens the newest state; False when it could not
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="askalike-state-follower", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        lower_thread_priority()
        while not self._stopping.is_set():
            self._wake.wait(FOLLOW_POLL_S)
            self._wake.clear()
            if self._stopping.is_set():
                break
            try:
                followed = self._follow()
            except Exception:  # never the end of following: the next look tries again
                log.exception("cannot follow the index's commits; trying again")
                followed = False
            if not followed:
                self._stopping.wait(FOLLOW_POLL_S)  # a state that failed: tried again later, not at once

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        self._thread.join()


class LiveSearcher:
    """The current ``Searcher`` of ``index_dir``; ``open_searcher(encoder)`` opens one (with the
    encoder of the first, so that a reload loads no model)."""

    def __init__(self, index_dir: Path, open_searcher: Callable[[Encoder | None], Searcher]) -> None:
        self.index_dir = index_dir
        self._open = open_searcher
        self._swap = threading.Lock()  # held briefly: to swap the current searcher, count its users
        self._reloading = threading.Lock()  # held by the one thread opening a new state
        self._states = _ReadWriteLock()
        self._state = manifest_state(index_dir)
        self._current = open_searcher(None)
        self._failed: ManifestState = None  # the last state that failed to open (logged once)
        self._closed = False  # set under _reloading: no state opens after close()
        self._users: dict[int, int] = {}  # id(searcher) -> searches running on it
        self._retired: dict[int, Searcher] = {}  # replaced, still searched
        self._closing = _RetiredSearchers()
        self._follower = _Follower(self._follow)

    @property
    def encoder(self) -> Encoder:
        return self._current.encoder

    @property
    def opened_state(self) -> ManifestState:
        """The manifest (inode, size, modification time) of the state open now."""
        return self._state

    def refresh(self, wait: bool = False) -> bool:
        """Open the committed state if the manifest changed since the current one was opened.
        While another thread opens it (or a write in this process is committing, which opens it
        when done), return at once (``wait``: wait for that thread, then open what is still
        newer). False when the new state could not be opened."""
        if manifest_state(self.index_dir) == self._state or not self._reloading.acquire(blocking=wait):
            return True
        try:
            return self._reopen()
        finally:
            self._reloading.release()

    @contextmanager
    def committing(self, exclusive: bool = False) -> Iterator[None]:
        """Held by a write in this process from its database commit until its new state is
        open, which it opens when the block ends (also when the block fails: the commit may have
        switched the manifest). Meanwhile searches answer from the state before, and no other
        thread opens the new state (the follower leaves it to the writer).
        ``exclusive`` (a write that changes stored text): no search of this process runs until
        then, so that none shows new text ranked by the old vector."""
        with self._reloading, self._states.writing() if exclusive else nullcontext():
            try:
                yield
            finally:
                self._reopen()

    def _reopen(self) -> bool:
        """``refresh``'s work, by the thread holding ``_reloading``."""
        state = manifest_state(self.index_dir)  # read before opening: never newer than what opens
        if state == self._state or self._closed:
            return True
        fresh = self._opened(state)
        if fresh is None:
            return False
        self._take(fresh, state)
        return True

    def _follow(self) -> bool:
        """The follower's opening of a new commit: outside ``_reloading``, so that no read or
        write of this process waits for work done below its priority; taken only where no other
        thread opened a state meanwhile (else closed unused). False when it could not open."""
        before, state = self._state, manifest_state(self.index_dir)
        if state == before or self._closed or self._reloading.locked():  # locked: a writer here opens it
            return True
        fresh = self._opened(state)
        if fresh is None:
            return False
        with self._reloading:
            taken = self._state == before and not self._closed
            if taken:
                self._take(fresh, state)
        if not taken:
            self._closing.put(fresh)  # the follower is stopped before the closing thread
        return True

    def _opened(self, state: ManifestState) -> Searcher | None:
        """A searcher of the committed state (``state``: its manifest as read before opening);
        None, the failure logged once a state, where it cannot be opened."""
        try:
            return self._open(self._current.encoder)
        except Exception:  # a long-running server keeps answering from the state it has
            if state != self._failed:  # tried again later: a state caught mid-write opens then
                log.exception("cannot open the index's new state; still answering from the one before")
            self._failed = state
            return None

    def _take(self, fresh: Searcher, state: ManifestState) -> None:
        with self._swap:
            old, self._current, self._state = self._current, fresh, state
            self._retire(old)

    def ready_now(self) -> bool:
        """Whether a search would start at once: no ``exclusive`` write under way (a glance: one
        may begin just after)."""
        return self._states.open_to_readers()

    def _retire(self, searcher: Searcher) -> None:
        """Close ``searcher`` now if no search uses it, else when its last search ends."""
        if self._users.get(id(searcher), 0):
            self._retired[id(searcher)] = searcher
        else:
            self._closing.put(searcher)

    @contextmanager
    def searching(self, latest: bool = False) -> Iterator[Searcher]:
        """The state open now, for one search; a newer commit wakes the follower, which opens
        it. ``latest``: the newest committed state, opened first where it is not yet (a read
        that names a question must find one just written by another process)."""
        # before reading(): an exclusive write holds _reloading while it waits for readers; a state
        # that failed to open is the follower's to try again
        if latest and manifest_state(self.index_dir) != self._failed:
            self.refresh(wait=True)
        with self._states.reading():
            if not latest and manifest_state(self.index_dir) != self._state:
                self._follower.wake()
            with self._swap:
                searcher = self._current
                self._users[id(searcher)] = self._users.get(id(searcher), 0) + 1
            try:
                yield searcher
            finally:
                with self._swap:
                    self._users[id(searcher)] -= 1
                    if not self._users[id(searcher)]:
                        del self._users[id(searcher)]
                        retired = self._retired.pop(id(searcher), None)
                        if retired is not None:
                            self._closing.put(retired)

    def close(self) -> None:
        self._follower.stop()
        with self._reloading:  # a write of this process that is committing opens its state first
            self._closed = True
        with self._swap:
            self._current.close()
            for searcher in self._retired.values():
                searcher.close()
            self._retired.clear()
        self._closing.stop()
