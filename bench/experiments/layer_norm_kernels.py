"""Why the export keeps the residual's Adds beside LayerNormalization (issue 55): ONNX Runtime's
fused ``SkipLayerNormalization`` (residual + bias + LayerNorm in one contrib kernel, what its BERT
optimiser writes by default) against the three standard nodes it replaces, on one thread, at the
shape of one text of ``models/accurate`` (hidden 384) and a few lengths, beside a graph that only
copies its input (what a run costs around its kernel). Both graphs take the same inputs; the
largest difference of their outputs is printed beside the times. The sessions apply ONNX
Runtime's basic optimisations only, so that it cannot fuse the three nodes at load.

    python -m bench.experiments.layer_norm_kernels [--hidden 384] [--lengths 8 64 128]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from bench.harness import markdown_table

RUNS, ROUNDS = 400, 5


def _session(nodes: list[Any], initializers: list[Any], hidden: int) -> Any:
    import onnxruntime
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, None, hidden])
              for name in ("x", "skip")]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, hidden])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(helper.make_graph(nodes, "layer_norm", inputs, [output], initializers),
                              opset_imports=opsets)
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])


def _microseconds(session: Any, feeds: dict[str, np.ndarray]) -> float:
    """The best of ``ROUNDS`` rounds' mean time of one run, after a warm-up."""
    for _ in range(RUNS // 4):
        session.run(None, feeds)
    best = float("inf")
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(RUNS):
            session.run(None, feeds)
        best = min(best, (time.perf_counter() - start) / RUNS)
    return best * 1e6


def main() -> None:
    from onnx import helper, numpy_helper

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 64, 128], help="tokens of one text")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    gamma, beta, bias = (numpy_helper.from_array(rng.normal(size=args.hidden).astype(np.float32), name)
                         for name in ("gamma", "beta", "bias"))
    fused = _session([helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                                       ["y"], domain="com.microsoft", epsilon=1e-12)],
                     [gamma, beta, bias], args.hidden)
    separate = _session([helper.make_node("Add", ["x", "bias"], ["biased"]),
                         helper.make_node("Add", ["biased", "skip"], ["summed"]),
                         helper.make_node("LayerNormalization", ["summed", "gamma", "beta"], ["y"], axis=-1,
                                          epsilon=1e-12)], [gamma, beta, bias], args.hidden)
    empty = _session([helper.make_node("Identity", ["x"], ["y"])], [], args.hidden)
    rows = []
    for length in args.lengths:
        feeds = {name: rng.normal(size=(1, length, args.hidden)).astype(np.float32) for name in ("x", "skip")}
        difference = np.abs(fused.run(None, feeds)[0] - separate.run(None, feeds)[0]).max()
        # in the order fused, separate, separate, fused: a machine slowing down favours neither
        order = [fused, separate, separate, fused]
        times = [_microseconds(session, feeds) for session in order]
        fused_us = min(t for session, t in zip(order, times, strict=True) if session is fused)
        separate_us = min(t for session, t in zip(order, times, strict=True) if session is separate)
        copy_us = _microseconds(empty, feeds)
        rows.append([f"{length}", f"{fused_us:.1f}", f"{separate_us:.1f}", f"{copy_us:.1f}",
                     f"{fused_us / separate_us:.2f}x", f"{difference:.1e}"])
    print(f"one text of {args.hidden} wide, 1 thread; us per run, best of {ROUNDS} rounds of {RUNS}")
    print(markdown_table(["tokens", "SkipLayerNormalization us", "Add, Add, LayerNormalization us",
                          "a copy of the input us", "fused / separate", "largest difference"], rows))


if __name__ == "__main__":
    main()
