"""Trained torch models: an encoder with its training heads, saved to and loaded from a model
directory (the format is described in ``train.model_io``). Training and evaluation use these;
answering queries uses ``train.inference`` and never imports this module.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.numpy import load_file
from safetensors.torch import save_file
from torch import nn

from train.encoders import VOCABULARY_ENCODERS, PretrainedEncoder, SentenceEncoder
from train.model_io import (
    PRETRAINED,
    ModelError,
    pretrained_name,
    read_model_config,
    update_model_config,
    write_model_config,
)
from train.objectives import NliHead, ResponseSelectionHead
from train.onnx_export import EXPORTED_KINDS, export_onnx
from train.quantization import ROW_SCALE_SUFFIX, dequantize_tables, quantize_rows
from train.text import Vocabulary


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


def _quantize_embeddings(encoder: SentenceEncoder, state: dict[str, torch.Tensor]) -> None:
    """Replace the encoder's embedding tables in ``state`` by int8 rows and their scales."""
    for name, module in encoder.named_modules():
        if isinstance(module, nn.Embedding):
            key = f"encoder.{name}.weight"
            values, scale = quantize_rows(state[key].detach().float().cpu().numpy())
            state[key], state[key + ROW_SCALE_SUFFIX] = torch.from_numpy(values), torch.from_numpy(scale)


def save_model(model: TrainedModel, directory: Path, half_precision: bool = False,
               int8_embeddings: bool = False) -> None:
    """Write the model directory via a temporary sibling, then rename it into place. Transformers
    are also exported to ONNX there, so that queries never need torch. ``int8_embeddings``
    stores the encoder's embedding tables as int8 rows with a float32 scale each."""
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
        if int8_embeddings:
            _quantize_embeddings(encoder, state)
    for name, head in (("response", model.response_head), ("nli", model.nli_head)):
        if head is not None:
            state.update({f"heads.{name}.{k}": v for k, v in head.state_dict().items()})
    save_file({k: (v.to(dtype) if v.is_floating_point() and not k.endswith(ROW_SCALE_SUFFIX) else v)
               .contiguous().cpu() for k, v in state.items()}, str(temporary / "model.safetensors"))
    config = {"kind": encoder.kind, "dim": encoder.dim, "encoder": encoder.config(),
              "heads": _heads_config(model), "dtype": str(dtype).removeprefix("torch.")}
    if int8_embeddings:
        config["embedding_dtype"] = "int8"
    if encoder.kind in EXPORTED_KINDS:
        config["inference"] = export_onnx(encoder, temporary, weight_dtype=config["dtype"])
    write_model_config(temporary, config)
    (temporary / "metrics.json").write_text(json.dumps(model.metrics, indent=2) + "\n")
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(temporary, directory)


def load_model(spec: str | Path) -> TrainedModel:
    """A saved model directory, or ``pretrained:NAME`` for an untouched pretrained peer."""
    name = pretrained_name(spec)
    if name is not None:
        return TrainedModel(PretrainedEncoder(PRETRAINED[name]()).eval())
    directory = Path(spec)
    config = read_model_config(directory)
    config_path = directory / "config.json"
    kind = config["kind"]
    try:
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
    state = {k: torch.from_numpy(v).float() if v.dtype.kind == "f" else torch.from_numpy(v)
             for k, v in dequantize_tables(load_file(str(directory / "model.safetensors"))).items()}
    modules = (("encoder.", None if kind == PretrainedEncoder.kind else encoder),
               ("heads.response.", model.response_head), ("heads.nli.", model.nli_head))
    for prefix, module in modules:
        if module is not None:
            module.load_state_dict({k.removeprefix(prefix): v for k, v in state.items()
                                    if k.startswith(prefix)})
    encoder.eval()
    return model


def export_model(directory: Path, quantize: bool = True) -> dict[str, Any]:
    """(Re)write a saved transformer's ONNX export and record it in its config.json; returns
    the export's description. DAN and CSE models need none: they run in numpy."""
    config = read_model_config(directory)
    if config["kind"] not in EXPORTED_KINDS:
        raise ModelError(f"{directory}: a {config['kind']} model runs in numpy; nothing to export")
    described = export_onnx(load_model(directory).encoder, directory,
                            weight_dtype=config.get("dtype", "float32"), quantize=quantize)
    update_model_config(directory, inference=described)
    return described
