"""Export of transformer encoders to ONNX, for answering queries with ONNX Runtime, no torch.

The graph takes the tokenizer's id arrays and returns the pooled (unnormalised) sentence
embedding, so pooling runs inside ONNX Runtime. ONNX Runtime's transformer optimiser then fuses
each attention block into one ``Attention`` kernel (see ``_fuse``), and every weight (MatMuls, the
fused attention's projections, the embedding tables) is stored in int8. A Hugging Face backbone's
MatMuls then compute in int8 too, each token's activations with a scale of their own, so that a
text's vector never depends on its batch (see ``_quantize``).
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from askalike.core.model_dir import ONNX_FILE, TOKEN_QUANTIZATION, WEIGHT_QUANTIZATION
from askalike.train.modules import EncoderModule

# what ``_quantize`` computes, recorded in config.json for the torch encoder to mirror
QUANTIZATIONS = (WEIGHT_QUANTIZATION, TOKEN_QUANTIZATION)
INT8_LEVELS = 127  # symmetric int8: -127..127, zero exact
TOKEN_SMALLEST_SCALE = 1e-12  # a row of zeros: any scale gives zeros, but not 0 / 0
# 7-bit weights under int8 activations: without AVX-512 VNNI, ONNX Runtime's u8 x s8 kernel adds
# pairs of products in int16, which saturates past 2 x 255 x 64; so every x86 CPU sums exactly
TOKEN_WEIGHT_LEVELS = 63
SAMPLE_TEXTS = ["how do i renew my visa in doha", "cheap car"]
OUTPUT_NAME = "sentence_embedding"


@contextlib.contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Only errors from this logger (and its children) while the block runs."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def quantizable_nodes(source: Path) -> dict[str, list[str]]:
    """The names of a fused graph's nodes that int8 can take, by role: "attention" (a fused
    block: its query/key/value projection), "embeddings" (table lookups), and the MatMuls (or
    Gemms, in the project's own transformer) with a weight by its shape, "expanding" (the
    feed-forward input), "square" (the attention output) and "contracting" (the feed-forward
    output)."""
    import onnx
    from onnx.helper import get_attribute_value

    graph = onnx.load(str(source)).graph
    shapes = {initializer.name: tuple(initializer.dims) for initializer in graph.initializer}
    roles: dict[str, list[str]] = {"attention": [], "embeddings": [], "expanding": [], "square": [],
                                   "contracting": []}
    for node in graph.node:
        if node.op_type == "Attention":
            roles["attention"].append(node.name)
        elif node.op_type == "Gather" and node.input[0] in shapes:
            roles["embeddings"].append(node.name)
        elif node.op_type in ("MatMul", "Gemm") and len(shape := shapes.get(node.input[1], ())) == 2:
            transposed = any(a.name == "transB" and get_attribute_value(a) for a in node.attribute)
            inputs, outputs = reversed(shape) if transposed else shape
            role = "expanding" if inputs < outputs else "square" if inputs == outputs else "contracting"
            roles[role].append(node.name)
    return roles


def quantize_nodes(source: Path, target: Path, nodes: list[str]) -> None:
    """int8 weights (per output channel) and dynamic int8 activations for ``nodes``. The others
    are excluded by name rather than these included: the quantiser takes a Gemm by splitting it
    into a MatMul of a new name and an Add."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    chosen = set(nodes)
    graph = onnx.load(str(source)).graph
    # only the chosen nodes' op types: an excluded Gemm of another type would still be taken
    kinds = sorted({node.op_type for node in graph.node if node.name in chosen})
    others = [node.name for node in graph.node if node.op_type in kinds and node.name not in chosen]
    with _quiet(""):  # the quantiser's advice on image models' pre-processing
        quantize_dynamic(source, target, weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=kinds, nodes_to_exclude=others,
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def _quantize(source: Path, target: Path, token_activations: bool) -> None:
    """Every weight stored in int8, and no activation quantised with a scale that another text
    shares: ONNX Runtime's dynamic quantisation takes one scale for a whole batch, padding
    included, which moved a question's vector with its batch mates (cosine 0.984 to itself alone
    on models/accurate). The file is as small as a fully int8 one.

    - A MatMul's, Gemm's or fused Attention's weight: one symmetric scale per output channel.
      With ``token_activations`` (a Hugging Face backbone's graph) a MatMul and the attention's
      query/key/value projection compute in int8, each token's input row with a scale of its own
      (``_token_int8_matmul``): a token's vector depends on its text alone, and models/accurate
      encodes about 1.8x the sentences/s of fp32 compute on a CPU with VNNI (docs/results.md).
      Otherwise the weight is restored by Cast + Mul, which ONNX Runtime folds into an fp32
      constant when it loads the graph (a DequantizeLinear would run on every call).
    - An embedding table: one scale per row (token), not ONNX Runtime's one for the whole table,
      which lost the small vectors of rare tokens (CQA test 2017 MAP 0.37 below the torch
      model). The rows a batch looks up are restored after the lookup, so that the table stays
      int8 in memory too (folded, it took 145 MB more a session)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    initializers = {initializer.name: initializer for initializer in model.graph.initializer}
    tables = _lookup_tables(model.graph, initializers)
    quantized: dict[str, tuple[bool, int]] = {}  # weight: (scales per row, levels)

    def stored_int8(weight: str, per_row: bool, levels: int = INT8_LEVELS) -> bool:
        """Replace ``weight`` by its int8 values and scales; False if it already was (the same
        way: a weight that two kinds of node read cannot be stored for both)."""
        if weight in quantized:
            if quantized[weight] != (per_row, levels):
                raise ValueError(f"{weight}: read by nodes that take it in different int8 layouts")
            return False
        values, scale = _int8_columns(numpy_helper.to_array(initializers[weight]), per_row, levels)
        model.graph.initializer.remove(initializers[weight])
        model.graph.initializer.extend([numpy_helper.from_array(values, f"{weight}_int8"),
                                        numpy_helper.from_array(scale, f"{weight}_scale")])
        quantized[weight] = (per_row, levels)
        return True

    opset = next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    if token_activations:  # only those used: ONNX Runtime warns of an unused initializer
        constants = dict(_TOKEN_CONSTANTS)
        if opset >= 18:
            constants["token_last_axis"] = np.array([-1], np.int64)
        if not any(entry.domain == "com.microsoft" for entry in model.opset_import):
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))  # MatMulIntegerToFloat's
        model.graph.initializer.extend(numpy_helper.from_array(value, name)
                                       for name, value in constants.items())
    nodes = []
    for node in model.graph.node:
        weighted = _is_matrix(initializers, node.input[1]) if len(node.input) > 1 else False
        if token_activations and weighted and node.op_type in ("MatMul", "Attention"):
            weight, attention = node.input[1], node.op_type == "Attention"
            # named after the node's output, which is unique in a graph (a node's name need not be)
            prefix = node.output[0]
            after_attention = (_attention_after_projection(node, prefix, initializers[weight].dims[1] // 3,
                                                           model.graph) if attention else [])
            stored_int8(weight, per_row=False, levels=TOKEN_WEIGHT_LEVELS)
            product = f"{prefix}_projected" if attention else node.output[0]
            nodes += _token_int8_matmul(node.input[0], weight, product, prefix, opset) + after_attention
            continue
        if weighted and node.op_type in ("MatMul", "Gemm", "Attention"):
            weight = node.input[1]
            if stored_int8(weight, _transposed(node)):  # restored once, for every node reading it
                nodes += [helper.make_node("Cast", [f"{weight}_int8"], [f"{weight}_float"],
                                           name=f"{weight}_cast", to=onnx.TensorProto.FLOAT),
                          helper.make_node("Mul", [f"{weight}_float", f"{weight}_scale"], [weight],
                                           name=f"{weight}_scale")]
        elif node.op_type == "Gather" and node.input[0] in tables:
            table, ids, rows = node.input[0], node.input[1], node.output[0]
            stored_int8(table, per_row=True)
            node.input[0], node.output[0] = f"{table}_int8", f"{rows}_int8"
            nodes += [node,
                      helper.make_node("Gather", [f"{table}_scale", ids], [f"{rows}_scale"],
                                       name=f"{rows}_scale_lookup"),
                      helper.make_node("Cast", [f"{rows}_int8"], [f"{rows}_float"],
                                       name=f"{rows}_cast", to=onnx.TensorProto.FLOAT),
                      helper.make_node("Mul", [f"{rows}_float", f"{rows}_scale"], [rows],
                                       name=f"{rows}_scaled")]
            continue
        nodes.append(node)
    model.graph.ClearField("node")
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(target))


_TOKEN_CONSTANTS = {"token_int8_levels": np.array(float(INT8_LEVELS), np.float32),
                    "token_int8_smallest_scale": np.array(TOKEN_SMALLEST_SCALE, np.float32),
                    "token_unit_scale": np.array(1.0, np.float32),
                    "token_uint8_zero": np.array(128, np.uint8)}


def _token_int8_matmul(inputs: str, weight: str, output: str, prefix: str, opset: int) -> list[Any]:
    """Nodes computing ``inputs @ weight`` in int8, each row of ``inputs`` (a token) quantised
    with its own symmetric scale (its largest magnitude / 127, as ``token_int8`` does in torch),
    shifted to uint8 for ONNX Runtime's u8 x s8 kernels, and the int32 products scaled back by
    the weight column's scales (inside ``MatMulIntegerToFloat``) and the row's.

    The rounding, shift and cast are one ``QuantizeLinear`` of the row-scaled input (scale 1),
    and ``MatMulIntegerToFloat`` applies the column scales as it writes the products: 3-6%
    more sentences/s than the same arithmetic in separate Round, Add, Cast, Cast and Mul nodes,
    each a pass over a whole activation tensor (docs/results.md)."""
    from onnx import helper

    def name(part: str) -> str:
        return f"{prefix}_{part}"

    if opset >= 18:  # the axes of a reduction became an input
        largest = helper.make_node("ReduceMax", [name("magnitude"), "token_last_axis"], [name("largest")],
                                   name=name("largest"), keepdims=1)
    else:
        largest = helper.make_node("ReduceMax", [name("magnitude")], [name("largest")], name=name("largest"),
                                   axes=[-1], keepdims=1)
    return [helper.make_node("Abs", [inputs], [name("magnitude")], name=name("magnitude")), largest,
            helper.make_node("Div", [name("largest"), "token_int8_levels"], [name("unclamped_scale")],
                             name=name("unclamped_scale")),
            helper.make_node("Max", [name("unclamped_scale"), "token_int8_smallest_scale"],
                             [name("row_scale")], name=name("row_scale")),
            helper.make_node("Div", [inputs, name("row_scale")], [name("scaled")], name=name("scaled")),
            helper.make_node("QuantizeLinear", [name("scaled"), "token_unit_scale", "token_uint8_zero"],
                             [name("uint8")], name=name("uint8")),
            helper.make_node("MatMulIntegerToFloat",
                             [name("uint8"), f"{weight}_int8", "token_unit_scale", f"{weight}_scale",
                              "token_uint8_zero"],
                             [name("column_scaled")], name=name("column_scaled"), domain="com.microsoft"),
            helper.make_node("Mul", [name("column_scaled"), name("row_scale")], [output],
                             name=name("row_scaled"))]


def _attention_after_projection(attention: Any, prefix: str, hidden: int, graph: Any) -> list[Any]:
    """A fused ``Attention`` node's work after its query/key/value projection (the tensor
    ``{prefix}_projected``, the three parts of ``hidden`` side by side): ONNX Runtime's
    ``MultiHeadAttention`` kernel on the three parts, with the projection's bias, the padding mask
    (a length a text, or a 0/1 mask) and the attributes the ``Attention`` node had. Refused where
    ``MultiHeadAttention`` would not compute the same: past state, an attention bias, unequal
    projection sizes, a causal mask."""
    from onnx import helper, numpy_helper

    attributes = {a.name: helper.get_attribute_value(a) for a in attention.attribute}
    unsupported = set(attributes) - {"num_heads", "scale", "mask_filter_value"}
    if unsupported or any(attention.input[4:]) or len(attention.output) > 1 or len(attention.input) < 3:
        raise ValueError(f"{attention.name or attention.output[0]}: an Attention node with "
                         f"{', '.join(sorted(unsupported)) or 'past state or an attention bias'}, "
                         "which the int8 export does not rewrite")
    sizes = f"{prefix}_split_sizes"
    graph.initializer.append(numpy_helper.from_array(np.array([hidden] * 3, np.int64), sizes))
    parts = [f"{prefix}_{part}" for part in ("query", "key", "value")]
    return [helper.make_node("Split", [f"{prefix}_projected", sizes], parts, name=f"{prefix}_split", axis=-1),
            helper.make_node("MultiHeadAttention", [*parts, *attention.input[2:4]], list(attention.output),
                             name=f"{prefix}_attention", domain="com.microsoft", **attributes)]


def _is_matrix(initializers: dict[str, Any], name: str) -> bool:
    return name in initializers and len(initializers[name].dims) == 2


def _lookup_tables(graph: Any, initializers: dict[str, Any]) -> set[str]:
    """The float 2-D initializers that only row lookups read (Gathers on axis 0): the tables
    whose rows can be scaled after the lookup. One that anything else reads (a tied output
    projection, a Shape) stays as it is."""
    import onnx
    from onnx import helper

    readers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)

    def row_lookup(node: Any, name: str) -> bool:
        axis = next((helper.get_attribute_value(a) for a in node.attribute if a.name == "axis"), 0)
        return node.op_type == "Gather" and list(node.input).index(name) == 0 and axis == 0

    return {name for name, nodes in readers.items()
            if _is_matrix(initializers, name) and initializers[name].data_type == onnx.TensorProto.FLOAT
            and all(row_lookup(node, name) for node in nodes)}


def _transposed(node: Any) -> bool:
    """Whether a Gemm takes its weight transposed (``transB``): a scale per row, not column."""
    from onnx import helper

    return any(a.name == "transB" and helper.get_attribute_value(a) for a in node.attribute)


def _int8_columns(weight: Any, transposed: bool, levels: int = INT8_LEVELS) -> tuple[Any, Any]:
    """(int8 values in -levels..levels, float32 scales) of a 2-D weight, one scale per output
    channel: a column of an (inputs, outputs) matrix, a row of a transposed one; the scales
    broadcast back."""
    axis = 1 if transposed else 0
    scale = np.abs(weight).max(axis=axis, keepdims=True) / float(levels)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    values = np.clip(np.rint(weight / scale), -levels, levels).astype(np.int8)
    return values, scale


def _fuse(source: Path, target: Path, encoder: EncoderModule) -> None:
    """ONNX Runtime's BERT optimiser: attention and bias-GELU fusions. Attention fuses only in a
    Hugging Face backbone's graph (see ``_write_graph``); the embedding lookups stay plain Gathers
    so that they can be quantised. The residual's Adds stay beside their LayerNormalization: ONNX
    Runtime's CPU kernel of the fused SkipLayerNormalization took 156 us for 64 tokens of 384
    against 39 us for Add, Add and LayerNormalization (ONNX Runtime 1.32, one AVX2 core:
    bench/experiments/layer_norm_kernels.py), and models/accurate encodes 1.03-1.13x the
    sentences/s without it (docs/results.md); sessions keep ONNX Runtime from fusing them again
    at load (``core.onnx_encoder.DISABLED_FUSIONS``). On models/accurate the fused fp32 graph
    encoded 1.15x the sentences/s of the unfused one (measured with the LayerNorms fused too)."""
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    options = FusionOptions("bert")
    options.enable_embed_layer_norm = False
    options.enable_skip_layer_norm = False
    config = getattr(getattr(encoder, "transformer", None), "config", None)
    heads = getattr(config, "num_attention_heads", getattr(encoder, "heads", 0))
    hidden = getattr(config, "hidden_size", getattr(encoder, "hidden", 0))
    with _quiet(""):
        optimized = optimize_model(str(source), model_type="bert", num_heads=heads,
                                   hidden_size=hidden, optimization_options=options, opt_level=1)
    optimized.save_model_to_file(str(target))


class _PooledEncoder(torch.nn.Module):
    """The encoder with its inputs as positional arrays, as ONNX export wants them."""

    def __init__(self, encoder: EncoderModule, input_names: list[str]) -> None:
        super().__init__()
        self.encoder, self.input_names = encoder, input_names

    def forward(self, *arrays: torch.Tensor) -> torch.Tensor:
        return self.encoder(dict(zip(self.input_names, arrays, strict=True)))


def _write_graph(encoder: EncoderModule, sample: dict[str, torch.Tensor], path: Path) -> None:
    """The encoder as an ONNX graph of dynamic batch and length. A Hugging Face backbone goes
    through the TorchScript exporter with eager attention, the graph ONNX Runtime's optimiser
    fuses (``_fuse``); the project's own transformer through dynamo, whose graph keeps
    ``nn.TransformerEncoder``'s shapes dynamic."""
    input_names = list(sample)
    model = _PooledEncoder(encoder, input_names)
    transformer = getattr(encoder, "transformer", None)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _quiet("torch"):
        warnings.simplefilter("ignore")  # the exporters' notes on their own internals
        if transformer is not None:
            if hasattr(transformer, "set_attn_implementation"):  # older transformers: the config attribute
                transformer.set_attn_implementation("eager")
            else:
                transformer.config._attn_implementation = "eager"
            torch.onnx.export(model, tuple(sample.values()), str(path), input_names=input_names,
                              output_names=[OUTPUT_NAME], dynamo=False, opset_version=17,
                              dynamic_axes={name: {0: "batch", 1: "length"} for name in input_names})
        else:
            batch, length = torch.export.Dim("batch"), torch.export.Dim("length")
            torch.onnx.export(model, tuple(sample.values()), str(path), input_names=input_names,
                              output_names=[OUTPUT_NAME], dynamo=True, opset_version=18,
                              dynamic_shapes=(tuple({0: batch, 1: length} for _ in input_names),),
                              external_data=False)


