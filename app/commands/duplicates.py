"""``askalike duplicates``: the near-duplicate groups of a collection, a thin layer over
``retrieval.collection_duplicates``."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from askalike.app.devices import DeviceOption, neighbour_search
from askalike.app.errors import user_errors
from askalike.app.hits import metadata_text
from askalike.app.options import DatabaseOption, DateFormatOption, IndexOption, app
from askalike.app.output import plain, stderr
from askalike.app.progress import progress_bars
from askalike.app.safe_text import SpreadsheetWriter, json_line
from askalike.core.devices import Device
from askalike.core.errors import UserError
from askalike.core.numbers import share
from askalike.indexer.choices import DEFAULT_INDEX_DIR

if TYPE_CHECKING:
    from rich.console import RenderableType

    from askalike.retrieval.collection_duplicates import DuplicateGroup, GroupMember

CSV_COLUMNS = ("group", "size", "position", "id", "source", "subject", "date", "match")


class GroupsFormat(StrEnum):
    """What `duplicates --format` writes (search has its own: `search.ResultsFormat`)."""

    table = "table"
    csv = "csv"
    json = "json"


class OutputFormatError(UserError):
    """An --out file whose format the options do not say."""


def _metadata_columns(members: Iterable[GroupMember]) -> list[str]:
    """The metadata columns the members show (``as_json``: a thread's comments left out), beyond
    the standard ones, sorted."""
    return sorted({key for member in members for key in member.as_json()["metadata"]} - set(CSV_COLUMNS))


def _csv_text(groups: list[DuplicateGroup]) -> str:
    """One row per question: its group's number and size, its place in the group (1: the most
    central), and the question, through ``SpreadsheetWriter``: control characters in the stored
    text as visible escapes (``\\x1b``, ``\\n``), as every command prints them, and a text that a
    spreadsheet would run as a formula prefixed with ``'``."""
    buffer = io.StringIO()
    writer = SpreadsheetWriter(buffer)
    extra = _metadata_columns(member for group in groups for member in group.members)
    writer.row([*CSV_COLUMNS, *extra])  # then every metadata column the questions have
    for number, group in enumerate(groups, start=1):
        for position, member in enumerate(group.members, start=1):
            row = member.as_json()
            writer.row([number, len(group.members), position,
                        *(row[key] for key in ("id", "source", "subject", "date")), row["match"],
                        *(metadata_text(row["metadata"].get(key)) for key in extra)])
    return buffer.getvalue()


def _json_text(groups: list[DuplicateGroup]) -> str:
    return "".join(json_line(group.as_json(number)) + "\n" for number, group in enumerate(groups, start=1))


def _group_table(number: int, group: DuplicateGroup, source_labels: Mapping[str, str]) -> RenderableType:
    from rich.table import Table

    questions = [member.question for member in group.members]
    dated = any(question.date for question in questions)  # a date column only where one is known
    extra = _metadata_columns(group.members)
    table = Table(title=plain(f"group {number}: {len(group.members)} questions"), title_justify="left")
    table.add_column("match", justify="right", no_wrap=True)
    table.add_column("id", no_wrap=True, overflow="fold")
    table.add_column("subject", ratio=3)
    table.add_column("source", ratio=1, no_wrap=True, overflow="ellipsis", max_width=24)
    if dated:
        table.add_column("date", no_wrap=True)
    for key in extra:  # the group's metadata columns, as CSV and JSON hold them
        table.add_column(plain(key), ratio=1, no_wrap=True, overflow="ellipsis", max_width=20)
    for member, question in zip(group.members, questions, strict=True):
        table.add_row(f"{member.match:>4.0%}", plain(question.external_id),
                      plain(question.subject or " ".join(question.body.split())[:120]),
                      plain(source_labels[question.source]), *([plain(question.date or "")] if dated else []),
                      *(plain(metadata_text(question.metadata.get(key))) for key in extra))
    return table


