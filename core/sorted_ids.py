"""Membership of ids in a sorted id array, vectorised (a search checks a few hundred candidates
against a collection's ids many times a second)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def find_sorted(sorted_ids: np.ndarray,
                wanted: Sequence[int] | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(``wanted`` as int64, a mask of those in ``sorted_ids``, their slots in it): where the
    mask is True, ``sorted_ids[slots] == wanted``."""
    wanted = np.asarray(wanted, dtype=np.int64)
    if not len(sorted_ids):
        return wanted, np.zeros(len(wanted), dtype=bool), np.zeros(len(wanted), dtype=np.int64)
    slots = np.searchsorted(sorted_ids, wanted).clip(max=len(sorted_ids) - 1)
    return wanted, sorted_ids[slots] == wanted, slots
