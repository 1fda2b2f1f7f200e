"""The command line shared by the experiments that measure a ranking lever on CQA splits
(``bench.experiments.fusion``, ``bench.experiments.postprocess``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from askalike.core.data_dir import resolve_data_dir
from askalike.core.encoder import Encoder
from askalike.core.loader import load_encoder
from askalike.core.model_dir import ModelError
from askalike.retrieval.model_card import ALL_SPLITS


def cqa_lever_arguments(description: str) -> tuple[Encoder, Path, list[str]]:
    """Parse ``--model``, ``--splits`` (dev 2016 alone by default: levers are chosen there) and
    ``--data-dir``: the model's query encoder, the data directory and the splits."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", required=True, help="model directory or pretrained:NAME")
    parser.add_argument("--splits", nargs="+", default=["dev2016"], choices=ALL_SPLITS["cqa"])
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    try:
        encoder = load_encoder(args.model)
    except ModelError as err:
        parser.error(str(err))
    return encoder, resolve_data_dir(args.data_dir), args.splits
