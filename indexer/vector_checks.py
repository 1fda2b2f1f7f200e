"""What is wrong with a stored vector, if anything: its length, the CRC-32 of its bytes, and
whether it is finite and of unit norm (the store verifies every vector it reads; an upgrade of a
schema-1 database checks each before giving it a checksum)."""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np

NORM_TOLERANCE = 1e-3  # a stored vector's norm is 1 within this, else it is damaged


def norm_problems(blobs: Sequence[bytes], dim: int) -> list[str | None]:
    """Per vector of the right length, whether it is finite and of unit norm."""
    problems: list[str | None] = [None] * len(blobs)
    if not blobs:
        return problems
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), dim)
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
    for i in np.flatnonzero(~(np.abs(norms - 1.0) <= NORM_TOLERANCE)):  # NaN fails the test too
        finite = np.isfinite(norms[i])
        problems[i] = f"norm {norms[i]:.3g}, not 1" if finite else "not finite (NaN or infinite values)"
    return problems


def vector_problems(blobs: Sequence[bytes], checksums: Sequence[int | None] | None,
                    dim: int) -> list[str | None]:
    """What is wrong with each stored vector (None: sound): its length, its checksum (``checksums``
    None: a schema-1 database, which has none) and its norm."""
    problems: list[str | None] = [None] * len(blobs)
    sized: list[int] = []
    for i, blob in enumerate(blobs):
        if len(blob) != 4 * dim:
            problems[i] = f"{len(blob)} bytes, a {dim}-dimensional vector has {4 * dim}"
        elif checksums is not None and checksums[i] is None:
            problems[i] = "no checksum: it was already damaged when the database was upgraded"
        elif checksums is not None and zlib.crc32(blob) != checksums[i]:
            problems[i] = "its bytes do not match their checksum"
        else:
            sized.append(i)
    for i, problem in zip(sized, norm_problems([blobs[i] for i in sized], dim), strict=True):
        problems[i] = problem
    return problems
