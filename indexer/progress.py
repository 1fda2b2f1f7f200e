"""The progress bars of an index run: done of total, rate and time left. On stderr and cleared
when done, as the CLI's other bars (``app.progress.progress_bars``): stdout holds only the results,
and the run's report says what was done."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class _Rate(ProgressColumn):
    """Items a second (rich's estimate over the last 30 s), in the task's ``unit``."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:,.0f} {task.fields.get('unit', 'items')}/s" if task.speed else "")


def index_progress(enabled: bool) -> Progress:
    """Bars on stderr where it is a terminal: in a log file Rich draws none and would leave an
    empty line for each."""
    console = Console(stderr=True)
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), _Rate(),
                    TimeRemainingColumn(), console=console, transient=True,
                    disable=not enabled or not console.is_terminal)
