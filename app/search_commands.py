"""``askalike search``, ``rerank`` and ``similar``: thin layers over ``retrieval``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.text import Text

from app.common import (
    RESULT_COLUMNS,
    DatabaseOption,
    DateFormatOption,
    IndexOption,
    JsonOption,
    ModelOption,
    ModeOption,
    app,
    exported,
    json_line,
    plain,
    print_figures,
    progress_bars,
    result_row,
    user_errors,
)
from core.model_dir import DEFAULT_MODEL
from indexer.choices import DEFAULT_INDEX_DIR

if TYPE_CHECKING:
    from rich.table import Table

    from retrieval.searcher import SearchResult, SearchTuning

EfSearchOption = Annotated[int | None, typer.Option(
    "--ef-search", min=1, help="hnsw indexes: candidates a search keeps (higher: more exact, slower).",
    show_default="as the index was built; see index-info")]
NprobeOption = Annotated[int | None, typer.Option(
    "--nprobe", min=1, help="ivf and ivfpq indexes: lists a search reads (higher: more exact, slower).",
    show_default="as the index was built; see index-info")]
KFactorOption = Annotated[int | None, typer.Option(
    "--k-factor", min=1, help="ivfpq indexes: candidates per result re-scored on the stored fp16 "
                              "vectors (higher: more exact, slower).",
    show_default="as the index was built; see index-info")]


def _tuning(ef_search: int | None, nprobe: int | None, k_factor: int | None) -> SearchTuning:
    from retrieval.searcher import SearchTuning

    return SearchTuning(ef_search=ef_search, nprobe=nprobe, k_factor=k_factor)


def _queries(query: str | None) -> list[str]:
    """QUERY, or the queries piped in, one a line (UTF-8: a line that is not is refused)."""
    if query is not None and query != "-":
        return [query]
    if sys.stdin.isatty():
        raise typer.BadParameter("give a QUERY, or pipe queries in, one a line")
    from core.datasets import decoded_lines

    with user_errors():
        return [line.strip() for _, line in decoded_lines("stdin", sys.stdin.buffer) if line.strip()]


def _results_table(query: str, results: list[SearchResult]) -> Table:
    from rich.table import Table

    table = Table(title=plain(f"“{query}”"), title_justify="left", expand=False)
    for name in RESULT_COLUMNS:
        if name == "subject":
            table.add_column(name, ratio=3)
        elif name == "source":
            table.add_column(name, ratio=1, no_wrap=True, overflow="ellipsis", max_width=24)
        else:
            table.add_column(name, justify="right", no_wrap=True)
    for result in results:
        table.add_row(*map(Text, result_row(result)))
    return table


@app.command("search")
def search(
    query: Annotated[str | None, typer.Argument(help="What to look for; '-' or nothing reads "
                                                     "queries from stdin, one a line.")] = None,
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    k: Annotated[int, typer.Option("-k", "--top", min=1, help="Results per query.")] = 10,
    source: Annotated[list[str] | None, typer.Option(help="Only this source (path or file "
                                                          "name); repeatable.")] = None,
    category: Annotated[list[str] | None, typer.Option(help="Only this category (any case); "
                                                            "repeatable.")] = None,
    since: Annotated[str | None, typer.Option(help="Only questions dated on or after this date "
                                                   "(YYYY-MM-DD, or with a time; in UTC).")] = None,
    until: Annotated[str | None, typer.Option(help="Only questions dated on or before this date "
                                                   "(a day includes all of it).")] = None,
    date_format: DateFormatOption = None,
    mode: ModeOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
    k_factor: KFactorOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines: one result a line.")] = False,
) -> None:
    """Search an index by meaning."""
    from rich.console import Console

    from retrieval.duplicates import mark_near_duplicates
    from retrieval.searcher import Searcher, SearchFilters

    queries = _queries(query)
    with user_errors():
        filters = SearchFilters(tuple(source or ()), tuple(category or ()), since, until, date_format)
    tuning = _tuning(ef_search, nprobe, k_factor)
    with user_errors(), Searcher(index_dir, database, tuning=tuning) as searcher:
        batches = [mark_near_duplicates(searcher, results)
                   for results in searcher.search_many(queries, k, filters, mode)]
    console = Console()
    for text, results in zip(queries, batches, strict=True):
        if as_json:
            for result in results:
                typer.echo(json_line({"query": text, **result.as_json()}))
        elif results:
            console.print(_results_table(text, results))
        else:
            console.print(plain(f"“{text}”: no questions match the filters"))


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
    from app.common import print_lines
    from app.summaries import rerank_summary
    from core.cqa_questions import read_cqa_questions
    from core.files import require_output_file
    from retrieval.cqa import predictions_from_scores, ranking_summary
    from retrieval.cqa_runs import read_cqa_run, write_cqa_run
    from retrieval.reranker import Reranker, write_trec_run
    from retrieval.scorer import score_run

    with user_errors(), progress_bars(enabled=not as_json) as progress:
        for path in (out, trec):
            if path is not None:
                require_output_file(path)
        questions = list(read_cqa_questions(input_file))
        reranker = Reranker.for_model(exported(model), mode)
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
    as_json: JsonOption = False,
) -> None:
    """Cosine and 0-5 similarity of two texts."""
    import numpy as np

    from core.loader import load_encoder
    from core.similarity import angular_similarity, pair_cosine, require_known_words, require_text

    with user_errors():
        require_text([first, second])
        encoder = load_encoder(exported(model))
        require_known_words(encoder, [first, second], model)
        unique = list(dict.fromkeys([first, second]))  # a text with itself: one vector, cosine 1
        vectors = encoder.encode(unique)
    cosine = pair_cosine(vectors[[0, -1]])
    similarity = float(angular_similarity(np.array([cosine]))[0])
    print_figures("Similarity", {"cosine": round(cosine, 6), "similarity": round(similarity, 4)},
                  as_json)


@app.command("tui")
def tui(
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    k: Annotated[int, typer.Option("-k", "--top", min=1, help="Results per search.")] = 20,
    mode: ModeOption = None,
    ef_search: EfSearchOption = None,
    nprobe: NprobeOption = None,
    k_factor: KFactorOption = None,
) -> None:
    """Browse the index by meaning in a full-screen terminal app (Ctrl+T switches the mode)."""
    from app.tui import SearchApp  # Textual loads only for the TUI
    from retrieval.searcher import Searcher

    tuning = _tuning(ef_search, nprobe, k_factor)
    SearchApp(lambda: Searcher(index_dir, database, tuning=tuning), k=k, mode=mode).run()
