"""A lever for models/accurate (issue: ranking quality): weight-space averages of fine-tuned
runs of the same backbone. The members' encoders (and heads) are averaged uniformly (a "model
soup", Wortsman et al. 2022); ``--scale`` then moves the average along its fine-tuning direction
from the backbone: 1 keeps it, below 1 interpolates towards the backbone (WiSE-FT), above 1
extrapolates. The result is saved as a model directory, to be measured with ``askalike eval``.

    python -m bench.weight_average --out runs/soup models/accurate runs/accurate-seed14/model ...
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from train.model_io import ModelError
from train.trained_model import TrainedModel, load_model, save_model


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


def average_models(members: list[TrainedModel], backbone: TrainedModel, scale: float) -> TrainedModel:
    """The first member, carrying the averaged (and scaled) encoder and the averaged heads."""
    result = members[0]
    with torch.no_grad():
        result.encoder.load_state_dict(averaged_state([m.encoder.state_dict() for m in members],
                                                      backbone.encoder.state_dict(), scale))
        for head in ("response_head", "nli_head"):
            if getattr(result, head) is not None:
                getattr(result, head).load_state_dict(averaged_state(
                    [getattr(m, head).state_dict() for m in members], None, 1.0))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("members", nargs="+", help="fine-tuned model directories of one backbone")
    parser.add_argument("--out", type=Path, required=True, help="model directory to write")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="the average's distance from the backbone (1: the average itself)")
    parser.add_argument("--backbone", default="pretrained:all-MiniLM-L6-v2")
    args = parser.parse_args()
    try:
        members = [load_model(member) for member in args.members]
        backbone = load_model(args.backbone)
    except ModelError as err:
        parser.error(str(err))
    model = average_models(members, backbone, args.scale)
    model.metrics = {"averaged": args.members, "scale": args.scale}
    save_model(model, args.out, half_precision=True)
    print(f"saved {args.out}: {len(members)} members, scale {args.scale}")


if __name__ == "__main__":
    main()
