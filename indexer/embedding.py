"""How an index run turns its chunks of texts into vectors (the engine's one job).

Whatever the engine, each chunk is embedded by one ``Encoder.encode`` call with the run's batch
size, so that both engines store the same vectors, bit for bit: ``encode`` orders a chunk's texts
by length and pads per batch, so a vector may depend on the other texts of its chunk.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from askalike.core.encoder import Encoder


class EmbeddingEngine(Protocol):
    """What embeds an index run's chunks (``--engine``): it streams them through the run's
    ``Encoder``, in this process or on a Ray cluster; the encoder turns texts into vectors."""

    def embed(self, chunks: Iterable[list[str]]) -> Iterator[np.ndarray]:
        """The vectors of each chunk, in the chunks' order. It may read chunks ahead of the
        vectors it has yielded (a bounded number)."""
        ...


@dataclass
class InProcessEngine:
    """``--engine in-process``: in this process, one chunk at a time, the next one encoding on a
    thread of its own while the caller stores the last, so that the cores do not wait while a
    chunk is written to the database."""

    encoder: Encoder
    batch_size: int

    def embed(self, chunks: Iterable[list[str]]) -> Iterator[np.ndarray]:
        ahead = ThreadPoolExecutor(1, thread_name_prefix="askalike-embed")
        try:
            encoding: Future[np.ndarray] | None = None
            for texts in chunks:
                following = ahead.submit(self.encoder.encode, texts, batch_size=self.batch_size)
                if encoding is not None:
                    yield encoding.result()
                encoding = following
            if encoding is not None:
                yield encoding.result()
        except BaseException:  # Ctrl-C, a failed chunk, a caller that stopped: no wait for the chunk
            ahead.shutdown(wait=False, cancel_futures=True)  # being encoded, whose vectors are lost
            raise
        ahead.shutdown()
