"""``askalike eval ...`` and ``askalike score``: the public benchmarks and the official scorer."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from askalike.app.devices import DeviceOption, embedding_encoder
from askalike.app.errors import user_errors
from askalike.app.model_specs import shipped_models
from askalike.app.options import MODEL_HELP, DataDirOption, JsonOption, ModelOption, app, eval_app
from askalike.app.output import markup_safe, plain, print_figures, print_lines
from askalike.app.progress import progress_bars, steps_shown
from askalike.app.summaries import model_label
from askalike.core.data_dir import CQA_SPLITS
from askalike.core.devices import Device
from askalike.core.extras import require_training
from askalike.core.model_dir import DEFAULT_MODEL
from askalike.retrieval.baselines import BASELINES
from askalike.retrieval.fusion import SearchMode

if TYPE_CHECKING:
    from rich.table import Table

    from askalike.core.encoder import Encoder
    from askalike.retrieval.cqa import CqaEvaluation
    from askalike.retrieval.reranker import Reranker
    from askalike.train.trained_model import TrainedModel

Split = StrEnum("Split", {name: name for name in CQA_SPLITS})
System = StrEnum("System", {name: name for name in BASELINES})
TorchOption = Annotated[bool, typer.Option(
    "--torch", help="Evaluate the torch training model instead of the exported encoder that "
                    "search uses (numpy or ONNX Runtime).")]


def _encoder(spec: str, use_torch: bool, device: Device) -> Encoder:
    """The encoder to evaluate: by default what every query computes (on a GPU, in torch with
    the same math)."""
    if use_torch:
        trained = _torch_model(spec, "--torch")
        from askalike.train.devices import torch_device

        return trained.encoder.to(torch_device(device))
    return embedding_encoder(spec, device)


def _torch_model(spec: str, what: str) -> TrainedModel:
    """``spec``'s torch training model, with the heads that only it has; ``what`` needs the
    training extra."""
    require_training(what)
    from askalike.train.trained_model import load_model

    return load_model(spec)


def _reranker(spec: str, mode: SearchMode | None, use_torch: bool, device: Device) -> Reranker:
    """``spec``'s reranker in ``mode`` (None: the model's own default, as search takes)."""
    from askalike.retrieval.reranker import Reranker

    return Reranker.for_model(spec, mode, _encoder(spec, use_torch, device)
                              if mode != SearchMode.lexical else None)


def _summary_json(evaluation: CqaEvaluation, mode: SearchMode | None) -> str:
    return json.dumps({"split": evaluation.split, "system": evaluation.system,
                       "mode": None if mode is None else str(mode), **evaluation.report.summary()})


@eval_app.command("cqa")
def eval_cqa(
    split: Annotated[list[Split], typer.Option(help="CQA split; repeat for several.")],
    system: Annotated[list[System] | None, typer.Option(help="Baseline; repeat for several.")] = None,
    model: Annotated[list[str] | None, typer.Option(
        help=f"Rank with this model: {MODEL_HELP} Repeatable.", callback=shipped_models)] = None,
    seed: Annotated[int, typer.Option(help="Seed of the random baseline.")] = 0,
    out: Annotated[Path | None, typer.Option(help="Write the official prediction file here "
                                                  "(one split and one system or model only).")] = None,
    mode: Annotated[list[SearchMode] | None, typer.Option(
        help="How --model ranks: cosine (dense), BM25 (lexical) or both fused (hybrid, with the "
             "model's dense weight tuned on dev 2016); repeatable.",
        show_default="hybrid when the model's tuned hybrid weight says words help, else dense: "
                     "as search")] = None,
    use_torch: TorchOption = False,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
    data_dir: DataDirOption = None,
) -> None:
    """SemEval 2016/2017 Task 3 subtask B: rank each original question's related questions."""
    from rich.console import Console

    from askalike.core.data_dir import resolve_data_dir
    from askalike.core.files import require_output_file
    from askalike.retrieval.cqa import evaluate_scores
    from askalike.retrieval.cqa_runs import load_cqa_split, write_cqa_run
    from askalike.retrieval.scorer import format_report

    systems, models = system or [], model or []
    if not systems and not models:
        raise typer.BadParameter("give at least one --system or --model")
    if out is not None and len(split) * (len(systems) + len(models)) != 1:
        raise typer.BadParameter("--out takes exactly one --split and one --system or --model")
    with user_errors(), progress_bars(enabled=not as_json) as progress:
        if out is not None:
            require_output_file(out)
        root = resolve_data_dir(data_dir)
        runs = [(spec, _reranker(spec, chosen, use_torch, device))
                for spec in models for chosen in (mode or [None])]
        evaluations: list[tuple[CqaEvaluation, SearchMode | None]] = []
        for split_name in split:
            cqa_split = load_cqa_split(root, split_name.value)
            for system_name in systems:
                scores = BASELINES[system_name.value](cqa_split.questions, seed)
                evaluations.append((evaluate_scores(cqa_split, system_name.value, scores), None))
            for spec, reranker in runs:
                name = model_label(spec)
                task = progress.add_task(markup_safe(f"{split_name.value} · {name}"),
                                         total=len(cqa_split.questions))
                scores = reranker.scores(cqa_split.questions,
                                         on_progress=lambda n, task=task: progress.advance(task, n))
                evaluations.append((evaluate_scores(cqa_split, name, scores), reranker.mode))
        if out is not None:
            write_cqa_run(out, evaluations[0][0].predictions)
    if as_json:
        for evaluation, ranked_by in evaluations:
            typer.echo(_summary_json(evaluation, ranked_by))
    elif len(evaluations) == 1:
        evaluation, ranked_by = evaluations[0]
        typer.echo(plain(f"{evaluation.split} · {evaluation.system}"
                         + (f" ({ranked_by} mode)" if ranked_by else "")))
        typer.echo(format_report(evaluation.report))
    else:
        Console().print(_summary_table(evaluations))


