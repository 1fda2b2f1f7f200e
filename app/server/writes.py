"""The thread that runs a server process's writes, one at a time, at a lower scheduling priority
than its searches.

A write of 100 questions keeps a core busy for a tenth of a second or more (embedding, commit,
files, the new state); on a machine whose cores the searches share, a search that waited for
it was the slowest of a run. The writes' thread runs at ``WRITE_NICENESS`` (Linux schedules each
thread on its own), so the searches of every worker get the cores first and the writes take
what is left: at 100,000 questions, 2 workers and a writer adding back to back, p99 35-44 ms
against 49-67 ms at the same priority (docs/benchmarks.md, "Serving while questions are added:
the added FAISS file"). Elsewhere the thread runs as any other.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

WRITE_NICENESS = 10  # added to the process's: a tenth or so of a search thread's share when both want a core
T = TypeVar("T")


def _lower_this_threads_priority() -> None:
    if sys.platform == "linux":  # elsewhere PRIO_PROCESS with a thread's id is not that thread
        current = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), min(current + WRITE_NICENESS, 19))


class Writes:
    """Runs each write on the one writes' thread and waits for it (an exception is raised here)."""

    def __init__(self) -> None:
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="askalike-writes",
                                          initializer=_lower_this_threads_priority)

    def run(self, write: Callable[[], T]) -> T:
        return self._thread.submit(write).result()

    def close(self) -> None:
        self._thread.shutdown()
