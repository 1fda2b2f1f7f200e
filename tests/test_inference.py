"""Inference without torch: the numpy and ONNX Runtime encoders compute what the torch models
compute, from the same model directory, and the query commands import neither torch nor the
SQLAlchemy ORM nor, on SQLite, the PostgreSQL dialect (each would cost a one-shot search more
than the search itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import ROOT, SMALL, TEXTS, VOCABULARY, collection, imported_by, runner, saved_model, write_jsonl

from askalike.app.cli import app
from askalike.core import model_dir
from askalike.core.loader import load_encoder
from askalike.core.model_dir import (
    ONNX_FILE,
    TOKEN_QUANTIZATION,
    WEIGHT_QUANTIZATION,
    ModelError,
    pretrained_export_dir,
    weights_fingerprint,
)
from askalike.indexer.build import IndexOptions, index_sources
from askalike.train.modules import VOCABULARY_MODULES
from askalike.train.onnx_export import (
    TOKEN_WEIGHT_LEVELS,
    _int8_columns,
    _quantize,
    export_onnx,
    quantizable_nodes,
    token_int8,
)
from askalike.train.trained_model import TrainedModel, export_once, load_model, save_model


@pytest.mark.parametrize("kind", ["dan", "cse"])
def test_numpy_encoder_equals_the_torch_model(tmp_path, kind):
    directory = saved_model(tmp_path / kind, kind)
    expected = load_model(directory).encoder.encode(TEXTS)
    encoder = load_encoder(directory)
    assert type(encoder).__module__ == "askalike.core.numpy_encoders"
    np.testing.assert_allclose(encoder.encode(TEXTS), expected, atol=1e-5)
    np.testing.assert_allclose(encoder.encode(TEXTS, normalize=False),
                               load_model(directory).encoder.encode(TEXTS, normalize=False), rtol=1e-4,
                               atol=1e-5)


@pytest.mark.parametrize("kind", ["dan", "cse"])
def test_int8_embeddings_are_stored_as_int8_and_read_alike_by_numpy_and_torch(tmp_path, kind):
    import torch
    from safetensors.numpy import load_file

    torch.manual_seed(0)
    trained = TrainedModel(VOCABULARY_MODULES[kind](VOCABULARY, **SMALL[kind]))
    save_model(trained, tmp_path / "int8", half_precision=True, int8_embeddings=True)
    stored = load_file(str(tmp_path / "int8" / "model.safetensors"))
    assert stored["encoder.words.weight"].dtype == np.int8
    expected = load_model(tmp_path / "int8").encoder.encode(TEXTS, normalize=False)
    np.testing.assert_allclose(load_encoder(tmp_path / "int8").encode(TEXTS, normalize=False),
                               expected, rtol=1e-4, atol=1e-5)
    cosines = np.sum(load_encoder(tmp_path / "int8").encode(TEXTS) * trained.encoder.encode(TEXTS), axis=1)
    assert cosines.min() > 0.999  # what quantising costs the original


def test_numpy_dan_adds_the_residual_branch_as_torch_does(tmp_path):
    import torch

    from askalike.train.modules import DanModule

    torch.manual_seed(0)
    dan = DanModule(VOCABULARY, embedding_dim=16, hidden=(12,), residual_hidden=20)
    torch.nn.init.normal_(dan.residual[2].weight)  # trained: no longer the zero start
    save_model(TrainedModel(dan), tmp_path / "dan")
    expected = load_model(tmp_path / "dan").encoder.encode(TEXTS, normalize=False)
    encoded = load_encoder(tmp_path / "dan").encode(TEXTS, normalize=False)
    np.testing.assert_allclose(encoded, expected, rtol=1e-4, atol=1e-5)
    dan.residual = None
    assert not np.allclose(encoded, dan.encode(TEXTS, normalize=False), atol=1e-3)  # the branch counts


@pytest.mark.slow  # an ONNX export: seconds
def test_transformer_export_is_exact_unquantised_and_close_quantised(tmp_path):
    directory = saved_model(tmp_path / "transformer", "transformer")
    assert json.loads((directory / "config.json").read_text())["inference"]["file"] == ONNX_FILE
    expected = load_model(directory).encoder.encode(TEXTS)
    quantised = load_encoder(directory).encode(TEXTS)
    assert np.min(np.sum(quantised * expected, axis=1)) > 0.98
    export_onnx(load_model(directory).encoder, directory, quantize=False)
    np.testing.assert_allclose(load_encoder(directory).encode(TEXTS), expected, atol=1e-5)


@pytest.mark.slow  # an ONNX export: seconds
def test_the_int8_export_takes_every_matmul_with_a_weight(tmp_path):
    import torch

    encoder = load_model(saved_model(tmp_path / "transformer", "transformer")).encoder
    with torch.no_grad():  # an untrained model's layers are copies, whose weights the optimiser shares
        for parameter in encoder.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    counts = {}
    for quantize in (False, True):
        directory = tmp_path / f"quantize-{quantize}"
        directory.mkdir()
        export_onnx(encoder, directory, quantize=quantize)
        roles = quantizable_nodes(directory / ONNX_FILE)
        counts[quantize] = sum(len(roles[role]) for role in ("expanding", "square", "contracting"))
    assert counts[False] > 0 and counts[True] == 0


@pytest.mark.slow  # an ONNX export: seconds
def test_a_transformer_saved_without_its_export_is_exported_once_by_the_command(tmp_path):
    directory = saved_model(tmp_path / "transformer", "transformer")
    (directory / ONNX_FILE).unlink()
    with pytest.raises(ModelError, match=r"not exported to ONNX yet .* run `askalike export"):
        load_encoder(directory)  # the query path never exports (that needs torch)
    result = runner.invoke(app, ["similar", "visa renewal", "renewing a visa", "--model",
                                      str(directory), "--json"])
    assert result.exit_code == 0, result.output
    assert (directory / ONNX_FILE).is_file()
    vectors = load_encoder(directory).encode(TEXTS)
    assert np.min(np.sum(vectors * load_model(directory).encoder.encode(TEXTS), axis=1)) > 0.98
    assert not export_once(directory)  # once: nothing to do the second time


# Encodes in a process confined to one CPU, then prints the CPUs each of its threads may run on.
CONFINED_ENCODING = """
import glob, os, sys
os.sched_setaffinity(0, {int(sys.argv[1])})
from askalike.core.loader import load_encoder
encoder = load_encoder(sys.argv[2])
encoder.encode(["one question?"])
encoder.encode([f"question number {n}?" for n in range(40)])
for status in glob.glob("/proc/self/task/*/status"):
    print([line.split()[1] for line in open(status) if line.startswith("Cpus_allowed_list")][0])