def _summary_table(evaluations: list[tuple[CqaEvaluation, SearchMode | None]]) -> Table:
    from rich.table import Table

    table = Table(title="CQA subtask B (MAP, AvgRec and MRR x100)")
    with_mode = any(ranked_by for _, ranked_by in evaluations)  # a model's row: name how it ranked
    named = ("split", "system", "mode") if with_mode else ("split", "system")
    for column in (*named, "MAP", "AvgRec", "MRR", "queries"):
        table.add_column(column, justify="left" if column in named else "right")
    for evaluation, ranked_by in evaluations:
        scores = evaluation.report.system
        mode = [str(ranked_by or "")] if with_mode else []
        table.add_row(evaluation.split, plain(evaluation.system), *mode,
                      f"{100 * scores.map:.2f}", f"{100 * scores.avgrec:.2f}", f"{scores.mrr:.2f}",
                      str(evaluation.report.n_queries))
    return table


@app.command("score")
def score(
    gold: Annotated[Path, typer.Argument(help="Gold .relevancy file.")],
    predictions: Annotated[Path, typer.Argument(help="Prediction file in the official format.")],
    as_json: JsonOption = False,
) -> None:
    """Score an official-format prediction file against a gold file, like the SemEval scorer."""
    from askalike.retrieval.cqa_runs import read_cqa_run
    from askalike.retrieval.scorer import format_report, score_run

    with user_errors():
        report = score_run(read_cqa_run(gold, "gold"), read_cqa_run(predictions))
    typer.echo(json.dumps(report.summary()) if as_json else format_report(report))



@eval_app.command("sts")
def eval_sts(
    model: ModelOption = DEFAULT_MODEL,
    split: Annotated[str, typer.Option(help="STS Benchmark split: dev or test.")] = "dev",
    tuned: Annotated[bool, typer.Option("--tuned", help="Fit Yang et al.'s transformation on STSb train "
                                             "first (4.4.1).")] = False,
    use_torch: TorchOption = False,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
    data_dir: DataDirOption = None,
) -> None:
    """STS Benchmark: Pearson and Spearman, overall and per genre (Yang Tables 3-4)."""
    from askalike.app.summaries import sts_summary
    from askalike.core.data_dir import resolve_data_dir
    from askalike.core.sts_evaluation import evaluate_stsb

    if split not in ("dev", "test"):
        raise typer.BadParameter("--split is dev or test")
    with user_errors(), steps_shown(enabled=not as_json) as step:
        step(f"loading {model_label(model)}")
        figures = evaluate_stsb(_encoder(model, use_torch, device), resolve_data_dir(data_dir), split, tuned,
                                step)
    if as_json:
        typer.echo(json.dumps({"model": model, **figures}))
    else:
        print_lines(sts_summary(figures, model))


@eval_app.command("response")
def eval_response(model: ModelOption = DEFAULT_MODEL, as_json: JsonOption = False,
                  data_dir: DataDirOption = None) -> None:
    """Response selection P@1/3/10 among 100 on each conversation file's held-out tail
    (Yang Table 1)."""
    from askalike.core.data_dir import resolve_data_dir

    with user_errors(), steps_shown(enabled=not as_json) as step:
        step(f"response selection with {model_label(model)}")
        root = resolve_data_dir(data_dir)
        loaded = _torch_model(model, "askalike eval response")  # the response head is the torch model's
        from askalike.train.corpus import conversation_pairs
        from askalike.train.evaluation import response_precision

        figures: dict[str, object] = {"model": model}
        for stem in ("reddit_2015", "self_dialogue", "dailydialog", "ubuntu_irc"):
            figures[stem] = response_precision(loaded, conversation_pairs(root, stem)[1])
    print_figures(f"Response selection among 100: {model}", figures, as_json)


