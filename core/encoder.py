"""Encoders: texts in, float32 vectors out.

``Encoder`` is the one protocol that indexing, search, reranking and evaluation take; the torch
training modules (``train.modules``) have it too. The encoders that answer queries are
``BatchedEncoder``s that run without torch (``core.loader.load_encoder`` gives them).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

import numpy as np


class Encoder(Protocol):
    kind: str
    dim: int

    def encode(self, texts: Sequence[str], batch_size: int = 256, normalize: bool = True) -> np.ndarray:
        """Embeddings, shape (len(texts), dim), float32, L2-normalised unless told otherwise."""
        ...


class BatchedEncoder:
    """An ``Encoder`` built on ``embed_batch`` (one batch of texts to unnormalised vectors):
    ``encode`` orders texts by length so that batches carry little padding, and L2-normalises."""

    kind: str
    dim: int
    max_batch: int = 1 << 30  # texts per embed_batch call at most, whatever batch_size asks
    # characters per embed_batch call at most, counting each text as long as the batch's longest
    # (its padding), but always one text; None: no limit
    max_batch_chars: int | None = None

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def knows_words(self, text: str) -> bool:
        """Does the model know any token of ``text`` (a word of its vocabulary, a word piece
        other than the unknown one)? A text of unknown tokens alone gets a vector that says
        nothing about it."""
        raise NotImplementedError

    def embed_batches(self, batches: Iterable[Sequence[str]]) -> Iterator[np.ndarray]:
        """``embed_batch`` of each batch, in order; an encoder may override it to prepare the
        next batch while one computes."""
        return map(self.embed_batch, batches)

    def encode(self, texts: Sequence[str], batch_size: int = 256, normalize: bool = True) -> np.ndarray:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        result = np.zeros((len(texts), self.dim), dtype=np.float32)
        lengths = np.array([len(text) for text in texts], dtype=np.int64)
        order = np.argsort(lengths, kind="stable")
        chunks = self._chunks(order, lengths[order], min(batch_size, self.max_batch))
        batches = ([texts[i] for i in chunk] for chunk in chunks)
        for chunk, vectors in zip(chunks, self.embed_batches(batches), strict=True):
            vectors = vectors.astype(np.float32, copy=False)
            if normalize:
                norms = np.linalg.norm(vectors, axis=1, keepdims=True)
                vectors = vectors / np.maximum(norms, 1e-12)
            result[chunk] = vectors
        return result

    def _chunks(self, order: np.ndarray, sorted_lengths: np.ndarray, step: int) -> list[np.ndarray]:
        """``order`` (texts, shortest first) cut into runs of at most ``step`` texts and, with
        ``max_batch_chars``, at most that many characters padded to the run's last (longest) text."""
        if self.max_batch_chars is None:
            return [order[start : start + step] for start in range(0, len(order), step)]
        chunks, start = [], 0
        while start < len(order):
            end = start + 1
            while (end < len(order) and end - start < step
                   and (end - start + 1) * sorted_lengths[end] <= self.max_batch_chars):
                end += 1
            chunks.append(order[start:end])
            start = end
        return chunks
