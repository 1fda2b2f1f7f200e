"""Inference without torch: the numpy and ONNX Runtime encoders compute what the torch models
compute, from the same model directory, and the query commands import neither torch nor the
SQLAlchemy ORM nor, on SQLite, the PostgreSQL dialect (each would cost a one-shot search more
than the search itself)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import ROOT, SMALL, TEXTS, VOCABULARY, collection, imported_by, runner, saved_model, write_jsonl

from askalike.app.cli import app
from askalike.core import model_dir
from askalike.core.loader import load_encoder
from askalike.core.model_dir import ONNX_FILE, ModelError, pretrained_export_dir, weights_fingerprint
from askalike.indexer.build import IndexOptions, index_sources
from askalike.train.modules import VOCABULARY_MODULES
from askalike.train.onnx_export import export_onnx, quantizable_nodes
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
    the same vector (the int8 export's weights are int8, its activations are not quantised)."""
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