@eval_app.command("nli")
def eval_nli(model: ModelOption = DEFAULT_MODEL, as_json: JsonOption = False,
             data_dir: DataDirOption = None) -> None:
    """SNLI test accuracy of the model's NLI head."""
    from askalike.core.data_dir import resolve_data_dir
    from askalike.core.datasets import read_nli
    from askalike.core.model_dir import ModelError

    with user_errors(), steps_shown(enabled=not as_json) as step:
        step(f"SNLI test with {model_label(model)}")
        loaded = _torch_model(model, "askalike eval nli")  # the NLI head is the torch model's
        from askalike.train.evaluation import nli_accuracy

        pairs = list(read_nli(resolve_data_dir(data_dir) / "snli" / "snli_1.0_test.tsv.gz"))
        try:
            figures = nli_accuracy(loaded, pairs)
        except ValueError as err:
            raise ModelError(f"{model}: {err}") from None
    print_figures(f"SNLI test: {model}", {"model": model, **figures}, as_json)


@eval_app.command("transfer")
def eval_transfer(model: ModelOption = DEFAULT_MODEL, use_torch: TorchOption = False,
                  device: DeviceOption = Device.auto,
                  as_json: JsonOption = False, data_dir: DataDirOption = None) -> None:
    """STS 2012-2016 and SICK-R Pearson (Jiao Tables 1-2)."""
    from askalike.core.data_dir import resolve_data_dir
    from askalike.core.sts_evaluation import evaluate_transfer

    with user_errors(), steps_shown(enabled=not as_json) as step:
        step(f"STS 2012-2016 and SICK-R with {model_label(model)}")
        figures = evaluate_transfer(_encoder(model, use_torch, device), resolve_data_dir(data_dir))
    print_figures(f"Transfer: {model}", {"model": model, **figures}, as_json)


@eval_app.command("domains")
def eval_domains(
    model: ModelOption = DEFAULT_MODEL,
    part: Annotated[str, typer.Option(
        help="Which fixed part of each domain: test (to report) or tune (what `tune` may learn "
             "from).")] = "test",
    use_torch: TorchOption = False,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
    data_dir: DataDirOption = None,
) -> None:
    """Out of domain: pair ranking accuracy and Pearson r on SICK and the STS Q&A sets, domains
    no shipped model trained on (vectors cached under $ASKALIKE_CACHE/ood)."""
    from askalike.core.data_dir import resolve_data_dir
    from askalike.core.model_dir import EXPORT_FORMAT, cache_dir, weights_fingerprint
    from askalike.core.ood_evaluation import PARTS, CachedEncoder, evaluate_domains

    with user_errors():
        if part not in PARTS:
            raise typer.BadParameter(f"--part must be one of {', '.join(PARTS)}, not {part!r}")
        # the query encoder's vectors change with the export's graph as well as with the weights
        computed_by = "torch" if use_torch else f"query-export-{EXPORT_FORMAT}"
        key = f"{model}:{weights_fingerprint(model)}:{computed_by}"
        encoder = CachedEncoder(_encoder(model, use_torch, device), cache_dir() / "ood", key)
        figures = evaluate_domains(encoder, resolve_data_dir(data_dir), part)
    print_figures(f"Out of domain ({part}): {model}", {"model": model, "part": part, **figures}, as_json)


@eval_app.command("card")
def eval_card(
    model: ModelOption = DEFAULT_MODEL,
    with_test: Annotated[bool, typer.Option(
        "--with-test", help="Also the test splits: once per finished model, never to make "
                            "choices.")] = False,
    write: Annotated[bool, typer.Option(
        "--write", help="Record the figures in MODEL/metrics.json (under \"evaluation\", or "
                        "\"evaluation_torch\" with --torch), and the tuned hybrid weight in "
                        "MODEL/config.json.")] = False,
    use_torch: TorchOption = False,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
    data_dir: DataDirOption = None,
) -> None:
    """A model's headline figures: STS Benchmark r raw and tuned, CQA subtask-B MAP; dev splits
    unless --with-test."""
    from askalike.core.data_dir import resolve_data_dir
    from askalike.core.model_dir import read_model_config
    from askalike.retrieval.model_card import model_figures, record_figures

    with user_errors(), steps_shown(enabled=not as_json) as step:
        step(f"STS Benchmark and CQA figures of {model_label(model)}")
        if write:
            read_model_config(Path(model))  # before the work: --write needs a model directory
        figures = model_figures(_encoder(model, use_torch, device), resolve_data_dir(data_dir), with_test)
        if write:
            record_figures(Path(model), figures, of_torch_model=use_torch)
    print_figures(f"Model card: {model}", {"model": model, **figures}, as_json)
