"""What every ``askalike`` command shares: the Typer apps, common options, one-line errors and
figure printing. Commands live in one module per area and register themselves here.

Start-up stays light: command modules import only typer, rich and the light modules of the
library (``core.errors``, ``core.data_dir``, ``core.model_dir``, ``indexer.choices``,
``indexer.tuning``) at the top; each command imports the machinery it uses in its body.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperCommand, TyperGroup, TyperOption

from core.data_dir import DATA_ENV_VAR
from core.dates import DateOrder
from core.errors import UserError
from indexer.choices import DATABASE_ENV_VAR
from retrieval.fusion import SearchMode

if TYPE_CHECKING:
    import click
    from rich.progress import Progress

    from retrieval.searcher import SearchResult



class _FlagsReadAsFlags:
    """``--help`` shows boolean flags as flags: no ``<bool>`` type after ``--json``."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
        return params


class FlagsCommand(_FlagsReadAsFlags, TyperCommand):
    pass


class FlagsGroup(_FlagsReadAsFlags, TyperGroup):
    pass


class Typer(typer.Typer):
    """``typer.Typer`` whose groups and commands show boolean flags as flags, and whose help is
    click's plain text: typer's rich help imports markdown-it and its renderer, which made
    ``askalike --help`` take 0.31 s against 0.21 s (bench.runtime's target is 0.3 s)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=FlagsGroup, rich_markup_mode=None, **kwargs)

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or FlagsCommand, **kwargs)


app = Typer(help="Find questions alike in meaning.", no_args_is_help=True, pretty_exceptions_enable=False)
eval_app = Typer(help="Evaluate systems on the public benchmarks.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

stderr = Console(stderr=True)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar=DATA_ENV_VAR, show_envvar=True, help="Dataset directory.",
                 show_default="../shared/data beside the checkout"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ModelOption = Annotated[str, typer.Option("--model", help="A model directory or pretrained:NAME "
                                                          "(e.g. pretrained:all-MiniLM-L6-v2).",
                                          show_default="the shipped models/accurate")]
ModeOption = Annotated[SearchMode | None, typer.Option(
    "--mode", help="dense: by meaning (cosine); lexical: by words (BM25); hybrid: both fused.",
    show_default="hybrid when the model's tuned hybrid weight says words help, else dense")]
IndexOption = Annotated[Path, typer.Option("--index", help="Index directory.")]
DateFormatOption = Annotated[DateOrder | None, typer.Option(
    "--date-format", help="How to read a date written in numbers only, such as 10/01/2024: dmy "
                          "(10 January) or mdy (1 October).",
    show_default="only when the day is above 12 or equals the month")]
DatabaseOption = Annotated[
    str | None,
    typer.Option("--db", envvar=DATABASE_ENV_VAR, show_envvar=True,
                 help="Database URL (e.g. postgresql+psycopg://user@host/db).",
                 show_default="SQLite in the index directory, or the one the index was built with"),
]


@contextmanager
def user_errors() -> Iterator[None]:
    """Report bad input as one line on stderr and exit 2, never as a traceback."""
    try:
        yield
    except UserError as err:
        stderr.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def exported(spec: str) -> str:
    """``spec``, once the encoder that queries run from it exists: a transformer saved without
    its ONNX export, or a ``pretrained:NAME`` peer on first use, is exported now (the one step of
    a query command that needs torch, once per model). Every command that takes ``--model``
    passes it through here before the library loads the encoder."""
    from core.loader import export_missing

    if export_missing(spec) is not None:
        from train.trained_model import export_once

        stderr.print(f"exporting {spec} to ONNX (once; queries then run without torch)…")
        export_once(spec)
    return spec


def print_figures(title: str, figures: dict, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(figures))
        return
    table = Table(title=title)
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in flatten(figures):
        table.add_row(name, f"{value:.4f}" if isinstance(value, float) else str(value))
    Console().print(table)


def progress_bars(enabled: bool = True) -> Progress:
    """Progress bars on stderr, so that stdout holds only results; off (``enabled`` False) in
    ``--json`` mode. Use as a context manager and add a task per long step."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=stderr, disable=not enabled, transient=True)


def flatten(figures: dict, prefix: str = "") -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for name, value in figures.items():
        if isinstance(value, dict):
            rows += flatten(value, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", value))
    return rows


def similarity_bar(fraction: float, width: int = 10) -> str:
    """A 0-1 figure (a search hit's match) as a bar of ``width`` cells."""
    filled = round(max(0.0, min(fraction, 1.0)) * width)
    return "█" * filled + "░" * (width - filled)


RESULT_COLUMNS = ("#", "match", "", "subject", "source")


def result_row(result: SearchResult, bar_width: int = 10) -> tuple[str, ...]:
    """A search hit as the cells of ``RESULT_COLUMNS``, for the CLI table and the TUI: the match
    as a percentage and a bar, and "≈ #N" before the subject of a near-duplicate of hit N."""
    subject = result.subject or result.excerpt
    if result.duplicate_of is not None:
        subject = f"≈ #{result.duplicate_of}  {subject}"
    return (str(result.rank), f"{result.match:>4.0%}", similarity_bar(result.match, bar_width), subject,
            Path(result.source).name)
