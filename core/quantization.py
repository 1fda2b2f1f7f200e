"""Embedding tables stored as int8 with one scale per row (symmetric, absmax / 127).

A static encoder's size is almost all embedding table; int8 halves what fp16 takes, so the
same disk budget holds twice the rows. The numpy encoders keep the int8 rows in memory and
scale only the rows a batch looks up; training reads the tables back as floats.
"""

from __future__ import annotations

import numpy as np

ROW_SCALE_SUFFIX = ".row_scale"  # key of a quantized table's scales: its own key + this


def quantize_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 values, float32 scale per row) with ``values * scale[:, None]`` close to ``table``;
    all-zero rows (padding, unseen buckets) stay exactly zero."""
    table = table.astype(np.float32, copy=False)
    scale = np.abs(table).max(axis=1) / 127.0
    safe = np.where(scale > 0, scale, 1.0)
    values = np.clip(np.rint(table / safe[:, None]), -127, 127).astype(np.int8)
    return values, scale.astype(np.float32)


def dequantize_rows(values: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return values.astype(np.float32) * scale.astype(np.float32)[..., None]


def dequantize_tables(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``weights`` with every quantized table replaced by its float32 values (scales dropped)."""
    tables = {key.removesuffix(ROW_SCALE_SUFFIX) for key in weights if key.endswith(ROW_SCALE_SUFFIX)}
    return {key: dequantize_rows(value, weights[key + ROW_SCALE_SUFFIX]) if key in tables else value
            for key, value in weights.items() if not key.endswith(ROW_SCALE_SUFFIX)}
