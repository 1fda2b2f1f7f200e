"""``askalike verdicts``: the verdicts people gave on pairs of questions (the search page's "same
question" and "different"), listed, or written as labelled pairs for ``askalike tune``."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from askalike.app.errors import user_errors
from askalike.app.options import DatabaseOption, IndexOption, JsonOption, app
from askalike.app.output import plain, stderr
from askalike.app.safe_text import json_line
from askalike.core.errors import UserError
from askalike.indexer.choices import DEFAULT_INDEX_DIR

if TYPE_CHECKING:
    from rich.table import Table

    from askalike.indexer.store import Verdict

PAIRS_SUFFIX = ".jsonl"  # what tune reads as written: a CSV's cells are escaped for spreadsheets


class PairsFileError(UserError):
    """An --out file that tune would not read as JSON Lines."""


@app.command("verdicts")
def verdicts(
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    out: Annotated[Path | None, typer.Option(
        help="Write the verdicts as labelled pairs for `askalike tune --pairs`: a .jsonl file of "
             "text_a, text_b, label (1 the same question, 0 different).")] = None,
    as_json: JsonOption = False,
) -> None:
    """List the verdicts given on pairs of questions (POST /verdicts: the search page's "same
    question" and "different"), the latest on each pair; --out writes them for `tune`."""
    from askalike.core.files import require_output_file, write_text_atomically
    from askalike.indexer.directory import recorded_verdicts

    with user_errors():
        if out is not None:  # before any work
            if out.suffix.lower() != PAIRS_SUFFIX:
                raise PairsFileError(f"--out {out}: give a {PAIRS_SUFFIX} file (JSON Lines, which "
                                     "tune reads exactly as written)")
            require_output_file(out)
        given = recorded_verdicts(index_dir, database)
        if out is not None:
            write_text_atomically(out, "".join(json_line(_pair(verdict)) + "\n" for verdict in given))
            stderr.print(plain(f"{_summary(given)}: written to {out} (askalike tune BASE --pairs {out} "
                               "--out DIR)"), highlight=False, soft_wrap=True)
            return
    if as_json:
        typer.echo("".join(json_line(verdict.as_json()) + "\n" for verdict in given), nl=False)
        return
    from rich.console import Console

    console = Console()
    if given:
        console.print(_table(given))
    console.print(plain(_summary(given)), highlight=False, soft_wrap=True)


def _pair(verdict: Verdict) -> dict[str, str | int]:
    """A verdict as a row of tune's pair files (``core.pair_files``)."""
    return {"text_a": verdict.first.text, "text_b": verdict.second.text, "label": int(verdict.same)}


def _summary(given: list[Verdict]) -> str:
    if not given:
        return "no verdicts yet (the search page's \"same question\" and \"different\" give them)"
    same = sum(verdict.same for verdict in given)
    return (f"{len(given):,} pair{'s' if len(given) > 1 else ''} judged: {same:,} the same question, "
            f"{len(given) - same:,} different")


def _table(given: list[Verdict]) -> Table:
    from rich.table import Table

    from askalike.indexer.source_identity import source_labels

    labels = source_labels({judged.source for verdict in given for judged in (verdict.first, verdict.second)})
    table = Table()
    for name in ("verdict", "first", "second", "given (UTC)"):
        table.add_column(name)
    for verdict in given:
        first, second = (f"{judged.external_id} ({labels[judged.source]})"
                         for judged in (verdict.first, verdict.second))
        table.add_row("same question" if verdict.same else "different", plain(first), plain(second),
                      verdict.recorded_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M"))
    return table
