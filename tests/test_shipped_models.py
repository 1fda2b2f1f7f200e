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


def test_shipped_transformer_export_runs_fused_attention_on_int8_weights():
    """ONNX Runtime's optimiser fused every layer's attention (a newer exporter or transformers
    whose graph no longer matches the fusion would lose that silently), every weight is stored
    in int8, and no activation is quantised (that made vectors depend on their batch)."""
    import onnx

    graph = onnx.load(str(MODELS / "accurate" / "model.onnx")).graph
    operators = [node.op_type for node in graph.node]
    layers = load_model(MODELS / "accurate").encoder.transformer.config.num_hidden_layers
    assert operators.count("Attention") == layers
    assert "Softmax" not in operators  # no attention left unfused
    assert not {"DynamicQuantizeLinear", "MatMulInteger", "QAttention"} & set(operators)
    weights = {i.name: i for i in graph.initializer}
    products = [node for node in graph.node if node.op_type in ("MatMul", "Attention")]
    # each product's weight comes from an int8 initializer through Cast and Mul, none in fp32
    assert products and not any(len(weights[node.input[1]].dims) == 2 for node in products
                                if node.input[1] in weights)
    eight_bit = [i for i in graph.initializer
                 if i.data_type in (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)]
    assert len(eight_bit) >= 4 * layers + 1  # per layer: attention, its output, the feed-forward pair; tables
