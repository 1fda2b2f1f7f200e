"""The ``askalike`` command line: a thin layer over the library packages."""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, TextIO

from askalike.app.commands import (  # noqa: F401 (register)
    calibrate,
    duplicates,
    evaluation,
    index,
    search,
    serve,
    train,
    tune,
    verdicts,
)
from askalike.app.errors import message_line
from askalike.app.options import app
from askalike.app.output import stderr

__all__ = ["app", "main"]


class OutputLost(Exception):
    """The results could not be written to stdout (a full disk, a closed pipe)."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error.strerror or str(error))
        self.error = error


class _GuardedStdout:
    """stdout whose write errors become ``OutputLost``: an ``OSError`` from the results' stream
    is told apart from one of the command's own files."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except OSError as err:
            raise OutputLost(err) from None

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError as err:
            raise OutputLost(err) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


def main() -> None:
    """Run the CLI. Results that cannot be written end the run in one line on stderr (exit 2),
    or silently for a reader that went away (``| head``: exit 1, as click does)."""
    sys.stdout = _GuardedStdout(sys.stdout)  # type: ignore[assignment]
    try:
        app()
    except OutputLost as lost:
        # what is still buffered goes nowhere, so that the exit's flush cannot fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stdout__.fileno())
        if lost.error.errno != errno.EPIPE:
            stderr.print(message_line("error", f"cannot write the output to stdout ({lost})"),
                         highlight=False, soft_wrap=True)
            sys.exit(2)
        sys.exit(1)