"""


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_an_onnx_encoder_computes_on_the_cpus_the_process_was_given():
    """Confined to one CPU (as by taskset), the encoder starts no thread elsewhere: ONNX Runtime
    left to its default count pins a thread to each physical core of the machine."""
    cpu = min(os.sched_getaffinity(0))
    model = ROOT / "models" / "accurate"
    result = subprocess.run([sys.executable, "-c", CONFINED_ENCODING, str(cpu), str(model)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert set(result.stdout.split()) == {str(cpu)}


def test_sessions_leave_the_residual_adds_beside_their_layer_norm(tmp_path):
    """ONNX Runtime fuses Add, Add and LayerNormalization into its slower SkipLayerNormalization
    when it loads a graph that names its sequence length; the encoder's sessions disable that
    fusion by name, and a name ONNX Runtime no longer knows would be ignored silently."""
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    from askalike.core.onnx_encoder import DISABLED_FUSIONS

    width, rng = 8, np.random.default_rng(0)
    parameters = [numpy_helper.from_array(rng.normal(size=width).astype(np.float32), name)
                  for name in ("gamma", "beta", "bias")]
    inputs = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, "length", width])
              for name in ("x", "skip")]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "length", width])
    nodes = [helper.make_node("Add", ["x", "bias"], ["biased"]),
             helper.make_node("Add", ["biased", "skip"], ["summed"]),
             helper.make_node("LayerNormalization", ["summed", "gamma", "beta"], ["y"], axis=-1,
                              epsilon=1e-12)]
    graph = helper.make_model(helper.make_graph(nodes, "residual", inputs, [output], parameters),
                              opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

    def loaded_operators(**disabled: list[str]) -> list[str]:
        options = onnxruntime.SessionOptions()
        options.optimized_model_filepath = str(tmp_path / "optimized.onnx")
        onnxruntime.InferenceSession(graph, options, providers=["CPUExecutionProvider"], **disabled)
        return [node.op_type for node in onnx.load(tmp_path / "optimized.onnx").graph.node]

    assert loaded_operators() == ["SkipLayerNormalization"]  # what the sessions must prevent
    assert loaded_operators(disabled_optimizers=DISABLED_FUSIONS) == ["Add", "Add", "LayerNormalization"]


@pytest.mark.slow
def test_a_damaged_onnx_file_is_a_clear_error(tmp_path):
    directory = saved_model(tmp_path / "transformer", "transformer")
    (directory / ONNX_FILE).write_bytes(b"not an onnx graph")
    with pytest.raises(ModelError, match=r"model\.onnx: cannot load the ONNX model"):
        load_encoder(directory)


QUESTIONS = ["How can I renew my residence permit in Qatar?", "Where can I buy a cheap second-hand car?",
             "Which beach is good for swimming with kids?", "Is it safe to drink tap water in Doha?",
             "How long does a family visa take to process?", "Any good Indian restaurants near the Pearl?",
             "A man is playing a guitar on stage.", "Two dogs are running through a snowy field."]


def test_shipped_accurate_model_export_agrees_with_its_torch_model():
    directory = ROOT / "models" / "accurate"
    cosines = np.sum(load_encoder(directory).encode(QUESTIONS)
                     * load_model(directory).encoder.encode(QUESTIONS), axis=1)
    assert cosines.min() > 0.98, cosines


@pytest.mark.slow
def test_pretrained_peer_is_exported_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ASKALIKE_CACHE", str(tmp_path / "cache"))
    export_once("pretrained:all-MiniLM-L6-v2")
    encoder = load_encoder("pretrained:all-MiniLM-L6-v2")
    assert (pretrained_export_dir("all-MiniLM-L6-v2") / ONNX_FILE).is_file()
    reference = load_model("pretrained:all-MiniLM-L6-v2").encoder.encode(TEXTS[:4])
    assert np.min(np.sum(encoder.encode(TEXTS[:4]) * reference, axis=1)) > 0.98


# pydantic: typer from 0.29 validates every option through it; the rest: the write path's
HEAVY_FOR_A_QUERY = ("torch", "transformers", "scipy", "sqlalchemy.orm", "sqlalchemy.dialects.postgresql",
                     "pydantic", "askalike.indexer.build", "defusedxml", "rich.progress")


@pytest.mark.parametrize("model", ["accurate", "fast"])
def test_search_and_similar_import_nothing_heavy(tmp_path, model):
    model_dir = ROOT / "models" / model
    source = write_jsonl(tmp_path / "questions.jsonl", collection(30))
    index_sources(tmp_path / "index", [source], str(model_dir), options=IndexOptions(show_progress=False))
    for command in (["search", "visa for my wife", "--index", str(tmp_path / "index"), "--json"],
                    ["similar", "visa renewal", "renewing a visa", "--model", str(model_dir)]):
        result, heavy = imported_by(HEAVY_FOR_A_QUERY, *command)
        assert heavy == [], command
        assert result.stdout.strip()


def test_weights_fingerprint_is_remembered_until_the_weights_change(tmp_path, monkeypatch):
    monkeypatch.setenv("ASKALIKE_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    weights = model / "model.safetensors"
    weights.write_bytes(b"first weights")
    hashed, files_sha256 = [], model_dir.files_sha256
    monkeypatch.setattr(model_dir, "files_sha256", lambda paths: hashed.append(paths) or files_sha256(paths))
    first = weights_fingerprint(model)
    assert weights_fingerprint(model) == first and len(hashed) == 1  # the second is remembered
    weights.write_bytes(b"other weights, longer")
    assert weights_fingerprint(model) != first and len(hashed) == 2


def test_an_export_that_rounds_activations_is_another_encoder_than_its_weights_in_fp32(tmp_path, monkeypatch):
    """Its vectors differ from the fp32 arithmetic's (cosine about 0.998), so an index of either
    asks for a re-index rather than mixing them; int8 weights computed in fp32 do not."""
    monkeypatch.setenv("ASKALIKE_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    fingerprints = {}
    for quantization in ("none", WEIGHT_QUANTIZATION, TOKEN_QUANTIZATION):
        (model / "config.json").write_text(json.dumps({"kind": "pretrained", "inference": {
            "file": ONNX_FILE, "quantization": quantization}}))
        fingerprints[quantization] = weights_fingerprint(model)
    assert fingerprints["none"] == fingerprints[WEIGHT_QUANTIZATION] != fingerprints[TOKEN_QUANTIZATION]


def test_an_int8_matmul_of_the_export_rounds_each_token_on_a_scale_of_its_own(tmp_path):
    """The export's int8 MatMul (``_quantize`` with token activations) computes what the torch
    encoder's ``token_int8`` and 7-bit weights compute, each token (row) rounded on its own
    largest magnitude, so a token's product depends on nothing else in its batch; a row of
    zeros stays zeros."""
    import onnx
    import onnxruntime
    import torch
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    weight = rng.normal(size=(16, 12)).astype(np.float32)
    inputs = rng.normal(size=(3, 5, 16)).astype(np.float32)
    inputs[1, 2] = 0.0
    inputs[2, 0, 3] = 40.0  # an outlier coarsens its own token's steps, no other's
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="product")], "one_matmul",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, 12])],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "fp32.onnx")
    _quantize(tmp_path / "fp32.onnx", tmp_path / "int8.onnx", token_activations=True)
    stored = {tensor.name: numpy_helper.to_array(tensor)
              for tensor in onnx.load(tmp_path / "int8.onnx").graph.initializer}
    assert np.abs(stored["w_int8"]).max() == TOKEN_WEIGHT_LEVELS  # no int16 sum can saturate
    session = onnxruntime.InferenceSession(str(tmp_path / "int8.onnx"), providers=["CPUExecutionProvider"])
    products = session.run(None, {"x": inputs})[0]
    integers, scale = _int8_columns(weight, False, TOKEN_WEIGHT_LEVELS)
    expected = token_int8(torch.from_numpy(inputs)).numpy() @ (integers * scale)
    np.testing.assert_allclose(products, expected, rtol=1e-5, atol=1e-5)
    assert not products[1, 2].any()
    for batch in range(3):  # each text alone: the same bytes
        assert np.array_equal(session.run(None, {"x": inputs[batch:batch + 1]})[0][0], products[batch])


def test_the_int8_products_of_the_exports_ranges_are_exact_on_this_cpu():
    """``MatMulIntegerToFloat`` (the export's int8 product) of the largest activations (uint8
    255, zero point 128) and the largest 7-bit weights, at unit scales, equals the int64 product
    on this machine's kernel. Without VNNI, ONNX Runtime's u8 x s8 kernel adds pairs of
    products in int16: 2 x 255 x 127 would saturate (wrong sums on such a CPU, measured),
    2 x 255 x 63 cannot. (The sums stay below 2**24, so a float32 holds them exactly.)"""
    import onnxruntime
    from onnx import TensorProto, helper, numpy_helper

    depth, width = 384, 64
    weights = np.full((depth, width), TOKEN_WEIGHT_LEVELS, np.int8)
    weights[:, 1::2] = -TOKEN_WEIGHT_LEVELS
    activations = np.full((8, depth), 255, np.uint8)
    activations[1] = 0
    activations[2] = np.random.default_rng(3).integers(0, 256, depth, dtype=np.uint8)
    graph = helper.make_graph(
        [helper.make_node("MatMulIntegerToFloat", ["a", "w", "one", "ones", "zero"], ["y"],
                          domain="com.microsoft")], "one_product",
        [helper.make_tensor_value_info("a", TensorProto.UINT8, [None, depth])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, width])],
        [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(np.array(128, np.uint8), "zero"),
         numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.ones(width, np.float32), "ones")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = (activations.astype(np.int64) - 128) @ weights.astype(np.int64)
    assert np.array_equal(session.run(None, {"a": activations})[0], expected)


def test_the_fused_attention_is_rewritten_to_an_int8_projection_then_the_same_attention(tmp_path):
    """ONNX Runtime's fused ``Attention`` (projection + attention, padding by lengths) becomes the
    int8 projection and ``MultiHeadAttention``: the same as the fused kernel on the rounded input
    and weights, and a padded text's tokens get what the text alone gets."""
    import onnx
    import onnxruntime
    import torch
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(11)
    hidden, heads = 16, 2
    weight = rng.normal(size=(hidden, 3 * hidden)).astype(np.float32)
    bias = rng.normal(size=3 * hidden).astype(np.float32)
    inputs = rng.normal(size=(2, 6, hidden)).astype(np.float32)
    lengths = np.array([6, 4], np.int32)  # the second text padded by 2

    def save(path, weights):
        graph = helper.make_graph(
            [helper.make_node("Attention", ["x", "w", "b", "lengths"], ["y"], name="attention",
                              domain="com.microsoft", num_heads=heads)], "one_attention",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None, hidden]),
             helper.make_tensor_value_info("lengths", TensorProto.INT32, [None])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None, hidden])],
            [numpy_helper.from_array(weights, "w"), numpy_helper.from_array(bias, "b")])
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                          helper.make_opsetid("com.microsoft", 1)]), path)

    def run(path, x, given_lengths):
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return session.run(None, {"x": x, "lengths": given_lengths})[0]

    save(tmp_path / "fused.onnx", weight)
    _quantize(tmp_path / "fused.onnx", tmp_path / "int8.onnx", token_activations=True)
    assert "MultiHeadAttention" in [node.op_type for node in onnx.load(tmp_path / "int8.onnx").graph.node]
    integers, scale = _int8_columns(weight, False, TOKEN_WEIGHT_LEVELS)
    save(tmp_path / "rounded.onnx", (integers * scale).astype(np.float32))
    rewritten = run(tmp_path / "int8.onnx", inputs, lengths)
    expected = run(tmp_path / "rounded.onnx", token_int8(torch.from_numpy(inputs)).numpy(), lengths)
    np.testing.assert_allclose(rewritten[0], expected[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(rewritten[1, :4], expected[1, :4], rtol=1e-4, atol=1e-4)
    alone = run(tmp_path / "int8.onnx", inputs[1:, :4], lengths[1:])
    np.testing.assert_allclose(alone[0], rewritten[1, :4], rtol=1e-6, atol=1e-6)


def test_weights_fingerprint_works_where_the_cache_cannot_be_written(tmp_path, monkeypatch):
    blocker = tmp_path / "a file, not a folder"
    blocker.write_text("")
    monkeypatch.setenv("ASKALIKE_CACHE", str(blocker / "cache"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"weights")
    assert weights_fingerprint(model) == weights_fingerprint(model)


LONG = " ".join(["and then the residence permit office asked for another attested document"] * 12)


@pytest.mark.parametrize("model", ["accurate", "fast"])
def test_a_texts_vector_does_not_depend_on_its_batch(model):
    """Alone, among 7 or 255 others, among long texts and at every batch size the same text gets
    the same vector (the int8 export rounds each token's activations on a scale of its own)."""
    encoder = load_encoder(ROOT / "models" / model)
    text = QUESTIONS[0]
    alone = encoder.encode([text])[0]
    others = QUESTIONS[1:] * 40
    batches = {"batch of 8": [text, *others[:7]], "batch of 256": [text, *others[:255]],
               "among long texts": [text, LONG, LONG + " again", *QUESTIONS[1:3]]}
    for name, texts in batches.items():
        for batch_size in (1, 8, 256):
            vector = encoder.encode(texts, batch_size=batch_size)[0]
            assert float(vector @ alone) >= 0.99999, (name, batch_size, float(vector @ alone))
