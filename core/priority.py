"""Work that no request waits for, run below the priority of the work requests wait for.

A server's searches and its writes share the machine's cores: a write's embedding and files, or
a new state's opening, take a core for tens of milliseconds each, and searches queued meanwhile
wait for them. A thread that lowers its own priority lets the scheduler run searches first when
the cores are busy, and takes the whole of a core when they are not. Its priority can only be
lowered (raising it back needs privileges), so such work gets a thread of its own.
"""

from __future__ import annotations

import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

# how far below its process such a thread runs (Linux niceness: +10 gets about a tenth of a core's
# time from the scheduler while threads at the process's priority want the core)
BACKGROUND_NICENESS = 10


def lower_thread_priority(steps: int = BACKGROUND_NICENESS) -> bool:
    """Run the calling thread ``steps`` of niceness below where it runs now; whether that was
    done (Linux gives each thread its own; elsewhere, or where refused, nothing changes)."""
    if not sys.platform.startswith("linux"):  # elsewhere PRIO_PROCESS with a thread id names a process
        return False
    thread = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + steps)
    except OSError:
        return False
    return True


def background_executor(name: str) -> ThreadPoolExecutor:
    """One thread, below its process's priority, that runs what it is given in turn."""
    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=lower_thread_priority)
