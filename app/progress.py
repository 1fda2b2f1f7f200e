"""Progress on stderr, so that stdout holds only results: bars for counted work, a spinner for
steps without a count."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from askalike.app.output import stderr

if TYPE_CHECKING:
    from rich.progress import Progress


def progress_bars(enabled: bool = True) -> Progress:
    """Progress bars on stderr, so that stdout holds only results; off (``enabled`` False) in
    ``--json`` mode, and where stderr is no terminal (in a log file Rich draws no bar and would
    leave an empty line). Use as a context manager and add a task per long step."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=stderr, disable=not enabled or not stderr.is_terminal,
                    transient=True)


@contextmanager
def steps_shown(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr with the step under way and the time it has taken, for work without
    a count to show (fitting, loading); yields the function that names the next step."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=stderr, disable=not enabled or not stderr.is_terminal, transient=True) as progress:
        task = progress.add_task("starting", total=None)
        yield lambda what: progress.update(task, description=what)
