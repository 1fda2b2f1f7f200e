"""A lever for models/accurate (issue: ranking quality) and models/fast (issue: fast model):
weight-space averages of fine-tuned runs of the same starting point. The members' encoders (and
heads) are averaged uniformly (a "model soup", ``train.seed_average``); ``--scale`` then moves
the average along its fine-tuning direction from the backbone: 1 keeps it, below 1 interpolates
towards the backbone (WiSE-FT), above 1 extrapolates. The result is saved as a model directory
in the members' storage (int8 embedding tables when theirs are), to be measured with
``askalike eval``.

    python -m bench.experiments.weight_average --out runs/soup models/accurate runs/accurate-seed14/model ...
    python -m bench.experiments.weight_average --backbone runs/fast-distill/model --out runs/fast-soup \
        runs/fast-finetune/model runs/fast-finetune-seed14/model ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

from askalike.core.model_dir import ModelError, read_model_config
from askalike.train.seed_average import average_models
from askalike.train.trained_model import load_model, save_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("members", nargs="+", help="fine-tuned model directories of one backbone")
    parser.add_argument("--out", type=Path, required=True, help="model directory to write")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="the average's distance from the backbone (1: the average itself)")
    parser.add_argument("--backbone", default="pretrained:all-MiniLM-L6-v2",
                        help="where the members' training started (a stage-1 model for models/fast)")
    args = parser.parse_args()
    try:
        members = [load_model(member) for member in args.members]
        backbone = load_model(args.backbone)
    except ModelError as err:
        parser.error(str(err))
    model = average_models(members, backbone, args.scale)
    model.metrics = {"averaged": args.members, "scale": args.scale}
    int8 = read_model_config(Path(args.members[0])).get("embedding_dtype") == "int8"
    save_model(model, args.out, half_precision=True, int8_embeddings=int8)
    print(f"saved {args.out}: {len(members)} members, scale {args.scale}")


if __name__ == "__main__":
    main()
