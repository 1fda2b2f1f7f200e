"""The models the project ships: they load, stay small, carry their config and figures, and
order plainly similar questions above unrelated ones."""

from pathlib import Path

import numpy as np
import pytest

from askalike.core.loader import load_encoder
from askalike.train.config import load_config
from askalike.train.trained_model import load_model

MODELS = Path(__file__).resolve().parents[1] / "models"
SHIPPED = ["fast", "accurate"]
# the accurate model carries its fp16 weights (for training and heads) and its int8 ONNX export
LIMIT_BYTES = {"fast": 40 * 1000 * 1000, "accurate": 85 * 1024 * 1024}

# (question, a paraphrase of it, an unrelated question)
TRIPLES = [
    ("How can I renew my residence permit in Qatar?",
     "What is the procedure to renew a residency visa in Doha?",
     "Which beach is good for swimming with kids?"),
    ("Where can I buy a cheap second-hand car?",
     "Any place to get a used car at a good price?",
     "How long does it take to get a work visa for my wife?"),
    ("A man is playing a guitar on stage.",
     "A musician plays the guitar at a concert.",
     "Two dogs are running through a snowy field."),
]


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_is_small_and_carries_its_config_and_figures(name):
    directory = MODELS / name
    size = sum(path.stat().st_size for path in directory.rglob("*") if path.is_file())
    assert size < LIMIT_BYTES[name], f"{directory}: {size / 2**20:.1f} MiB"
    config = load_config(directory / "train-config.toml")
    metrics = load_model(directory).metrics
    assert metrics["config"] == config.name
    evaluation = metrics["evaluation"]
    assert set(evaluation["cqa_map"]) == {"dev2016", "test2016", "test2017"}
    assert set(evaluation["stsb"]) == {"dev", "test"}


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_model_orders_similar_questions_above_unrelated_ones(name):
    encoder = load_encoder(MODELS / name)  # what every query uses
    for question, paraphrase, unrelated in TRIPLES:
        vectors = encoder.encode([question, paraphrase, unrelated])
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3)
        assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2], (name, question)


def test_shipped_transformer_export_runs_fused_attention_and_int8_products_per_token():
    """ONNX Runtime's optimiser fused every layer's attention (a newer exporter or transformers
    whose graph no longer matches the fusion would lose that silently), every matrix product is
    int8 with 7-bit weights, and each activation is rounded on the last axis (a token's own
    scale), never with a scale that a batch shares (that made vectors depend on their batch)."""
    import onnx
    from onnx import helper, numpy_helper

    from askalike.train.onnx_export import TOKEN_WEIGHT_LEVELS

    graph = onnx.load(str(MODELS / "accurate" / "model.onnx")).graph
    operators = [node.op_type for node in graph.node]
    layers = load_model(MODELS / "accurate").encoder.transformer.config.num_hidden_layers
    assert operators.count("MultiHeadAttention") == layers
    assert "Softmax" not in operators  # no attention left unfused
    assert "SkipLayerNormalization" not in operators  # its CPU kernel is the slower (onnx_export._fuse)
    assert not {"DynamicQuantizeLinear", "QAttention", "DynamicQuantizeMatMul"} & set(operators)
    # per layer: the query/key/value projection, the attention output, the feed-forward pair
    products = [node for node in graph.node if node.op_type == "MatMulIntegerToFloat"]
    assert len(products) == 4 * layers
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    assert not [node for node in graph.node if node.op_type in ("MatMul", "Gemm", "Attention")
                and node.input[1] in weights and weights[node.input[1]].ndim == 2]  # none in fp32
    assert all(np.abs(weights[node.input[1]]).max() <= TOKEN_WEIGHT_LEVELS for node in products)
    rounding = [node for node in graph.node if node.op_type == "ReduceMax"]
    assert len(rounding) == len(products)
    assert all({a.name: helper.get_attribute_value(a) for a in node.attribute}.get("axes") == [-1]
               for node in rounding)
