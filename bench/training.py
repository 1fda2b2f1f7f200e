"""Training throughput: input-response (or CSE) pairs/s of each committed training config's
encoder on this machine, over a fixed slice of conversation pairs.

    .venv/bin/python -m bench.training [--steps 40] [--config train/configs/X.toml ...]

Each config trains for ``--steps`` steps (after one warm-up step) at its own batch size on the
first 200,000 Reddit pairs (so the vocabulary is near full size); NLI batches are left out so
that every step counts pairs. The figure is the trainer's own (pairs seen / time in steps).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from askalike.core.data_dir import resolve_data_dir
from askalike.train.config import load_config
from askalike.train.corpus import TrainingData, conversation_pairs
from askalike.train.trainer import Trainer
from bench.harness import ROOT, markdown_table, write_section

SLICE = 200_000


def pairs_per_second(config_path: Path, data: TrainingData, steps: int) -> tuple[float, str]:
    config = load_config(config_path)
    training = config.training
    training.steps, training.eval_every, training.checkpoint_every = steps + 1, 10**9, 10**9
    training.nli_ratio = 0.0
    with tempfile.TemporaryDirectory() as scratch:
        trainer = Trainer(config, resolve_data_dir(), Path(scratch), data)
        trainer.config.training.steps = 1  # warm-up step, not counted
        trainer.run(show_progress=False)
        seconds, seen = trainer.state.train_seconds, trainer.state.seen_pairs
        trainer.config.training.steps = steps + 1
        trainer.run(resume=True, show_progress=False)
        rate = (trainer.state.seen_pairs - seen) / (trainer.state.train_seconds - seconds)
    return rate, str(trainer.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--config", type=Path, action="append")
    args = parser.parse_args()
    configs = args.config or sorted((ROOT / "train" / "configs").glob("*.toml"))
    train, heldout = conversation_pairs(resolve_data_dir(), "reddit_2015", SLICE)
    data = TrainingData(train, heldout, [])
    rows = []
    for path in configs:
        rate, device = pairs_per_second(path, data, args.steps)
        config = load_config(path)
        print(path.name, round(rate, 1), device, flush=True)
        rows.append((f"`{path.relative_to(ROOT)}`", config.model.kind, config.training.objective,
                     config.training.batch_size, device, f"{rate:,.0f}"))
    body = (f"{args.steps} steps per config after a warm-up step, on the first {SLICE:,} Reddit pairs; "
            f"torch threads: {torch.get_num_threads()}.\n\n"
            + markdown_table(["config", "encoder", "objective", "batch", "device", "pairs/s"], rows))
    write_section("training", "Training throughput", f"python -m bench.training --steps {args.steps}", body)


if __name__ == "__main__":
    main()
