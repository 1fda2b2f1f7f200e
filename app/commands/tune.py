"""``askalike tune``: adapt a shipped or saved model to a user's own labelled pairs."""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from askalike.app.devices import DeviceOption
from askalike.app.errors import user_errors
from askalike.app.model_specs import shipped_models, with_onnx_export
from askalike.app.options import JsonOption, app
from askalike.app.output import plain, print_lines, stderr
from askalike.core.devices import Device
from askalike.core.errors import UserError
from askalike.core.extras import require_training
from askalike.core.model_dir import DEFAULT_MODEL


class ScoreLoss(StrEnum):
    ranking = "ranking"
    regression = "regression"


@app.command("tune")
def tune(
    base: Annotated[str, typer.Argument(help="The model to start from: accurate, fast, a saved "
                                             "model directory or pretrained:NAME.",
                                        callback=shipped_models)],
    out: Annotated[Path, typer.Option("--out", help="The new model directory (must not exist).")],
    pairs: Annotated[Path | None, typer.Option(
        "--pairs", help="CSV/TSV/JSONL of text_a, text_b[, label][, score] (1 alike, 0 not; no "
                        "label: alike, or with a score column scored only; score: a graded "
                        "similarity on any scale) or of text, group.")] = None,
    collection: Annotated[Path | None, typer.Option(
        "--collection", help="Instead of --pairs, for a DAN (models/fast): a collection as "
                             "`index` reads it; its frequent words missing from the vocabulary "
                             "get rows from --teacher.")] = None,
    teacher: Annotated[str | None, typer.Option(
        help="With --collection, where the new words' rows come from (default: accurate); with "
             "--pairs and a DAN base, a model it also distills on the pairs' texts (e.g. a "
             "transformer tuned on the same pairs).", callback=shipped_models)] = None,
    dev: Annotated[Path | None, typer.Option(
        "--dev", help="Pairs to measure and stop on (default: a fixed 10% of --pairs, held out).")] = None,
    epochs: Annotated[int, typer.Option(min=1, help="Epochs at most; stops at the first that "
                                                    "does not raise the dev figure.")] = 3,
    batch_size: Annotated[int | None, typer.Option(
        min=2, help="Pairs a step (in-batch negatives); default: 32 for a transformer, 8 for a DAN.")] = None,
    learning_rate: Annotated[float | None, typer.Option(
        help="Default: 3e-5 for a transformer, 1e-3 for a DAN.")] = None,
    score_share: Annotated[float | None, typer.Option(
        min=0.0, max=1.0, help="Share of the steps that learn from the score column; "
                               "default: the scored pairs' share of an epoch's batches.")] = None,
    score_loss: Annotated[ScoreLoss | None, typer.Option(
        help="How the score column teaches: ranking orders each batch's pairs as their scores "
             "do (CoSENT); regression fits the cosine to the score. Default: ranking for a "
             "transformer, regression for a DAN.")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Checkpoints and log.",
                                                 show_default="OUT.run")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted run.")] = False,
    device: DeviceOption = Device.auto,
    as_json: JsonOption = False,
) -> None:
    """Fine-tune BASE on your own pairs (or give a DAN your collection's words) and save a
    complete model directory (ONNX export included) that `index --model OUT` and every other
    `--model` take;
    prints what it learned from and the held-out figures before and after (--json: every detail)."""
    with user_errors():
        require_training("askalike tune")
        if (pairs is None) == (collection is None):
            raise UserError("give one of --pairs FILE (labelled pairs) or --collection FILE")
        if collection is not None:
            record = _adapt(base, collection, out, with_onnx_export(teacher or DEFAULT_MODEL),
                            show_progress=not as_json)
        else:
            from askalike.app.summaries import tune_estimate_line
            from askalike.train.pair_tuning import TuneSettings
            from askalike.train.pair_tuning import tune as tune_model

            settings = TuneSettings(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
                                    score_share=score_share, teacher=teacher,
                                    score_loss=score_loss.value if score_loss else None, device=device)
            runs = run_dir or out.with_name(out.name + ".run")

            def announce(estimate: object) -> None:
                stderr.print(plain(tune_estimate_line(estimate, resume)), highlight=False, soft_wrap=True)

            try:
                record = tune_model(base, pairs, out, runs, settings, dev, resume=resume,
                                    show_progress=not as_json, on_estimate=announce)
            except KeyboardInterrupt:
                stderr.print(plain(interrupted_line(runs)), highlight=False, soft_wrap=True)
                raise typer.Exit(130) from None
        with_onnx_export(str(out))
        if pairs is not None:
            record["same_question"] = _calibrate(base, str(out), pairs, dev)
    if as_json:
        typer.echo(json.dumps({"model": str(out), **record}))
    else:
        from askalike.app.summaries import adapt_summary, tune_summary

        print_lines((tune_summary if pairs is not None else adapt_summary)(record, str(out)))


def _calibrate(base: str, out: str, pairs: Path, dev: Path | None) -> dict:
    """Record the tuned model's same-question judge (``retrieval.calibration.calibrate_tuned``);
    what it was fitted on and measured."""
    from askalike.core.data_dir import DataError, resolve_data_dir
    from askalike.retrieval.calibration import calibrate_tuned
    from askalike.retrieval.judgement import model_judge, record_judge
    from askalike.train.pair_tuning import read_tune_pairs

    try:
        data_dir = resolve_data_dir()
    except DataError:
        data_dir = None
    judge = calibrate_tuned(out, read_tune_pairs(pairs, dev)[1], model_judge(base), data_dir)
    if judge is None:
        return {"fitted_on": None}
    record_judge(out, judge)
    return {"fitted_on": judge.fitted_on, **(judge.figures or {})}


def interrupted_line(run_dir: Path) -> str:
    """What a tune stopped by Ctrl-C leaves, and how to go on."""
    from askalike.train.pair_tuning import CHECKPOINT_FILE

    if (run_dir / CHECKPOINT_FILE).is_file():
        return (f"interrupted: the run so far is kept in {run_dir}; run the same command with "
                "--resume to continue from its last checkpoint")
    return "interrupted before the first checkpoint (half an epoch): nothing was kept to resume"


def _adapt(base: str, collection: Path, out: Path, teacher: str, show_progress: bool) -> dict:
    from askalike.core.model_dir import cache_dir
    from askalike.indexer.choices import OnError
    from askalike.indexer.sources import SourceFile
    from askalike.train.collection_adaptation import adapt_to_collection

    if out.exists():
        raise UserError(f"{out} exists: choose a new --out directory")
    texts = [question.text for question in SourceFile(collection, OnError.stop).check([])]
    return adapt_to_collection(base, texts, out, teacher, cache_dir() / "collection-teacher", show_progress)
