"""The ablation's "+ teacher init" row (issue: fast model): the untrained DAN of a stage-1 config,
its word embeddings set from the teacher (``train.teacher_init``), saved as a model directory
that ``askalike eval card`` measures. It reads the distillation sample of a run of that config
(RUN_DIR/teacher) for the vocabulary and the teacher's word vectors cached there.

    python -m bench.experiments.teacher_init --config train/configs/fast-distill.toml \
        --run-dir runs/fast-distill --out runs/teacher-init/model
    askalike eval card --model runs/teacher-init/model --with-test --json
"""

from __future__ import annotations

import argparse
from pathlib import Path

from askalike.core.data_dir import resolve_data_dir
from askalike.train.config import load_config
from askalike.train.distillation import read_distillation_texts
from askalike.train.trained_model import TrainedModel, save_model
from askalike.train.trainer import build_encoder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, required=True, help="a stage-1 config with teacher_init")
    parser.add_argument("--run-dir", type=Path, required=True, help="a run of it (its teacher pass)")
    parser.add_argument("--out", type=Path, required=True, help="the model directory to write")
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    config = load_config(args.config)
    texts = read_distillation_texts(args.run_dir / "teacher")
    encoder = build_encoder(config, texts, resolve_data_dir(args.data_dir), None, args.run_dir)
    save_model(TrainedModel(encoder), args.out, half_precision=True)
    print(f"wrote {args.out}: {len(encoder.vocabulary.words):,} words")


if __name__ == "__main__":
    main()
