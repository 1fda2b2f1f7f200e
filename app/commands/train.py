"""``askalike train``: train an encoder from a committed config."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from askalike.app.devices import DeviceOption
from askalike.app.errors import user_errors
from askalike.app.options import DataDirOption, app
from askalike.app.safe_text import printable
from askalike.core.devices import Device
from askalike.core.extras import require_training


@app.command("train")
def train(
    config: Annotated[Path, typer.Argument(
        help="A training config, e.g. train/configs/dan-conversations.toml.")],
    resume: Annotated[bool, typer.Option("--resume",
                                         help="Continue the run from its last checkpoint.")] = False,
    run_dir: Annotated[Path | None, typer.Option(help="Run directory.", show_default="runs/NAME")] = None,
    steps: Annotated[int | None, typer.Option(min=1, help="Train this many steps instead of the "
                                              "config's (a shorter run, or a longer one with "
                                              "--resume).")] = None,
    seed: Annotated[int | None, typer.Option(help="Seed instead of the config's (to measure the "
                                             "variance over seeds); one seed instead of a "
                                             "config's average_seeds.")] = None,
    data_dir: DataDirOption = None,
    device: DeviceOption = Device.auto,
) -> None:
    """Train an encoder; the model is saved to RUN_DIR/model, the log to RUN_DIR/metrics.jsonl."""
    from askalike.core.data_dir import resolve_data_dir

    with user_errors():
        require_training("askalike train")
        from askalike.train.config import ConfigError, load_config
        from askalike.train.seed_average import member_config, train_seed_average
        from askalike.train.trainer import Trainer  # loads torch training machinery only when training

        parsed = load_config(config)
        if steps is not None:
            parsed.training.steps = steps
        if seed is not None:
            parsed = member_config(parsed, seed)
        directory = run_dir or Path("runs") / parsed.name
        try:
            if parsed.training.average_seeds:
                train_seed_average(parsed, resolve_data_dir(data_dir), directory, resume=resume,
                                   device=device)
            else:
                Trainer(parsed, resolve_data_dir(data_dir), directory, device=device).run(resume=resume)
        except (FileExistsError, ValueError) as err:
            raise ConfigError(str(err)) from None
    typer.echo(printable(f"saved {directory / 'model'}"))


@app.command("export")
def export(
    model: Annotated[str, typer.Argument(help="A transformer model directory (models/accurate, "
                                              "runs/NAME/model) or pretrained:NAME.")],
    quantize: Annotated[bool | None, typer.Option(
        help="Quantise the weights to int8 (per channel); default: yes for a model directory, "
             "no for a pretrained:NAME peer (its figures are its own model's).")] = None,
) -> None:
    """(Re)write MODEL/model.onnx, the export that answers queries without torch. `train` writes
    it with every transformer model; this refreshes a model saved before, or changes its
    quantisation."""
    with user_errors():
        require_training("askalike export")
        from askalike.train.trained_model import export_model

        directory, described = export_model(model, quantize)
    typer.echo(printable(f"wrote {directory / described['file']} ({described['quantization']})"))