def rounded_copy(encoder: EncoderModule, weight_dtype: str) -> EncoderModule:
    """A copy of ``encoder`` on the CPU, in eval mode, its weights rounded to ``weight_dtype`` (the
    precision they are saved in): what the export traces, wherever the encoder was trained."""
    rounded = copy.deepcopy(encoder).to("cpu").eval()
    with torch.no_grad():
        for parameter in rounded.parameters():
            parameter.copy_(parameter.to(getattr(torch, weight_dtype)).float())
    return rounded


def as_exported(encoder: EncoderModule, weight_dtype: str, quantization: str) -> EncoderModule:
    """A CPU copy of ``encoder`` that computes what its ONNX export computes, for running it in
    torch elsewhere (``train.torch_encoder``): the weights rounded as saved, then, where the
    export is quantised (``_quantize``, its ``quantization`` label), every matrix and embedding
    table read back from its int8 rows, and with ``TOKEN_QUANTIZATION`` every Linear of the
    backbone taking its input as ``token_int8`` rounds it."""
    rounded = rounded_copy(encoder, weight_dtype)
    if quantization not in QUANTIZATIONS:
        return rounded
    token_linears = []  # the backbone's (its pooler's too, which the export prunes: harmless)
    if quantization == TOKEN_QUANTIZATION:
        token_linears = [module for module in rounded.transformer.modules()
                         if isinstance(module, torch.nn.Linear)]
    seven_bit = {id(module.weight) for module in token_linears}
    with torch.no_grad():
        # torch keeps a matrix as (outputs, inputs) and a table as (tokens, width): a scale per row
        for weight in _quantized_weights(rounded):
            levels = TOKEN_WEIGHT_LEVELS if id(weight) in seven_bit else INT8_LEVELS
            integers, scale = _int8_columns(weight.numpy(), transposed=True, levels=levels)
            weight.copy_(torch.from_numpy(integers.astype(scale.dtype) * scale))
    for module in token_linears:
        module.register_forward_pre_hook(lambda _, inputs: (token_int8(inputs[0]), *inputs[1:]))
    return rounded


