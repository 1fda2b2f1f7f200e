"""Trained torch models: an encoder with its training heads, saved to and loaded from a model
directory (the format is described in ``core.model_dir``). Training and evaluation use these;
answering queries uses ``core.loader``.
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

from askalike.core.loader import EXPORTED_KINDS, export_missing
from askalike.core.model_dir import (
    CACHE_ENV_VAR,
    PRETRAINED,
    ModelError,
    pretrained_export_dir,
    pretrained_name,
    read_model_config,
    update_model_config,
    write_model_config,
)
from askalike.core.quantization import ROW_SCALE_SUFFIX, dequantize_tables, quantize_rows
from askalike.core.text import Vocabulary
from askalike.train.modules import VOCABULARY_MODULES, EncoderModule, PretrainedModule
from askalike.train.objectives import NliHead, ResponseSelectionHead
from askalike.train.onnx_export import export_onnx


@dataclass
class TrainedModel:
    encoder: EncoderModule
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


def _quantize_embeddings(encoder: EncoderModule, state: dict[str, torch.Tensor]) -> None:
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
    if isinstance(encoder, PretrainedModule):
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
        return TrainedModel(PretrainedModule(PRETRAINED[name]()).eval())
    directory = Path(spec)
    config = read_model_config(directory)
    config_path = directory / "config.json"
    kind = config["kind"]
    try:
        if kind == PretrainedModule.kind:
            encoder: EncoderModule = PretrainedModule(directory / "backbone", **config["encoder"])
        else:
            vocabulary = Vocabulary.load(directory / "vocab.json")
            encoder = VOCABULARY_MODULES[kind](vocabulary, **config["encoder"])
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
    modules = (("encoder.", None if kind == PretrainedModule.kind else encoder),
               ("heads.response.", model.response_head), ("heads.nli.", model.nli_head))
    for prefix, module in modules:
        if module is not None:
            module.load_state_dict({k.removeprefix(prefix): v for k, v in state.items()
                                    if k.startswith(prefix)})
    encoder.eval()
    return model


def export_model(spec: str | Path, quantize: bool | None = None) -> tuple[Path, dict[str, Any]]:
    """(Re)write the ONNX export of a saved transformer (recorded in its config.json) or of a
    ``pretrained:NAME`` peer (beside its weights, else under $ASKALIKE_CACHE); returns the
    export's folder and description. DAN and CSE models need none: they run in numpy.
    ``quantize`` defaults to int8 weights for a model directory and fp32 for a peer, so that
    figures called a peer's are its own model's."""
    name = pretrained_name(spec)
    if name is not None and quantize:
        raise ModelError(f"{spec}: a peer's export is its own fp32 model, so that figures called "
                         "the peer's are; to measure an int8 variant, save it as a model directory")
    if quantize is None:
        quantize = name is None
    directory = pretrained_export_dir(name) if name is not None else Path(spec)
    config = read_model_config(directory) if name is None else {"kind": "pretrained"}
    if config["kind"] not in EXPORTED_KINDS:
        raise ModelError(f"{directory}: a {config['kind']} model runs in numpy; nothing to export")
    encoder = load_model(spec).encoder
    try:
        directory.mkdir(parents=True, exist_ok=True)
        described = export_onnx(encoder, directory, weight_dtype=config.get("dtype", "float32"),
                                quantize=quantize)
    except OSError as err:
        raise ModelError(f"{directory}: cannot write the ONNX export of {spec} ({err}); set "
                         f"{CACHE_ENV_VAR} to a writable folder or re-save the model") from None
    if name is None:
        update_model_config(directory, inference=described)
    return directory, described


def export_once(spec: str | Path) -> bool:
    """Write the ONNX export that queries run for a transformer model directory or a
    ``pretrained:NAME`` peer when it has none yet; True when it was written. The commands that
    take ``--model`` call this before they load an encoder, so that the query path itself never
    needs torch."""
    if export_missing(spec) is None:
        return False
    export_model(spec)
    return True
