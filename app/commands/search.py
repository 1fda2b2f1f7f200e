"""``askalike search``, ``show``, ``rerank``, ``similar`` and ``tui``: thin layers over ``retrieval``."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.text import Text

from askalike.app.errors import user_errors
from askalike.app.hits import DEFAULT_FIELDS, RESULT_FIELDS, question_markup, result_row, result_value
from askalike.app.model_specs import with_onnx_export
from askalike.app.options import (
    DatabaseOption,
    DateFormatOption,
    IndexOption,
    JsonOption,
    ModelOption,
    ModeOption,
    app,
)
from askalike.app.output import plain, print_lines
from askalike.app.progress import progress_bars
from askalike.app.safe_text import json_line
from askalike.core.errors import UserError
from askalike.core.model_dir import DEFAULT_MODEL
from askalike.core.numbers import share
from askalike.indexer.choices import DEFAULT_INDEX_DIR
from askalike.indexer.index_types import SEARCH_OPTIONS, types_with_setting
from askalike.retrieval.fusion import SearchMode

if TYPE_CHECKING:
    from rich.table import Table

    from askalike.retrieval.searcher import SearchResult, SearchSettings

WhereOption = Annotated[list[str] | None, typer.Option(
    "--where", metavar="KEY=VALUE", help="Only questions whose metadata column KEY is VALUE (any "
                                         "case), e.g. team=Billing; repeatable: one KEY's values "
                                         "are alternatives, different KEYs all apply.")]

# the index types each setting applies to, and its option's name, come from the registry
EfSearchOption = Annotated[int | None, typer.Option(
    SEARCH_OPTIONS["ef_search"], min=1,
    help=f"{types_with_setting('ef_search')} indexes: candidates a search keeps for the best 10 (higher: "
         "more exact, slower); raised as needed for a larger -k and for filters.",
    show_default="as the index was built; see index-info")]
NprobeOption = Annotated[int | None, typer.Option(
    SEARCH_OPTIONS["probes"], min=1,
    help=f"{types_with_setting('probes')} indexes: lists a search reads for the best 10 (higher: "
         "more exact, slower); raised as needed for a larger -k and for filters.",
    show_default="as the index was built; see index-info")]
KFactorOption = Annotated[int | None, typer.Option(
    SEARCH_OPTIONS["k_factor"], min=1,
    help=f"{types_with_setting('k_factor')} indexes: candidates per result re-scored on the stored fp16 "
         "vectors (higher: more exact, slower).",
    show_default="as the index was built; see index-info")]


def _search_settings(ef_search: int | None, nprobe: int | None, k_factor: int | None) -> SearchSettings:
    from askalike.retrieval.searcher import SearchSettings

    return SearchSettings(ef_search=ef_search, probes=nprobe, k_factor=k_factor)


def _queries(query: str | None) -> list[str]:
    """QUERY, or the queries piped in, one a line (UTF-8: a line that is not is refused)."""
    if query is not None and query != "-":
        return [query]
    if sys.stdin.isatty():
        raise typer.BadParameter("give a QUERY, or pipe queries in, one a line")
    from askalike.core.datasets import decoded_lines

    with user_errors():
        return [line.strip() for _, line in decoded_lines("stdin", sys.stdin.buffer) if line.strip()]


class ResultsFormat(StrEnum):
    table = "table"
    json = "json"  # one line per search: retrieval.results.search_payload
    csv = "csv"
    tsv = "tsv"


def _fields(text: str | None) -> tuple[str, ...]:
    """--fields as a tuple of names (comma-separated, in the order given): RESULT_FIELDS and
    metadata columns, which ``Searcher.require_fields`` checks once the index is open."""
    if text is None:
        return DEFAULT_FIELDS
    fields = tuple(name.strip().lower() for name in text.split(",") if name.strip())
    if not fields:
        raise typer.BadParameter(f"none given: pick from {', '.join(RESULT_FIELDS)} or a metadata "
                                 "column", param_hint="--fields")
    return fields


@dataclass(frozen=True)
class Answered:
    """One search as run: what it asked (a query, or "more like" a question), its mode, the hits
    the searcher found and those shown."""

    label: str  # the query, or "like ID" (CSV and TSV)
    why_nothing: str  # why a filtered search found nothing (Searcher.why_nothing)
    heading: str  # “the query”, or more like ID “its subject” (the table)
    payload: dict[str, Any]
    found: int  # hits before --min-match and --collapse
    shown: list[SearchResult]
    source_labels: dict[str, str]  # the sources as the table names them (Searcher.source_labels)


def _nothing_shown(answered: Answered, filtered: bool, min_match: float) -> str:
    """Why a search shows no hit, in words."""
    if answered.found:
        return f"no hit reaches --min-match {min_match:.0%}"
    if filtered:
        return answered.why_nothing
    if answered.payload["mode"] == SearchMode.lexical:
        return "no question holds a word of the query (lexical mode: try --mode dense)"
    return "no results"


def _results_table(answered: Answered, fields: tuple[str, ...]) -> Table:
    from rich.table import Table

    table = Table(title=plain(f"{answered.heading} · {answered.payload['mode']}"), title_justify="left",
                  expand=False)
    table.add_column("#", justify="right", no_wrap=True)
    for name in fields:
        if name in ("subject", "excerpt"):
            table.add_column(name, ratio=3)
        elif name == "source":
            table.add_column(name, ratio=1, no_wrap=True, overflow="ellipsis", max_width=24)
        else:
            table.add_column(name, justify="right" if name == "match" else "left", no_wrap=True)
    for result in answered.shown:
        table.add_row(*map(Text, result_row(result, answered.source_labels, fields)))
    return table


def _write_rows(answers: list[Answered], fields: tuple[str, ...], delimiter: str) -> None:
    """CSV or TSV on stdout: a header, then a row per hit with the search it answers."""
    from askalike.app.safe_text import SpreadsheetWriter

    writer = SpreadsheetWriter(sys.stdout, delimiter)
    writer.row(["search", "rank", *fields])
    for answered in answers:
        for result in answered.shown:
            writer.row([answered.label, result.rank, *(result_value(result, field) for field in fields)])


def _print_answers(answers: list[Answered], output: ResultsFormat, fields: tuple[str, ...],
                   filtered: bool, min_match: float) -> None:
    if output == ResultsFormat.json:
        for answered in answers:
            typer.echo(json_line(answered.payload))
        return
    if output in (ResultsFormat.csv, ResultsFormat.tsv):
        _write_rows(answers, fields, "," if output == ResultsFormat.csv else "\t")
        return
    from rich.console import Console

    console = Console()
    for answered in answers:
        if answered.shown:
            console.print(_results_table(answered, fields))
        else:
            console.print(plain(f"{answered.heading} · {answered.payload['mode']}: "
                                f"{_nothing_shown(answered, filtered, min_match)}"))


@app.command("search")
def search(
    query: Annotated[str | None, typer.Argument(help="What to look for; '-' or nothing reads "
                                                     "queries from stdin, one a line.")] = None,
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    k: Annotated[int, typer.Option("-k", "--top", min=1, help="Results per query.")] = 10,
    like: Annotated[str | None, typer.Option(
        "--like", help="More like this: the questions most alike to the one with this id (as "
                       "`show` takes it) instead of a query; by meaning.")] = None,
    min_match: Annotated[str | None, typer.Option(
        "--min-match", help="Leave out hits whose match (how likely a hit asks the same question) "
                            "is below this: 50% or 0.5 (a number without % is a fraction: 1 is "
                            "100%).", show_default="0: every hit")] = None,
    collapse: Annotated[bool, typer.Option(
        "--collapse", help="Fold the hits judged the same question as a better hit (a match of "
                           "50% or more between the two) into it, shown as \"(+N alike)\".")] = False,
    fields: Annotated[str | None, typer.Option(
        "--fields", help="Columns of the table, CSV and TSV, comma-separated, from: "
                         f"{', '.join(RESULT_FIELDS)}.",
        show_default=",".join(DEFAULT_FIELDS))] = None,
    output: Annotated[ResultsFormat, typer.Option(
        "--format", help="table; json (one line per query, as --json); csv or tsv (a row per hit).")]
        = ResultsFormat.table,
    source: Annotated[list[str] | None, typer.Option(help="Only this source (path or file "
                                                          "name); repeatable. With --like, also "
                                                          "where its id is looked up.")] = None,
    category: Annotated[list[str] | None, typer.Option(help="Only this category (any case); "
                                                            "repeatable.")] = None,
    where: WhereOption = None,
    since: Annotated[str | None, typer.Option(help="Only questions dated on or after this date "
                                                   "(YYYY-MM-DD, or with a time; in UTC; as the "
                                                   "index's --date-format reads it).")] = None,
    until: Annotated[str | None, typer.Option(help="Only questions dated on or before this date "
                                                   "(a day includes all of it).")] = None,
    date_format: DateFormatOption = None,
    mode: ModeOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
    k_factor: KFactorOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines: one line per query, "
                                                         "its hits inside (--format json).")] = False,
) -> None:
    """Search an index by meaning, by words or both; or (--like ID) for more like a question.

    The table shows each hit's id (what `show` and `delete` take) and its match: how likely it
    asks the same question, from the two vectors' cosine in every mode (lexical and hybrid rank by
    their own scores, so there a lower hit may show a higher match)."""
    from askalike.retrieval.results import Shown
    from askalike.retrieval.searcher import Searcher, where_filters

    if like is not None and query is not None:
        raise typer.BadParameter("give a QUERY or --like ID, not both", param_hint="--like")
    if like is not None and mode not in (None, SearchMode.dense):
        raise typer.BadParameter("--like searches by meaning: leave out --mode", param_hint="--mode")
    columns = _fields(fields)
    queries = [] if like is not None else _queries(query)
    settings = _search_settings(ef_search, nprobe, k_factor)
    with user_errors():
        shown = Shown(k, collapse=collapse) if min_match is None else Shown(k, share(min_match), collapse)
        where_filters(where or ())  # refused before the model loads
    with user_errors(), Searcher(index_dir, database, settings=settings) as searcher:
        filters = searcher.filters(source or (), category or (), since, until, date_format, where or ())
        # category and date are always accepted: empty where a question has none
        searcher.require_fields({"--fields": [name for name in columns if name not in RESULT_FIELDS],
                                 "--where": [key for key, _ in filters.where]},
                                also={"--fields": RESULT_FIELDS})
        why = searcher.why_nothing(filters) if filters else ""
        if like is not None:
            liked = searcher.question(like, tuple(source or ()))
            searches = [(f"like {liked.external_id}", f"more like {liked.external_id} “{liked.subject}”",
                         shown.like(searcher, liked, filters))]
        else:
            searches = [(text, f"“{text}”", answer)
                        for text, answer in zip(queries, shown.search(searcher, queries, filters, mode),
                                                strict=True)]
        answers = [Answered(label, why, heading, answer.payload(), answer.found, answer.hits,
                            searcher.source_labels) for label, heading, answer in searches]
    for answered in answers:
        if filters and not answered.found:
            answered.payload["why"] = why
    _print_answers(answers, ResultsFormat.json if as_json else output, columns, bool(filters),
                   shown.min_match)


@app.command("show")
def show(
    question_id: Annotated[str, typer.Argument(metavar="ID", help="The question's id in your "
                                                                  "collection, as search shows it.")],
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    source: Annotated[str | None, typer.Option(help="The source the id is from (path or file "
                                                    "name), where several have it.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Show a whole question: subject, body, metadata and comments."""
    from rich.console import Console

    from askalike.indexer.directory import open_index
    from askalike.indexer.source_identity import source_labels
    from askalike.retrieval.searcher import find_question

    with user_errors():
        index = open_index(index_dir, database)
        try:
            question = find_question(index, question_id, () if source is None else (source,))
            label = source_labels(index.store.source_names())[question.source]
        finally:
            index.close()
    if as_json:
        typer.echo(json_line({"id": question.external_id, "source": question.source,
                              "subject": question.subject, "body": question.body,
                              "metadata": question.metadata}))
        return
    facts = [f"id {question.external_id}", f"source {label}"]
    Console().print(question_markup(question.subject, question.body, question.metadata, facts))


