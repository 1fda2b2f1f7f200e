"""The DAN and CSE encoders in numpy, read from the weights their torch models were saved with.

Both are linear in their word embeddings up to the pooling, so inference is a table lookup, a
sum and a few small matrix products; no torch needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from askalike.core.encoder import BatchedEncoder
from askalike.core.model_dir import ModelError
from askalike.core.quantization import ROW_SCALE_SUFFIX
from askalike.core.text import PAD, Vocabulary


def _encoder_weights(directory: Path) -> dict[str, np.ndarray]:
    """The ``encoder.*`` tensors of model.safetensors, prefix removed, in their saved precision
    (converting a large fp16 embedding table to fp32 would cost more than a query: the rows a
    batch looks up are converted instead)."""
    from safetensors import safe_open

    path = directory / "model.safetensors"
    try:
        with safe_open(str(path), framework="numpy") as weights:
            return {key.removeprefix("encoder."): weights.get_tensor(key)
                    for key in weights.keys() if key.startswith("encoder.")}  # noqa: SIM118
    except (OSError, ValueError) as err:
        raise ModelError(f"{path}: cannot read the weights ({err})") from None


class EmbeddingTable:
    """An embedding table as saved: fp16/fp32 rows, or int8 rows with a scale each
    (``core.quantization``), kept in that form; a lookup converts only the rows it reads."""

    def __init__(self, weights: dict[str, np.ndarray], key: str) -> None:
        self.values = weights[key]
        self.scale = weights.get(key + ROW_SCALE_SUFFIX)

    @property
    def dim(self) -> int:
        return self.values.shape[1]


def _lookup_sum(table: EmbeddingTable, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the sum of the embeddings of its non-padding ids, and how many there are. An int8
    table's row scales weigh the sum (one per id) instead of rescaling every looked-up row."""
    mask = ids != PAD
    weights = mask.astype(np.float32)
    if table.scale is not None:
        weights *= table.scale[ids]
    total = np.einsum("bl,bld->bd", weights, table.values[ids].astype(np.float32, copy=False))
    return total, mask.sum(axis=1)


def _linear_layers(weights: dict[str, np.ndarray], prefix: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """The (weight.T, bias) pairs of the nn.Linear layers of the nn.Sequential ``prefix``, in
    order, as float32; empty if the model has none."""
    ids = sorted({int(key.split(".")[1]) for key in weights if key.startswith(f"{prefix}.")})
    return [(weights[f"{prefix}.{i}.weight"].T.astype(np.float32),
             weights[f"{prefix}.{i}.bias"].astype(np.float32)) for i in ids]


def _tanh_stack(x: np.ndarray, layers: list[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Linear layers with tanh between them (not after the last)."""
    for i, (weight, bias) in enumerate(layers):
        x = x @ weight + bias
        if i < len(layers) - 1:
            x = np.tanh(x)
    return x


class VocabularyEncoder(BatchedEncoder):
    """An encoder over the model's own vocabulary (``vocab.json``) and word embedding table."""

    def __init__(self, vocabulary: Vocabulary, weights: dict[str, np.ndarray], max_length: int) -> None:
        self.vocabulary, self.max_length = vocabulary, max_length
        self.words = EmbeddingTable(weights, "words.weight")

    @classmethod
    def from_directory(cls, directory: Path, config: dict[str, Any]) -> VocabularyEncoder:
        return cls(Vocabulary.load(directory / "vocab.json"), _encoder_weights(directory),
                   config["encoder"]["max_length"])

    def knows_words(self, text: str) -> bool:
        return self.vocabulary.knows_words(text)


class DanEncoder(VocabularyEncoder):
    """DAN (Yang et al. 2.3.1): (word + bigram embedding sums) / sqrt(n), then a feed-forward
    stack of linear layers with tanh between them, plus the residual branch if it has one."""

    kind = "dan"

    def __init__(self, vocabulary: Vocabulary, weights: dict[str, np.ndarray], max_length: int) -> None:
        super().__init__(vocabulary, weights, max_length)
        self.bigrams = EmbeddingTable(weights, "bigrams.weight") if "bigrams.weight" in weights else None
        self.layers = _linear_layers(weights, "feed_forward")
        self.residual = _linear_layers(weights, "residual")
        self.dim = self.layers[-1][1].shape[0] if self.layers else self.words.dim

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        ids = self.vocabulary.encode(texts, self.max_length)
        total, count = _lookup_sum(self.words, ids["words"])
        if self.bigrams is not None:
            bigram_total, bigram_count = _lookup_sum(self.bigrams, ids["bigrams"])
            total, count = total + bigram_total, count + bigram_count
        pooled = total / np.sqrt(np.maximum(count, 1))[:, None]
        output = _tanh_stack(pooled, self.layers)
        if self.residual:
            output += _tanh_stack(pooled, self.residual)
        return output


class CseEncoder(VocabularyEncoder):
    """CSE (Jiao et al. 3.1): wide convolutions of widths 1, 2, 3 without bias or activation,
    sum pooled over every window that sees a word. Every word then meets every kernel tap once,
    so each width's output is (the sum of its kernel taps) @ (the sum of the word embeddings)."""

    kind = "cse"

    def __init__(self, vocabulary: Vocabulary, weights: dict[str, np.ndarray], max_length: int) -> None:
        super().__init__(vocabulary, weights, max_length)
        kernels = [weights[key] for key in sorted(k for k in weights if k.startswith("convolutions."))]
        # (maps, embedding_dim, width) per width -> (maps * widths, embedding_dim)
        self.projection = np.concatenate([kernel.astype(np.float32).sum(axis=2)
                                          for kernel in kernels]).T.copy()
        self.dim = self.projection.shape[1]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        total, _ = _lookup_sum(self.words, self.vocabulary.encode(texts, self.max_length)["words"])
        return total @ self.projection


NUMPY_ENCODERS: dict[str, type[DanEncoder] | type[CseEncoder]] = {
    cls.kind: cls for cls in (DanEncoder, CseEncoder)
}
