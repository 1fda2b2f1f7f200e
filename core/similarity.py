"""Similarity of embeddings: the cosine of two texts and Yang et al.'s 0-5 scale."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from askalike.core.encoder import BatchedEncoder
from askalike.core.errors import UserError


def angular_similarity(cosine: np.ndarray) -> np.ndarray:
    """Yang et al.'s 0-5 similarity: 5 * (1 - arccos(cos) / pi)."""
    return 5.0 * (1.0 - np.arccos(np.clip(cosine, -1.0, 1.0)) / math.pi)


class EmptyTextError(UserError):
    """A text with nothing to compare: it has no meaning to measure."""


def pair_cosine(vectors: np.ndarray) -> float:
    """The cosine of two embeddings, renormalised in float64 so that a vector with itself gives
    exactly 1.0 (float32 rounding would otherwise give 0.9999999, i.e. 4.9993 on the 0-5 scale)."""
    first, second = (np.asarray(vector, dtype=np.float64) for vector in vectors)
    norms = np.linalg.norm(first) * np.linalg.norm(second)
    return float(np.clip(first @ second / norms, -1.0, 1.0)) if norms > 0 else 0.0


def require_text(texts: Sequence[str], what: str = "text") -> None:
    """Refuse empty or blank texts, and texts holding a NUL (no text has one: a binary file, or
    a program's slip), naming which one."""
    for position, text in enumerate(texts, start=1):
        if not text.strip():
            raise EmptyTextError(f"{what} {position} is empty: give some words to compare")
        if "\x00" in text:
            raise EmptyTextError(f"{what} {position} holds a NUL character: give text")


def require_known_words(encoder: BatchedEncoder, texts: Sequence[str], model: str) -> None:
    """Refuse a text none of whose words ``model`` knows: its vector means nothing, and two such
    texts would come out as alike (all-unknown texts share one vector)."""
    for position, text in enumerate(texts, start=1):
        if not encoder.knows_words(text):
            raise EmptyTextError(f"text {position}: {model} knows none of its words (every token is "
                                 "outside its vocabulary), so no similarity can be measured")
