"""The error boundary of every command: a ``UserError`` as ``error:`` lines on stderr and exit 2."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.text import Text

from askalike.app.output import stderr
from askalike.app.safe_text import printable
from askalike.core.credentials import masked_text
from askalike.core.errors import UserError


def message_line(label: str, message: str, style: str = "red") -> Text:
    """``LABEL: MESSAGE`` in one line (for stderr), credentials hidden and control characters
    escaped."""
    return Text.assemble((f"{label}:", style), " ", printable(masked_text(message), keep=""))


@contextmanager
def user_errors() -> Iterator[None]:
    """Report bad input as one line on stderr and exit 2, never as a traceback."""
    try:
        yield
    except UserError as err:
        for line in err.lines():
            stderr.print(message_line("error", line), highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
