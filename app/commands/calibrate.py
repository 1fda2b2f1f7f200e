"""``askalike calibrate``: fit a model's same-question judge, the curve that turns a cosine into
the match every command shows (``retrieval.judgement``), and record it with the model."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from askalike.app.errors import user_errors
from askalike.app.model_specs import with_onnx_export
from askalike.app.options import DataDirOption, JsonOption, ModelOption, app
from askalike.app.output import print_figures
from askalike.core.errors import UserError
from askalike.core.model_dir import DEFAULT_MODEL


class CalibrationError(UserError):
    """Pairs a curve cannot be fitted on (too few of one kind)."""


@app.command("calibrate")
def calibrate(
    model: ModelOption = DEFAULT_MODEL,
    pairs: Annotated[Path | None, typer.Option(
        "--pairs", help="Your own labelled pairs, as `tune` reads them (text_a, text_b, label: 1 "
                        "the same question, 0 not), instead of CQA's; at least 10 of each.")] = None,
    data_dir: DataDirOption = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the fitted curve's figures without recording it.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Fit how likely two questions are the same question from their cosine, and record it in the
    model's config.json: from then on its match (search, duplicates, --collapse, similar, the TUI
    and the API) means "of the pairs shown at 80%, about 80% ask the same question".

    Without --pairs the curve is fitted on the SemEval CQA pairs judged PerfectMatch (the same
    question) against Relevant and Irrelevant ones, train and dev 2016. Indexes built with the
    model stay valid: the weights do not change."""
    from askalike.core.data_dir import resolve_data_dir
    from askalike.core.loader import load_encoder
    from askalike.core.pair_files import read_labelled_pairs
    from askalike.retrieval.calibration import fit_judge, fit_on_cqa, labelled_pairs
    from askalike.retrieval.judgement import record_judge

    with user_errors():
        spec = with_onnx_export(model)
        encoder = load_encoder(spec)
        try:
            if pairs is None:
                judge = fit_on_cqa(encoder, resolve_data_dir(data_dir))
            else:
                judge = fit_judge(encoder, labelled_pairs(read_labelled_pairs(pairs)),
                                  f"{pairs.name}: your pairs")
        except ValueError as err:
            raise CalibrationError(f"{pairs or 'CQA'}: {err}") from None
        if not dry_run:
            record_judge(spec, judge)
    figures = {"model": model, "fitted_on": judge.fitted_on, "slope": round(judge.slope, 4),
               "intercept": round(judge.intercept, 4), "recorded": not dry_run,
               "cosine_at_50%": round(judge.cosine_for(0.5), 4), **(judge.figures or {})}
    print_figures(f"same-question judge of {model}", figures, as_json)
