"""``load_encoder``: the one way indexing, search, reranking and evaluation get a model's
encoder, without torch. DAN and CSE run in numpy (``core.numpy_encoders``), transformers in ONNX
Runtime (``core.onnx_encoder``); each computes what its torch training module computes, from the
same model directory.
"""

from __future__ import annotations

from pathlib import Path

from askalike.core.encoder import BatchedEncoder
from askalike.core.model_dir import (
    ONNX_FILE,
    ModelError,
    pretrained_export_dir,
    pretrained_name,
    read_model_config,
)
from askalike.core.numpy_encoders import NUMPY_ENCODERS
from askalike.core.onnx_encoder import OnnxEncoder

EXPORTED_KINDS = ("pretrained", "transformer")  # kinds that queries run from their ONNX export


def export_missing(spec: str | Path) -> Path | None:
    """Where the ONNX export of a transformer model (or ``pretrained:NAME`` peer) belongs while it
    has none yet (it is written once, by ``train.onnx_export.export_once``, which needs torch);
    None when the model runs as it is."""
    name = pretrained_name(spec)
    if name is not None:
        directory = pretrained_export_dir(name)
    else:
        directory = Path(spec)
        if read_model_config(directory)["kind"] not in EXPORTED_KINDS:
            return None
    return None if (directory / ONNX_FILE).is_file() else directory


def load_encoder(spec: str | Path, threads: int | None = None) -> BatchedEncoder:
    """The encoder of a model directory or of ``pretrained:NAME``. ``threads`` caps ONNX Runtime's
    threads. A transformer must have been exported to ONNX (``askalike export``; the commands that
    take ``--model`` do it once for a peer or a model saved without it)."""
    if (missing := export_missing(spec)) is not None:
        raise ModelError(f"{spec}: not exported to ONNX yet ({missing / ONNX_FILE} is missing); "
                         f"run `askalike export {spec}` once")
    name = pretrained_name(spec)
    if name is not None:
        return OnnxEncoder.for_pretrained(name, threads)
    directory = Path(spec)
    config = read_model_config(directory)
    kind = config["kind"]
    if kind in NUMPY_ENCODERS:
        return NUMPY_ENCODERS[kind].from_directory(directory, config)
    if kind in EXPORTED_KINDS:
        return OnnxEncoder.from_directory(directory, config, threads)
    raise ModelError(f"{directory / 'config.json'}: unknown encoder kind {kind!r}")
