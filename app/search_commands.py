"""``askalike search``, ``rerank`` and ``similar``: thin layers over ``retrieval``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from app.common import (
    DatabaseOption,
    IndexOption,
    JsonOption,
    ModelOption,
    ModeOption,
    app,
    print_figures,
    similarity_bar,
    user_errors,
)
from indexer.choices import DEFAULT_INDEX_DIR
from train.model_io import DEFAULT_MODEL

if TYPE_CHECKING:
    from rich.table import Table

    from retrieval.searcher import SearchResult


def _queries(query: str | None) -> list[str]:
    if query is not None and query != "-":
        return [query]
    if sys.stdin.isatty():
        raise typer.BadParameter("give a QUERY, or pipe queries in, one a line")
    return [line.strip() for line in sys.stdin if line.strip()]


def _results_table(query: str, results: list[SearchResult]) -> Table:
    from rich.table import Table

    table = Table(title=f"“{query}”", title_justify="left", expand=False)
    table.add_column("#", justify="right")
    table.add_column("sim 0-5", justify="right")
    table.add_column("", no_wrap=True)
    table.add_column("subject", ratio=3)
    table.add_column("source", ratio=1, no_wrap=True, overflow="ellipsis", max_width=24)
    for result in results:
        table.add_row(str(result.rank), f"{result.similarity:.2f}", similarity_bar(result.similarity),
                      result.subject or result.excerpt, Path(result.source).name)
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
    category: Annotated[list[str] | None, typer.Option(help="Only this category; repeatable.")] = None,
    since: Annotated[str | None, typer.Option(help="Only questions dated on or after (ISO).")] = None,
    until: Annotated[str | None, typer.Option(help="Only questions dated on or before (ISO).")] = None,
    mode: ModeOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON lines: one result a line.")] = False,
) -> None:
    """Search an index by meaning."""
    from rich.console import Console

    from retrieval.searcher import Searcher, SearchFilters

    queries = _queries(query)
    filters = SearchFilters(tuple(source or ()), tuple(category or ()), since, until)
    with user_errors(), Searcher(index_dir, database) as searcher:
        batches = searcher.search_many(queries, k, filters, mode)
    console = Console()
    for text, results in zip(queries, batches, strict=True):
        if as_json:
            for result in results:
                typer.echo(json.dumps({"query": text, **result.as_json()}, ensure_ascii=False))
        elif results:
            console.print(_results_table(text, results))
        else:
            console.print(f"“{text}”: no questions match the filters")


@app.command("rerank")
def rerank(
    input_file: Annotated[Path, typer.Argument(help="SemEval CQA input: XML or reconstructed "
                                                    "JSONL (original questions with their related).")],
    out: Annotated[Path, typer.Option(help="Prediction file in the official format.")],
    model: ModelOption = DEFAULT_MODEL,
    trec: Annotated[Path | None, typer.Option(help="Also write a TREC run file.")] = None,
    gold: Annotated[Path | None, typer.Option(help="Gold .relevancy file: print the scorer's "
                                                   "table.")] = None,
    mode: ModeOption = None,
    as_json: JsonOption = False,
) -> None:
    """Rerank each original question's related questions by cosine, BM25 or both (batch,
    SemEval format)."""
    from retrieval.cqa import predictions_from_scores
    from retrieval.cqa_runs import read_cqa_run, write_cqa_run
    from retrieval.reranker import Reranker, write_trec_run
    from retrieval.scorer import format_report, score_run
    from train.cqa_questions import read_cqa_questions
    from train.files import require_output_file

    with user_errors():
        for path in (out, trec):
            if path is not None:
                require_output_file(path)
        questions = list(read_cqa_questions(input_file))
        scores = Reranker.for_model(model, mode).scores(questions)
        predictions = predictions_from_scores(questions, scores)
        write_cqa_run(out, predictions)
        if trec is not None:
            write_trec_run(trec, questions, scores, run_name=Path(model).name)
        report = score_run(read_cqa_run(gold), predictions) if gold is not None else None
    if report is None:
        summary = {"questions": len(questions), "predictions": len(predictions), "out": str(out)}
        print_figures("Reranked", summary, as_json)
    elif as_json:
        typer.echo(json.dumps(report.summary()))
    else:
        typer.echo(format_report(report))


@app.command("similar")
def similar(
    first: Annotated[str, typer.Argument(help="A text.")],
    second: Annotated[str, typer.Argument(help="Another text.")],
    model: ModelOption = DEFAULT_MODEL,
    as_json: JsonOption = False,
) -> None:
    """Cosine and 0-5 similarity of two texts."""
    import numpy as np

    from train.inference import load_encoder
    from train.similarity import angular_similarity, pair_cosine, require_text

    with user_errors():
        require_text([first, second])
        unique = list(dict.fromkeys([first, second]))  # a text with itself: one vector, cosine 1
        vectors = load_encoder(model).encode(unique)
    cosine = pair_cosine(vectors[[0, -1]])
    similarity = float(angular_similarity(np.array([cosine]))[0])
    print_figures("Similarity", {"cosine": round(cosine, 6), "similarity": round(similarity, 4)},
                  as_json)


@app.command("tui")
def tui(
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    k: Annotated[int, typer.Option("-k", "--top", min=1, help="Results per search.")] = 20,
) -> None:
    """Browse the index by meaning in a full-screen terminal app."""
    from app.tui import SearchApp  # Textual loads only for the TUI
    from retrieval.searcher import Searcher

    SearchApp(lambda: Searcher(index_dir, database), k=k).run()
