"""What every ``askalike`` command shares: the Typer apps, common options, one-line errors and
figure printing. Commands live in one module per area and register themselves here.

Start-up stays light: command modules import only typer, rich and the light modules of the
library (``train.errors``, ``train.data_dir``, ``train.model_io``, ``indexer.choices``) at the
top; each command imports the machinery it uses in its body.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from indexer.choices import DATABASE_ENV_VAR
from retrieval.fusion import SearchMode
from train.data_dir import DATA_ENV_VAR
from train.errors import UserError

app = typer.Typer(help="Find questions alike in meaning.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
eval_app = typer.Typer(help="Evaluate systems on the public benchmarks.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

stderr = Console(stderr=True)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar=DATA_ENV_VAR, show_envvar=True,
                 help="Dataset directory [default: ../shared/data beside the checkout]."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
ModelOption = Annotated[str, typer.Option("--model", help="A model directory or pretrained:NAME "
                                                          "(e.g. pretrained:all-MiniLM-L6-v2) "
                                                          "[default: the shipped models/accurate].",
                                          show_default=False)]





ModeOption = Annotated[SearchMode | None, typer.Option(
    "--mode", help="dense: by meaning (cosine); lexical: by words (BM25); hybrid: both fused "
                   "[default: hybrid when the model's tuned hybrid weight says words help, else dense].",
    show_default=False)]
IndexOption = Annotated[Path, typer.Option("--index", help="Index directory.")]
DatabaseOption = Annotated[
    str | None,
    typer.Option("--db", envvar=DATABASE_ENV_VAR, show_envvar=True,
                 help="Database URL (e.g. postgresql+psycopg://user@host/db) [default: SQLite in "
                      "the index directory, or the one the index was built with]."),
]

@contextmanager
def user_errors() -> Iterator[None]:
    """Report bad input as one line on stderr and exit 2, never as a traceback."""
    try:
        yield
    except UserError as err:
        stderr.print(f"[red]error:[/red] {escape(str(err))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None



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


def flatten(figures: dict, prefix: str = "") -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for name, value in figures.items():
        if isinstance(value, dict):
            rows += flatten(value, f"{prefix}{name}.")
        else:
            rows.append((f"{prefix}{name}", value))
    return rows


def similarity_bar(similarity: float, width: int = 10) -> str:
    """A 0-5 similarity as a bar of ``width`` cells."""
    filled = round(max(0.0, min(similarity, 5.0)) / 5.0 * width)
    return "█" * filled + "░" * (width - filled)