def token_int8(inputs: torch.Tensor) -> torch.Tensor:
    """Each row (token) of ``inputs`` rounded to the int8 levels of its own symmetric scale (its
    largest magnitude / 127): what an int8 MatMul of the export takes (``_token_int8_matmul``)."""
    scale = torch.clamp(inputs.abs().amax(dim=-1, keepdim=True) / INT8_LEVELS, min=TOKEN_SMALLEST_SCALE)
    return torch.round(inputs / scale) * scale


def _quantized_weights(encoder: EncoderModule) -> list[torch.nn.Parameter]:
    """The weights that ``_quantize`` stores in int8: every embedding table, every Linear's
    matrix and the packed query/key/value projection of a ``MultiheadAttention`` (what the
    export's Gathers, MatMuls and Gemms take as a stored tensor)."""
    tables = [module.weight for module in encoder.modules() if isinstance(module, torch.nn.Embedding)]
    linear = [module.weight for module in encoder.modules() if isinstance(module, torch.nn.Linear)]
    packed = [module.in_proj_weight for module in encoder.modules()
              if isinstance(module, torch.nn.MultiheadAttention) and module.in_proj_weight is not None]
    return tables + linear + packed


def export_onnx(encoder: EncoderModule, directory: Path, weight_dtype: str = "float32",
                quantize: bool = True) -> dict[str, Any]:
    """Write ``directory/model.onnx`` and return its description for config.json. The export
    traces a CPU copy of ``encoder`` (it may have been trained on a GPU) with its weights
    rounded to ``weight_dtype`` (the precision they are saved in, as in config.json), so that it
    computes what the saved torch model computes."""
    rounded = rounded_copy(encoder, weight_dtype)
    # hashed bigrams feed only the DAN, which runs in numpy; the other inputs share one shape
    sample = {name: ids for name, ids in rounded.tokenize(SAMPLE_TEXTS).items() if name != "bigrams"}
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        full, fused = Path(scratch) / "full.onnx", Path(scratch) / "fused.onnx"
        _write_graph(rounded, sample, full)
        _fuse(full, fused, rounded)
        result, quantization = fused, "none"
        if quantize:
            # int8 per token where ONNX Runtime's optimiser fused the attention: a backbone's graph
            backbone = getattr(rounded, "transformer", None) is not None
            quantization = TOKEN_QUANTIZATION if backbone else WEIGHT_QUANTIZATION
            result = Path(scratch) / "int8.onnx"
            _quantize(fused, result, token_activations=backbone)
        os.replace(result, directory / ONNX_FILE)  # readers see the old file or the whole new one
    return {"file": ONNX_FILE, "inputs": list(sample), "quantization": quantization}