@app.command("duplicates")
def duplicates(
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    min_match: Annotated[str | None, typer.Option(
        "--min-match", help="How likely two questions must be to ask the same question to count as "
                            "duplicates (the match search shows), as 80% or 0.8.",
        show_default="50%")] = None,
    since: Annotated[str | None, typer.Option(
        help="Only the groups of questions dated on or after this date, each group whole (each "
             "compared with the whole collection): what a moderator runs daily.")] = None,
    date_format: DateFormatOption = None,
    neighbours: Annotated[int, typer.Option(
        "--neighbours", min=1, help="Nearest questions looked at first per question (more where "
                                    "all of them are duplicates): a speed setting.")] = 10,
    output_format: Annotated[GroupsFormat, typer.Option(
        "--format", help="table: one block per group; csv: one row per question; json: one group "
                         "a line.")] = GroupsFormat.table,
    out: Annotated[Path | None, typer.Option(help="Write the groups to this file instead of "
                                                  "stdout.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="The same as --format json.")] = False,
    device: DeviceOption = Device.auto,
) -> None:
    """List the groups of near-duplicate questions in the index, each around its centre.

    Each question's nearest neighbours come from the index (not all pairs, so it scales to
    100,000s of questions); the pairs whose match reaches --min-match (the index model's
    calibrated judgement that they ask the same question) are found, and each group is a centre
    and the questions judged the same as it: groups never chain (a like b, b like c, a unlike c).
    Duplicates are judged by meaning only, on the vectors stored with the index: no model is
    loaded, and BM25 plays no part (its scores have no scale that one threshold could mean)."""
    from askalike.core.files import require_output_file, write_text_atomically
    from askalike.indexer.directory import model_for_index, open_index
    from askalike.indexer.source_identity import source_labels
    from askalike.retrieval.collection_duplicates import duplicate_groups
    from askalike.retrieval.judgement import SAME_QUESTION, model_judge

    output_format = GroupsFormat.json if as_json else output_format
    with user_errors():
        threshold = SAME_QUESTION if min_match is None else share(min_match, zero_allowed=False)
        if out is not None:  # before any work
            file_format = _file_format(out, output_format)
            require_output_file(out)
        index = open_index(index_dir, database)
        try:
            judge = model_judge(model_for_index(index_dir, None, index.manifest.encoder))
            find = partial(duplicate_groups, index, judge, threshold, since, date_order=date_format,
                           neighbours=neighbours, search=neighbour_search(index, device))
            groups = find() if output_format is GroupsFormat.json else _with_progress_bar(find)
            labels = source_labels(index.store.source_names())
        finally:
            index.close()
        summary = _summary(groups, threshold, since)
        if out is not None:
            write_text_atomically(out, _csv_text(groups) if file_format is GroupsFormat.csv
                                  else _json_text(groups))
            stderr.print(plain(f"{summary}: written to {out}"), highlight=False, soft_wrap=True)
            return
    _print_groups(groups, output_format, summary, labels)


def _with_progress_bar(find: Callable[..., list[DuplicateGroup]]) -> list[DuplicateGroup]:
    """``find(on_progress=...)`` with a progress bar on stderr."""
    with progress_bars() as progress:
        task = progress.add_task("comparing questions", total=None)
        return find(on_progress=lambda done, total: progress.update(task, completed=done, total=total))


def _summary(groups: list[DuplicateGroup], threshold: float, since: str | None) -> str:
    """One line: how many groups and questions, at which match (and since when)."""
    condition = f"at {threshold * 100:.4g}% or more" + (f", dated {since} or later" if since else "")
    if not groups:
        return f"no near-duplicates {condition} (a lower --min-match finds looser ones)"
    return (f"{len(groups):,} group{'s' if len(groups) > 1 else ''} of near-duplicates, "
            f"{sum(len(g.members) for g in groups):,} questions, {condition}")


def _file_format(out: Path, output_format: GroupsFormat) -> GroupsFormat:
    """What --out is written as: --format csv or json, or for the table the file's suffix says."""
    if output_format is not GroupsFormat.table:
        return output_format
    by_suffix = {".csv": GroupsFormat.csv, ".json": GroupsFormat.json, ".jsonl": GroupsFormat.json}
    if out.suffix.lower() not in by_suffix:
        raise OutputFormatError(f"--out {out}: give --format csv or json (or a .csv or .json file)")
    return by_suffix[out.suffix.lower()]


def _print_groups(groups: list[DuplicateGroup], output_format: GroupsFormat, summary: str,
                  source_labels: Mapping[str, str]) -> None:
    if output_format is GroupsFormat.csv:
        typer.echo(_csv_text(groups), nl=False)
    elif output_format is GroupsFormat.json:
        typer.echo(_json_text(groups), nl=False)
    else:
        from rich.console import Console

        console = Console()
        for number, group in enumerate(groups, start=1):
            console.print(_group_table(number, group, source_labels))
        console.print(plain(summary), highlight=False, soft_wrap=True)
