"""int8 embedding tables: per-row scales reproduce the table closely, zero rows stay zero."""

import numpy as np

from askalike.core.quantization import ROW_SCALE_SUFFIX, dequantize_rows, dequantize_tables, quantize_rows


def test_rows_round_trip_within_half_a_step_and_zero_rows_stay_zero():
    table = np.random.default_rng(0).normal(size=(50, 16)).astype(np.float32)
    table[0] = 0.0
    table[1] *= 1000.0  # a large row does not cost the small ones precision: scales are per row
    values, scale = quantize_rows(table)
    assert values.dtype == np.int8 and scale.shape == (50,)
    restored = dequantize_rows(values, scale)
    assert np.all(np.abs(restored - table) <= scale[:, None] / 2 + 1e-6)
    assert not restored[0].any()
    assert np.abs(values).max() == 127


def test_dequantize_tables_restores_floats_and_drops_the_scales():
    table = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    values, scale = quantize_rows(table)
    other = np.ones((2, 2), dtype=np.float16)
    restored = dequantize_tables({"words.weight": values, "words.weight" + ROW_SCALE_SUFFIX: scale,
                                  "bias": other})
    assert set(restored) == {"words.weight", "bias"}
    assert restored["words.weight"].dtype == np.float32 and restored["bias"] is other
    np.testing.assert_allclose(restored["words.weight"], table, atol=float(scale.max()))
