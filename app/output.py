"""What commands print: Rich's console on stderr, text shown as it is (never read as markup, control
characters escaped), a report's figures as a table and a summary's lines."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from askalike.app.safe_text import printable

# a message is one line however long (a terminal wraps it itself; a log file keeps it whole,
# where Rich would break it at 80 columns)
stderr = Console(stderr=True, soft_wrap=True)


def markup_safe(text: object) -> str:
    """``printable(text)`` to put inside Rich markup: shown as it is, never read as markup."""
    return escape(printable(text))


def plain(text: object) -> Text:
    """``printable(text)`` as a Rich ``Text``: shown as it is, never read as markup."""
    return Text(printable(text))


def print_figures(title: str, figures: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(figures))
        return
    table = Table(title=plain(title))
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in flatten(figures):
        table.add_row(plain(name), plain(f"{value:.4f}" if isinstance(value, float) else value))
    Console().print(table)


def print_lines(lines: list[str]) -> None:
    """A summary's lines on stdout, control characters escaped."""
    for line in lines:
        typer.echo(printable(line, keep=""))


def flatten(figures: dict, prefix: str = "") -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for name, value in figures.items():
        if isinstance(value, dict):
            rows += flatten(value, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", value))
    return rows
