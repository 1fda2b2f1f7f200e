"""What every ``askalike`` command shares: the Typer apps, common options, one-line errors and
figure printing. Commands live in one module per area and register themselves here.

Start-up stays light: command modules import only typer, rich and the light modules of the
library (``core.errors``, ``core.data_dir``, ``core.model_dir``, ``indexer.choices``,
``indexer.index_type_choice``) at the top; each command imports the machinery it uses in its body.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup, TyperOption

from app.safe_text import printable
from core.credentials import masked_text
from core.data_dir import DATA_ENV_VAR
from core.dates import DateOrder
from core.errors import UserError
from core.extras import require_training
from core.numbers import decimal, integer
from indexer.choices import DATABASE_ENV_VAR, INDEX_ENV_VAR
from retrieval.fusion import SearchMode

if TYPE_CHECKING:
    import click
    from rich.progress import Progress

    from retrieval.searcher import SearchResult



_UNDECODABLE = re.compile("[\ud800-\udfff]")


def markup_safe(text: object) -> str:
    """``printable(text)`` to put inside Rich markup: shown as it is, never read as markup."""
    return escape(printable(text))


def plain(text: object) -> Text:
    """``printable(text)`` as a Rich ``Text``: shown as it is, never read as markup."""
    return Text(printable(text))


def message_line(label: str, message: str, style: str = "red") -> Text:
    """``LABEL: MESSAGE`` in one line (for stderr), credentials hidden and control characters
    escaped."""
    return Text.assemble((f"{label}:", style), " ", printable(masked_text(message), keep=""))


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

stderr = Console(stderr=True)

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar=DATA_ENV_VAR, show_envvar=True, help="Dataset directory.",
                 show_default="../shared/data beside the checkout"),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON (every detail) instead of a summary.")]


def shipped_models(spec: str | list[str] | None) -> str | list[str] | None:
    """A ``--model`` callback: the shipped models by name (``fast``, ``accurate``) from any directory."""
    from core.model_dir import shipped_model

    if isinstance(spec, list):
        return [shipped_model(item) for item in spec]
    return None if spec is None else shipped_model(spec)


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


@contextmanager
def user_errors() -> Iterator[None]:
    """Report bad input as one line on stderr and exit 2, never as a traceback."""
    try:
        yield
    except UserError as err:
        for line in err.lines():
            stderr.print(message_line("error", line), highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def with_onnx_export(spec: str) -> str:
    """``spec``, once the encoder that queries run from it exists: a transformer saved without
    its ONNX export, or a ``pretrained:NAME`` peer on first use, is exported now (the one step of
    a query command that needs torch, once per model). Every command that takes ``--model``
    passes it through here before the library loads the encoder."""
    from core.loader import export_missing

    if export_missing(spec) is not None:
        require_training(f"exporting {spec} to ONNX (once, for queries)")
        from train.trained_model import export_once

        stderr.print(plain(f"exporting {spec} to ONNX (once; queries then run without torch)…"))
        export_once(spec)
    return spec


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


def progress_bars(enabled: bool = True) -> Progress:
    """Progress bars on stderr, so that stdout holds only results; off (``enabled`` False) in
    ``--json`` mode. Use as a context manager and add a task per long step."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeRemainingColumn(), console=stderr, disable=not enabled, transient=True)


@contextmanager
def steps_shown(enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner on stderr with the step under way and the time it has taken, for work without
    a count to show (fitting, loading); yields the function that names the next step."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=stderr, disable=not enabled, transient=True) as progress:
        task = progress.add_task("starting", total=None)
        yield lambda what: progress.update(task, description=what)


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


RESULT_FIELDS = ("id", "match", "subject", "excerpt", "category", "date", "source")  # --fields picks
DEFAULT_FIELDS = ("id", "match", "subject", "source")


def result_subject(result: SearchResult) -> str:
    """The subject (the excerpt where there is none), "≈ #N" before that of a near-duplicate of
    hit N, and "(+3 alike)" after that of a hit near-duplicates were folded into."""
    subject = printable(result.subject or result.excerpt, keep="")
    if result.duplicate_of is not None:
        subject = f"≈ #{result.duplicate_of}  {subject}"
    return f"{subject}  (+{len(result.alike)} alike)" if result.alike else subject


def metadata_text(value: Any) -> str:
    """A metadata value as one cell: text as it is, anything else (a list, a number) as JSON."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def result_value(result: SearchResult, field: str) -> str | float:
    """One field of a hit as plain text (CSV, TSV): the match as a fraction, the source's whole
    path; a field that is not one of RESULT_FIELDS is the metadata column of that name."""
    if field == "match":
        return round(result.match, 4)
    standard = {"id": result.external_id, "subject": result.subject, "excerpt": result.excerpt,
                "source": result.source}
    if field in standard:
        return printable(standard[field], keep="")
    return printable(metadata_text(result.metadata.get(field)), keep="")


def result_row(result: SearchResult, source_labels: Mapping[str, str],
               fields: tuple[str, ...] = DEFAULT_FIELDS, bar_width: int = 10) -> tuple[str, ...]:
    """A search hit as the cells of a table (the CLI's and the TUI's): its rank, then ``fields``;
    the match as a percentage and a bar, the source by its name (``Searcher.source_labels``: the
    file name, with its folder where two sources share one)."""
    cells = {"match": f"{result.match:>4.0%} {similarity_bar(result.match, bar_width)}",
             "subject": result_subject(result),
             "source": printable(source_labels.get(result.source, result.source), keep="")}
    return (str(result.rank), *(cells.get(field) or str(result_value(result, field)) for field in fields))


def question_markup(subject: str, body: str, metadata: dict[str, Any], facts: list[str]) -> str:
    """A whole question as Rich markup (``show``, the TUI): the subject, ``facts`` with every
    metadata field (``name value``) in one dim line, the body, and the comments where the source
    has them."""
    facts = [*facts, *(f"{name} {metadata_text(value)}" for name, value in metadata.items()
                       if name != "comments" and value not in (None, ""))]
    parts = [f"[b]{markup_safe(subject)}[/b]", f"[dim]{markup_safe(' · '.join(facts))}[/dim]", "",
             markup_safe(body)]
    comments = metadata.get("comments") or []
    if comments:
        parts += ["", f"[b]{len(comments)} comments[/b]"]
        for comment in comments:
            who = " · ".join(str(comment[k]) for k in ("username", "date") if comment.get(k))
            parts += [f"[dim]{markup_safe(who)}[/dim]", markup_safe(comment.get("text", "")), ""]
    return "\n".join(parts)
