"""The Typer apps every command registers with, their command classes, and the options commands
share.

Start-up stays light: command modules import only typer, rich and the light modules of the
library (``core.errors``, ``core.data_dir``, ``core.model_dir``, ``indexer.choices``,
``indexer.index_type_choice``) at the top; each command imports the machinery it uses in its body.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from askalike.app.errors import user_errors
from askalike.app.model_specs import shipped_models
from askalike.app.safe_text import printable
from askalike.core.data_dir import DATA_ENV_VAR
from askalike.core.dates import DateOrder
from askalike.core.errors import UserError
from askalike.core.numbers import decimal, integer
from askalike.indexer.choices import DATABASE_ENV_VAR, INDEX_ENV_VAR
from askalike.retrieval.fusion import SearchMode

if TYPE_CHECKING:
    import click


_UNDECODABLE = re.compile("[\ud800-\udfff]")


class NotUtf8Error(UserError):
    """A command-line text that is not UTF-8."""


def require_utf8(param: click.Parameter, value: object) -> None:
    """Refuse a text option or argument holding undecodable bytes (paths may: a file name is
    bytes, and is printed escaped)."""
    if getattr(param.type, "name", "") != "str":
        return
    for text in value if isinstance(value, list | tuple) else [value]:
        if isinstance(text, str) and _UNDECODABLE.search(text):
            name = param.opts[0] if isinstance(param, TyperOption) else param.human_readable_name.upper()
            raise NotUtf8Error(f"{name} '{printable(text)}' is not valid UTF-8: give it in UTF-8 "
                               "(check the terminal's or the script's encoding)")


# click's number types, by name (typer brings its own copy of click): what each reads with
_NUMBER_READERS: dict[str, Callable[[str], object]] = {
    "int": integer, "int range": integer, "integer": integer, "integer range": integer,
    "float": decimal, "float range": decimal}


def _plain_number(kind: Any) -> Any:
    """A copy of the click number type ``kind`` that takes only numbers written in decimal
    digits (``core.numbers``): not ``1_000``, ``nan`` or ``inf``, which Python's ``int`` and
    ``float`` would take. (A copy: click's ``INT`` is shared.)"""
    read, plain_kind = _NUMBER_READERS[kind.name], copy.copy(kind)

    def convert(value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and read(value) is None:
            plain_kind.fail(f"{value!r} is not a number written in decimal digits", param, ctx)
        return kind.convert(value, param, ctx)

    plain_kind.convert = convert
    return plain_kind


class _FlagsReadAsFlags:
    """``--help`` shows boolean flags as flags: no ``<bool>`` type after ``--json``; number
    options take numbers as people write them (``_plain_number``)."""

    def get_params(self, ctx: click.Context) -> list[click.Parameter]:
        params = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
                param.metavar = ""
            if getattr(param.type, "name", None) in _NUMBER_READERS:
                param.type = _plain_number(param.type)
        return params


class FlagsCommand(_FlagsReadAsFlags, TyperCommand):
    """A command whose text options and arguments are refused, in one line, when they are not
    UTF-8 (bytes the shell passed through, which Python keeps as lone surrogates)."""

    def invoke(self, ctx: click.Context) -> Any:
        with user_errors():
            for param in self.get_params(ctx):
                require_utf8(param, ctx.params.get(param.name or ""))
        return super().invoke(ctx)


class FlagsGroup(_FlagsReadAsFlags, TyperGroup):
    pass


class Typer(typer.Typer):
    """``typer.Typer`` whose groups and commands show boolean flags as flags, and whose help is
    click's plain text: typer's rich help imports markdown-it and its renderer, which made
    ``askalike --help`` take 0.31 s against 0.21 s (bench.runtime's target is 0.3 s)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cls=FlagsGroup, rich_markup_mode=None,
                         context_settings={"help_option_names": ["-h", "--help"]}, **kwargs)

    def command(self, *args: Any, cls: type[TyperCommand] | None = None, **kwargs: Any) -> Any:
        return super().command(*args, cls=cls or FlagsCommand, **kwargs)


app = Typer(help="Find questions alike in meaning.", no_args_is_help=True, pretty_exceptions_enable=False)
eval_app = Typer(help="Evaluate systems on the public benchmarks.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        typer.echo(f"askalike {version('askalike')}")
        raise typer.Exit


@app.callback()
def _askalike(version: Annotated[bool, typer.Option(
        "--version", callback=_print_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    """Find questions alike in meaning."""


DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar=DATA_ENV_VAR, show_envvar=True, help="Dataset directory.",
                 show_default="../shared/data beside the checkout"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (every detail) instead of a summary.")]

MODEL_HELP = "A model directory, fast or accurate (the shipped models), or pretrained:NAME."
ModelOption = Annotated[str, typer.Option("--model", help=MODEL_HELP + " (e.g. pretrained:all-MiniLM-L6-v2)",
                                          callback=shipped_models, show_default="accurate")]
ModeOption = Annotated[SearchMode | None, typer.Option(
    "--mode", help="dense: by meaning (cosine); lexical: by words (BM25); hybrid: both fused.",
    show_default="hybrid when the model's tuned hybrid weight says words help, else dense")]
IndexOption = Annotated[Path, typer.Option("--index", envvar=INDEX_ENV_VAR, show_envvar=True,
                                           help="Index directory.")]

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