@app.command("rerank")
def rerank(
    input_file: Annotated[Path, typer.Argument(help="SemEval CQA input: XML or reconstructed "
                                                    "JSONL (original questions with their related).")],
    out: Annotated[Path, typer.Option(help="Prediction file in the official format.")],
    model: ModelOption = DEFAULT_MODEL,
    trec: Annotated[Path | None, typer.Option(help="Also write a TREC run file.")] = None,
    gold: Annotated[Path | None, typer.Option(help="Gold .relevancy file: report MAP, AvgRec "
                                                   "and MRR.")] = None,
    mode: ModeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Rerank each original question's related questions by cosine, BM25 or both (batch,
    SemEval format).

    The prediction file ranks; it does not classify: its label column is true for every
    candidate, as the format needs a label. The report (with --gold) therefore gives the ranking
    figures only (MAP, AvgRec, MRR), not P/R/F1/Acc."""
    from askalike.app.summaries import rerank_summary
    from askalike.core.cqa_questions import read_cqa_questions
    from askalike.core.files import require_output_file
    from askalike.retrieval.cqa import predictions_from_scores, ranking_summary
    from askalike.retrieval.cqa_runs import read_cqa_run, write_cqa_run
    from askalike.retrieval.reranker import Reranker, write_trec_run
    from askalike.retrieval.scorer import score_run

    with user_errors(), progress_bars(enabled=not as_json) as progress:
        for path in (out, trec):
            if path is not None:
                require_output_file(path)
        questions = list(read_cqa_questions(input_file))
        reranker = Reranker.for_model(with_onnx_export(model), mode)
        task = progress.add_task("reranking", total=len(questions))
        scores = reranker.scores(questions, on_progress=lambda n: progress.advance(task, n))
        predictions = predictions_from_scores(questions, scores)
        write_cqa_run(out, predictions)
        if trec is not None:
            write_trec_run(trec, questions, scores, run_name=Path(model).name)
        ranking = {} if gold is None else ranking_summary(score_run(read_cqa_run(gold, "gold"), predictions))
    summary = {"questions": len(questions), "predictions": len(predictions), "out": str(out),
               "mode": str(reranker.mode), **ranking}
    if as_json:
        typer.echo(json_line(summary))
    else:
        print_lines(rerank_summary(summary, model))


@app.command("similar")
def similar(
    first: Annotated[str, typer.Argument(help="A text.")],
    second: Annotated[str, typer.Argument(help="Another text.")],
    model: ModelOption = DEFAULT_MODEL,
    sts_scale: Annotated[bool, typer.Option(
        "--sts-scale", help="Also the 0-5 similarity of the STS Benchmark (angular).")] = False,
    as_json: JsonOption = False,
) -> None:
    """Whether two texts ask the same question: the match search shows (how likely they do, by
    the model's calibrated judge) and the verdict at 50%, what duplicates and --collapse decide.
    Give --model your index's model (`index-info` names it) to judge as its search does."""
    import numpy as np

    from askalike.core.loader import load_encoder
    from askalike.core.similarity import angular_similarity, pair_cosine, require_known_words, require_text
    from askalike.retrieval.judgement import SAME_QUESTION, model_judge

    with user_errors():
        require_text([first, second])
        spec = with_onnx_export(model)
        encoder, judge = load_encoder(spec), model_judge(spec)
        require_known_words(encoder, [first, second], model)
        unique = list(dict.fromkeys([first, second]))  # a text with itself: one vector, cosine 1
        vectors = encoder.encode(unique)
    cosine = pair_cosine(vectors[[0, -1]])
    match = float(judge.probability(cosine))
    figures = {"match": round(match, 4), "same_question": match >= SAME_QUESTION, "cosine": round(cosine, 6)}
    if sts_scale:
        figures["similarity"] = round(float(angular_similarity(np.array([cosine]))[0]), 4)
    if as_json:
        typer.echo(json.dumps(figures))
        return
    verdict = "the same question" if figures["same_question"] else "not the same question"
    line = f"{figures['match']:.0%} match: {verdict} (cosine {cosine:.4f})"
    typer.echo(line + (f", {figures['similarity']:.2f} on the STS 0-5 scale" if sts_scale else ""))


@app.command("tui")
def tui(
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    k: Annotated[int, typer.Option("-k", "--top", min=1, help="Results per search.")] = 20,
    min_match: Annotated[str | None, typer.Option(
        "--min-match", help="Leave out hits whose match is below this (30% or 0.3; + and - "
                            "change it in the app).",
        show_default="0: every hit")] = None,
    collapse: Annotated[bool, typer.Option(
        "--collapse/--no-collapse", help="Fold near-duplicates into the better hit they repeat "
                                         "(a switches it in the app).")] = True,
    mode: ModeOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
    k_factor: KFactorOption = None,
) -> None:
    """Browse the index by meaning in a full-screen terminal app (? lists the keys)."""
    from askalike.app.tui import SearchApp  # Textual loads only for the TUI
    from askalike.indexer.directory import require_manifest
    from askalike.retrieval.searcher import Searcher

    settings = _search_settings(ef_search, nprobe, k_factor)
    with user_errors():
        lowest = None if min_match is None else share(min_match)
        require_manifest(index_dir)
        if not (sys.stdin.isatty() and sys.stdout.isatty()):  # else it waits for keys that never come
            raise UserError("askalike tui needs a terminal to read keys from and draw in: run it in "
                            "one (`askalike search` answers a script or a pipe)")
    SearchApp(lambda: Searcher(index_dir, database, settings=settings), k=k, mode=mode, min_match=lowest,
              collapse=collapse).run()
