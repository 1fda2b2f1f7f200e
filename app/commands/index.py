"""``askalike index``, ``index-info`` and ``check``: build, describe and verify an index."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated

import typer

from askalike.app.devices import DeviceOption, embedding_encoder
from askalike.app.errors import message_line, user_errors
from askalike.app.model_specs import shipped_models, with_onnx_export
from askalike.app.options import MODEL_HELP, DatabaseOption, DateFormatOption, IndexOption, JsonOption, app
from askalike.app.output import plain, print_lines, stderr
from askalike.app.safe_text import printable
from askalike.core.devices import Device, DeviceError
from askalike.indexer.choices import AUTO_INDEX_TYPE, DEFAULT_INDEX_DIR, Engine, OnError
from askalike.indexer.index_type_choice import AUTO_FLAT_MAX, AUTO_HNSW_MAX
from askalike.indexer.index_types import INDEX_TYPES

IndexType = typer.Option(
    "--index-type", help=f"FAISS index: {AUTO_INDEX_TYPE} (by the number of questions: flat up to "
                         f"{AUTO_FLAT_MAX:,}, hnsw up to {AUTO_HNSW_MAX:,}, ivfpq above), "
                         + "; ".join(f"{kind.name} ({kind.summary})" for kind in INDEX_TYPES.values()) + ".",
    show_default=f"the index's own; {AUTO_INDEX_TYPE} for a new index")


@app.command("index")
def index(
    sources: Annotated[list[Path] | None, typer.Argument(
        help="Question files: .jsonl, .csv, .tsv (columns id, subject or title or question or text, body, "
             "any metadata), .txt (one question a line) or SemEval CQA .xml. None: an existing index "
             "is only brought up to date, e.g. with --model NEWPATH when its model directory moved.",
        show_default=False)] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help=MODEL_HELP, callback=shipped_models,
        show_default="the index's own; for a new index accurate")] = None,
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    index_type: Annotated[str | None, IndexType] = None,
    prune: Annotated[bool, typer.Option("--prune", help="Remove stored questions that are in none of the "
                                             "SOURCES.")] = False,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", help="Confirm a --prune that removes more than half of the index (asked "
                            "when interactive, refused otherwise).")] = False,
    date_format: DateFormatOption = None,
    readmit: Annotated[bool, typer.Option(
        "--readmit", help="Index again the questions of SOURCES that were deleted with "
                          "`delete --exclude`.")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Say what the run would add, re-embed and (with --prune) remove, and "
                          "change nothing.")] = False,
    on_error: Annotated[OnError, typer.Option(help="On bad rows: stop before storing anything (naming "
                                                   "every bad row, the first 20 in full), or skip them "
                                                   "and go on.")] = OnError.stop,
    id_column: Annotated[str | None, typer.Option(
        "--id-column", help="The column (JSON key) holding each question's id.",
        show_default="id; a CSV/TSV file without it: ids made from each question's text")] = None,
    text_columns: Annotated[list[str] | None, typer.Option(
        "--text-column", help="A column holding question text; repeat it for several: the first is "
                              "the subject, the others are joined as the body.",
        show_default="the first of subject, title, question, text; and body")] = None,
    metadata_columns: Annotated[list[str] | None, typer.Option(
        "--metadata-column", help="A column to keep as metadata (e.g. category, date); repeat it "
                                  "for several.", show_default="every other column")] = None,
    date_column: Annotated[str | None, typer.Option(
        "--date-column", help="The column (JSON key) holding each question's date, which --since "
                              "and --until filter on (read by --date-format).",
        show_default="date")] = None,
    category_column: Annotated[str | None, typer.Option(
        "--category-column", help="The column (JSON key) holding each question's category, which "
                                  "--category filters on.", show_default="category")] = None,
    replace_source: Annotated[str | None, typer.Option(
        "--replace", metavar="OLD", help="The one SOURCE takes the place of the indexed source OLD "
                                         "(file name or path), e.g. this week's export under a new "
                                         "name: unchanged questions are kept, edited ones embedded "
                                         "again, those it lacks removed; the source is then named "
                                         "as SOURCE.")] = None,
    batch_size: Annotated[int, typer.Option(min=1, help="Questions per encoder batch.")] = 256,
    commit_every: Annotated[int, typer.Option(min=1, help="Questions per database transaction: "
                                                          "the most an interrupt can cost.")] = 2048,
    threads: Annotated[int | None, typer.Option(min=1, help="CPU threads for the encoder and FAISS "
                                                            "(with --engine ray: of each Ray task).",
                                                show_default="all; 1 a Ray task")] = None,
    engine: Annotated[Engine, typer.Option(
        help="Where to embed: in this process, or in Ray tasks on a Ray cluster (the optional "
             "extra ray); both store the same vectors.")] = Engine.in_process,
    ray_address: Annotated[str | None, typer.Option(
        help="--engine ray: the cluster to join, HOST:PORT of its head (`ray start --head`).",
        show_default="$RAY_ADDRESS, else a cluster started on this machine, else a local Ray for "
                     "the run")] = None,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
) -> None:
    """Index question collections: new and changed questions are embedded, the rest kept."""
    from dataclasses import asdict

    from askalike.app.summaries import index_summary
    from askalike.indexer.build import IndexOptions, index_sources, plan_sources
    from askalike.indexer.sources import Columns

    if threads is not None:
        import faiss

        faiss.omp_set_num_threads(threads)
    if engine is Engine.ray and device is Device.cuda:
        with user_errors():
            raise DeviceError("--device cuda embeds in this process; --engine ray embeds on the "
                              "cluster's CPUs: leave one of them out")
    loader = None if engine is Engine.ray else partial(embedding_encoder, device=device, threads=threads)
    options = IndexOptions(index_type=index_type, on_error=on_error, prune=prune, batch_size=batch_size,
                           commit_every=commit_every, show_progress=not as_json, threads=threads,
                           encoder_loader=loader,
                           engine=engine, ray_address=ray_address, date_order=date_format,
                           confirm_prune=_prune_confirmation(yes), readmit=readmit,
                           replaces=replace_source,
                           columns=Columns(id_column, tuple(text_columns or ()),
                                           tuple(metadata_columns) if metadata_columns else None,
                                           **({"date": date_column} if date_column else {}),
                                           **({"category": category_column} if category_column else {})))
    with user_errors():
        spec = model and with_onnx_export(model)
        try:
            report = (plan_sources(index_dir, sources or [], database, options, spec) if dry_run
                      else index_sources(index_dir, sources or [], spec, database, options))
        except KeyboardInterrupt:  # Ctrl-C: what the run kept, and how it goes on
            if not dry_run:
                stderr.print(plain(INTERRUPTED), highlight=False, soft_wrap=True)
            raise typer.Exit(130) from None
    for problem in report.skipped:
        stderr.print(message_line("skipped", problem, "yellow"), highlight=False, soft_wrap=True)
    for warning in report.warnings:
        stderr.print(message_line("warning", warning, "yellow"), highlight=False, soft_wrap=True)
    if report.model_moved_from:
        stderr.print(plain(f"the index's model is now {report.model} (the same weights; recorded "
                           f"before at {report.model_moved_from})"), highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps({**asdict(report), "skipped": len(report.skipped),
                               "questions_per_s": round(report.questions_per_s, 1)}))
        return
    for question in report.would_remove:
        typer.echo(printable(f"would remove {question}", keep=""))
    print_lines(index_summary(report))


INTERRUPTED = ("interrupted: the questions embedded so far are stored (--commit-every at a time); run "
               "the same command to go on from there. Searches do not see this run's questions until "
               "it ends. (Exiting once the chunk being encoded is done.)")


def _prune_confirmation(yes: bool) -> Callable[[str], bool] | None:
    """What confirms a large prune: --yes, else the user at a terminal, else nobody (refused)."""
    if yes:
        return lambda _: True
    if sys.stdin.isatty():
        return lambda question: typer.confirm(question, err=True)
    return None


@app.command("delete")
def delete(
    ids: Annotated[list[str], typer.Argument(help="The ids of the questions, as in your source files.")],
    source: Annotated[str | None, typer.Option(help="Only from this source (file name or path), for "
                                                    "an id that several sources use.")] = None,
    exclude: Annotated[bool, typer.Option(
        "--exclude", help="Keep them out of later index runs of their source file (without it, "
                          "indexing a file that still holds them adds them again).")] = False,
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    as_json: JsonOption = False,
) -> None:
    """Remove questions from the index by their ids; all or nothing. Indexing their source file
    again adds them back while it holds them, unless they are deleted with --exclude."""
    from askalike.app.summaries import delete_summary
    from askalike.indexer.build import delete_questions

    with user_errors():
        removed = delete_questions(index_dir, ids, source, database, exclude)
    if as_json:
        typer.echo(json.dumps({"deleted": removed, "excluded": removed if exclude else 0}))
    else:
        print_lines(delete_summary(str(index_dir), removed, exclude))


@app.command("index-info")
def index_info_command(index_dir: IndexOption = DEFAULT_INDEX_DIR, database: DatabaseOption = None,
                       as_json: JsonOption = False) -> None:
    """Counts, model, index type and size on disk of an index."""
    from askalike.app.summaries import info_summary
    from askalike.indexer.directory import index_info

    with user_errors():
        info = index_info(index_dir, database)
    if as_json:
        typer.echo(json.dumps(info))
    else:
        print_lines(info_summary(info))


@app.command("check")
def check(
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    repair: Annotated[bool, typer.Option(
        "--repair", help="Rebuild the FAISS and BM25 files from the database's vectors, once those "
                         "it cannot trust (damaged, or not their question's) are embedded again "
                         "from their text (only they are), and upgrade an older database.")] = False,
    deep: Annotated[bool, typer.Option(
        "--deep", help="Also embed a sample of the questions again with the index's model and "
                       "compare with their stored vectors (loads the model; seconds).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Verify that the database's vectors are sound and their questions' (their text's content
    hash, the FAISS file's copies) and that the FAISS and BM25 files agree with it; exit 1 when
    they do not."""
    from askalike.indexer.directory import check_index, repair_index

    with user_errors():
        reembedded = repair_index(index_dir, database, deep).reembedded if repair else 0
        report = check_index(index_dir, database, deep)
    figures = {"index": report.index, "ok": report.ok, "questions": report.questions,
               "vectors": report.vectors, "damaged": report.damaged, "mismatched": report.mismatched,
               "deep_checked": report.deep_checked, "reembedded": reembedded,
               "problems": report.problems, "repair": report.repair}
    if as_json:
        typer.echo(json.dumps(figures))
    else:
        for problem in report.problems:
            stderr.print(message_line("problem", problem), highlight=False, soft_wrap=True)
        for label, vectors in (("damaged vector", report.damaged), ("not its question's", report.mismatched)):
            for vector in vectors:
                stderr.print(message_line(label, vector), highlight=False, soft_wrap=True)
        if reembedded:
            typer.echo(f"embedded {reembedded:,} vectors again from their text")
        if deep:
            typer.echo(f"embedded {report.deep_checked:,} questions again to compare: "
                       + ("each matches its stored vector" if not report.mismatched else "see above"))
        verdict = "consistent" if report.ok else f"NOT consistent; repair with `{report.repair}`"
        typer.echo(printable(f"{report.index}: {report.questions:,} questions, {report.vectors:,} "
                             f"vectors: {verdict}"))
    if not report.ok:
        raise typer.Exit(1)
