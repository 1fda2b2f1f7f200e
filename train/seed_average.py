"""Seed averaging: one config trained under several seeds from the same starting weights, kept as
the uniform average of their weights (a "model soup", Wortsman et al. 2022).

A fine-tuning run's CQA dev MAP moves by about a point with the seed or the CPU's float kernels.
Runs that share their starting weights stay in one basin, so their average is itself a good model
and depends less on any one run (for models/fast's stage 2: see docs/results.md). Each member is an
ordinary run in ``RUN_DIR/seed-N``, resumable on its own; the average goes to ``RUN_DIR/model``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from askalike.core.devices import Device
from askalike.core.sts_evaluation import evaluate_stsb
from askalike.train.config import TrainConfig
from askalike.train.corpus import TrainingData
from askalike.train.trained_model import TrainedModel, load_model, save_model
from askalike.train.trainer import Trainer


def averaged_state(states: list[dict[str, torch.Tensor]], origin: dict[str, torch.Tensor] | None,
                   scale: float) -> dict[str, torch.Tensor]:
    """The mean of ``states``, then ``origin + scale * (mean - origin)`` where an origin is given;
    integer buffers (position ids) are taken from the first state."""
    result = {}
    for key, first in states[0].items():
        if not first.is_floating_point():
            result[key] = first
            continue
        mean = torch.stack([state[key].float() for state in states]).mean(dim=0)
        result[key] = mean if origin is None else origin[key].float() + scale * (mean - origin[key].float())
    return result


def average_models(members: list[TrainedModel], origin: TrainedModel | None = None,
                   scale: float = 1.0) -> TrainedModel:
    """The first member, carrying the averaged encoder (moved by ``scale`` from ``origin``'s, see
    ``averaged_state``) and the averaged heads."""
    result = members[0]
    with torch.no_grad():
        result.encoder.load_state_dict(averaged_state(
            [m.encoder.state_dict() for m in members],
            None if origin is None else origin.encoder.state_dict(), scale))
        for head in ("response_head", "nli_head"):
            if getattr(result, head) is not None:
                getattr(result, head).load_state_dict(averaged_state(
                    [getattr(m, head).state_dict() for m in members], None, 1.0))
    return result


def member_config(config: TrainConfig, seed: int) -> TrainConfig:
    """The config of the member trained under ``seed``: the same run, averaging nothing."""
    return replace(config, seed=seed, training=replace(config.training, average_seeds=[]))


def train_seed_average(config: TrainConfig, data_dir: Path, run_dir: Path, resume: bool = False,
                       data: TrainingData | None = None, show_progress: bool = True,
                       device: Device = Device.auto) -> TrainedModel:
    """Train (or, with ``resume``, finish or reuse) each seed's member, then save their average.
    Members are read back from their saved directories, so a resumed average equals an
    uninterrupted one."""
    members = []
    for seed in config.training.average_seeds:
        member_dir = run_dir / f"seed-{seed}"
        if not (resume and (member_dir / "model" / "config.json").is_file()):
            Trainer(member_config(config, seed), data_dir, member_dir, data, device=device).run(
                resume=resume, show_progress=show_progress)
        members.append(load_model(member_dir / "model"))
    train_seconds = sum(member.metrics.get("train_seconds", 0.0) for member in members)
    model = average_models(members)
    model.metrics = {"config": config.name, "average_of_seeds": config.training.average_seeds,
                     "steps": config.training.steps, "train_seconds": round(train_seconds, 1),
                     "stsb_dev_pearson": evaluate_stsb(model.encoder, data_dir, "dev")["pearson"]}
    save_model(model, run_dir / "model", half_precision=config.training.half_precision,
               int8_embeddings=config.training.int8_embeddings)
    return model
