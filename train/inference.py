"""Encoders for answering queries, without torch: ``load_encoder`` is the one way the indexer,
search, rerank and evaluation get one. DAN and CSE run in numpy (``train.static_encoders``),
transformers in ONNX Runtime (``train.onnx_encoder``); each computes what its torch training
model computes, from the same model directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from train.model_io import ModelError, pretrained_name, read_model_config


class Encoder:
    """Texts in, float32 vectors out: subclasses embed one batch (``embed_batch``); ``encode``
    orders texts by length so that batches carry little padding, and L2-normalises."""

    kind: str
    dim: int
    max_batch: int = 1 << 30  # texts per embed_batch call at most, whatever batch_size asks

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def encode(self, texts: Sequence[str], batch_size: int = 256, normalize: bool = True) -> np.ndarray:
        """Embeddings, shape (len(texts), dim), L2-normalised unless told otherwise."""
        result = np.zeros((len(texts), self.dim), dtype=np.float32)
        order = np.argsort([len(text) for text in texts], kind="stable")
        step = min(batch_size, self.max_batch)
        for start in range(0, len(order), step):
            chunk = order[start : start + step]
            vectors = self.embed_batch([texts[i] for i in chunk]).astype(np.float32, copy=False)
            if normalize:
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                vectors = vectors / np.maximum(norms, 1e-12)
            result[chunk] = vectors
        return result


def load_encoder(spec: str | Path, threads: int | None = None) -> Encoder:
    """The encoder of a model directory or of ``pretrained:NAME``. A transformer directory
    saved without ``model.onnx`` (or a pretrained peer on first use) is exported once, which
    needs torch; after that no query imports it. ``threads`` caps ONNX Runtime's threads."""
    from train.onnx_encoder import OnnxEncoder
    from train.static_encoders import STATIC_ENCODERS

    name = pretrained_name(spec)
    if name is not None:
        return OnnxEncoder.for_pretrained(name, threads)
    directory = Path(spec)
    config = read_model_config(directory)
    kind = config["kind"]
    if kind in STATIC_ENCODERS:
        return STATIC_ENCODERS[kind].from_directory(directory, config)
    if kind in OnnxEncoder.kinds:
        return OnnxEncoder.from_directory(directory, config, threads)
    raise ModelError(f"{directory / 'config.json'}: unknown encoder kind {kind!r}")
