"""The ``askalike`` command line: a thin layer over the library packages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from retrieval.baselines import BASELINES
from retrieval.cqa import CqaEvaluation, evaluate_scores
from retrieval.scorer import ScorerError, format_report, score_run
from train.datasets import (
    CQA_SPLITS,
    DATA_ENV_VAR,
    DataError,
    load_cqa_split,
    read_cqa_run,
    resolve_data_dir,
    write_cqa_run,
)

app = typer.Typer(help="Find questions alike in meaning.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
eval_app = typer.Typer(help="Evaluate systems on the public benchmarks.", no_args_is_help=True)
app.add_typer(eval_app, name="eval")

stderr = Console(stderr=True)

Split = StrEnum("Split", {name: name for name in CQA_SPLITS})
System = StrEnum("System", {name: name for name in BASELINES})

DataDirOption = Annotated[
    Path | None,
    typer.Option("--data-dir", envvar=DATA_ENV_VAR, show_envvar=True,
                 help="Dataset directory [default: ../shared/data beside the checkout]."),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@contextmanager
def user_errors() -> Iterator[None]:
    """Report bad input as one line on stderr and exit 2, never as a traceback."""
    try:
        yield
    except (DataError, ScorerError) as err:
        stderr.print(f"[red]error:[/red] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def _summary_json(evaluation: CqaEvaluation) -> str:
    return json.dumps({"split": evaluation.split, "system": evaluation.system,
                       **evaluation.report.summary()})


@eval_app.command("cqa")
def eval_cqa(
    split: Annotated[list[Split], typer.Option(help="CQA split; repeat for several.")],
    system: Annotated[list[System], typer.Option(help="Ranking system; repeat for several.")],
    seed: Annotated[int, typer.Option(help="Seed of the random baseline.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Write the official prediction file here "
                                                  "(one split and system only).")] = None,
    as_json: JsonOption = False,
    data_dir: DataDirOption = None,
) -> None:
    """SemEval 2016/2017 Task 3 subtask B: rank each original question's related questions."""
    if out is not None and len(split) * len(system) != 1:
        raise typer.BadParameter("--out takes exactly one --split and one --system")
    with user_errors():
        root = resolve_data_dir(data_dir)
        evaluations = []
        for split_name in split:
            cqa_split = load_cqa_split(root, split_name.value)
            for system_name in system:
                scores = BASELINES[system_name.value](cqa_split.questions, seed)
                evaluations.append(evaluate_scores(cqa_split, system_name.value, scores))
    if out is not None:
        write_cqa_run(out, evaluations[0].predictions)
    if as_json:
        for evaluation in evaluations:
            typer.echo(_summary_json(evaluation))
    elif len(evaluations) == 1:
        typer.echo(format_report(evaluations[0].report))
    else:
        Console().print(_summary_table(evaluations))


def _summary_table(evaluations: list[CqaEvaluation]) -> Table:
    table = Table(title="CQA subtask B (MAP and AvgRec as fractions, MRR x100)")
    for column in ("split", "system", "MAP", "AvgRec", "MRR", "queries"):
        table.add_column(column, justify="left" if column in ("split", "system") else "right")
    for evaluation in evaluations:
        scores = evaluation.report.system
        table.add_row(evaluation.split, evaluation.system, f"{scores.map:.4f}",
                      f"{scores.avgrec:.4f}", f"{scores.mrr:.2f}", str(evaluation.report.n_queries))
    return table


@app.command("score")
def score(
    gold: Annotated[Path, typer.Argument(help="Gold .relevancy file.")],
    predictions: Annotated[Path, typer.Argument(help="Prediction file in the official format.")],
    as_json: JsonOption = False,
) -> None:
    """Score an official-format prediction file against a gold file, like the SemEval scorer."""
    with user_errors():
        report = score_run(read_cqa_run(gold), read_cqa_run(predictions))
    typer.echo(json.dumps(report.summary()) if as_json else format_report(report))


def main() -> None:
    app()
