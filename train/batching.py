"""Batches of training pairs in which no text occurs twice.

A text that appears twice in one in-batch-negative batch is its own false negative, so each
batch is filled greedily from a seeded shuffle and a pair whose input or response is already
in the batch waits for a later batch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from itertools import chain

import numpy as np

from askalike.core.text import normalize


def text_key(text: str) -> str:
    return " ".join(normalize(text).split())


def unique_text_batches(pairs: Sequence[tuple[str, str]], batch_size: int,
                        seed: int) -> list[list[int]]:
    """One epoch of batches (indices into ``pairs``) in a single pass over a seeded shuffle.

    A pair that collides with the batch being filled is carried to the next batch, where it is
    tried first. Pairs whose input equals their response are dropped.
    """
    keys = [(text_key(a), text_key(b)) for a, b in pairs]
    stream = iter(np.random.default_rng(seed).permutation(len(pairs)).tolist())
    carried: deque[int] = deque()
    batches: list[list[int]] = []
    while True:
        batch: list[int] = []
        seen: set[str] = set()
        collided: deque[int] = deque()
        candidates = chain(_drain(carried), stream)
        while len(batch) < batch_size and (index := next(candidates, None)) is not None:
            first, second = keys[index]
            if first == second:
                continue
            if first in seen or second in seen:
                collided.append(index)
                continue
            batch.append(index)
            seen.update((first, second))
        collided.extend(carried)
        carried = collided
        if not batch:
            return batches
        batches.append(batch)


def _drain(queue: deque[int]) -> Iterator[int]:
    while queue:
        yield queue.popleft()
