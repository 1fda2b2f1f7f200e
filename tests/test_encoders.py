"""Encoders: shapes, normalisation, padding invariance, the sqrt(n) combiner; model I/O."""

import math

import numpy as np
import pytest
import torch

from askalike.core.model_dir import ModelError
from askalike.core.text import Vocabulary
from askalike.train.modules import CseModule, DanModule, TransformerModule, timing_signal
from askalike.train.objectives import NliHead, ResponseSelectionHead
from askalike.train.trained_model import TrainedModel, load_model, save_model

TEXTS = ["how do i renew my visa", "where can i buy a cheap car in doha today please",
         "visa", "best pizza"]
VOCABULARY = Vocabulary.build(TEXTS * 2, max_size=100, min_count=1, oov_buckets=5, bigram_buckets=31)


def make(kind: str):
    torch.manual_seed(0)
    if kind == "dan":
        return DanModule(VOCABULARY, embedding_dim=16, hidden=(24, 12))
    if kind == "transformer":
        return TransformerModule(VOCABULARY, hidden=16, layers=2, heads=2, filter_size=32,
                                          dropout=0.1)
    return CseModule(VOCABULARY, embedding_dim=16, maps=4)


KINDS = ["dan", "transformer", "cse"]


@pytest.mark.parametrize("kind", KINDS)
def test_encode_shape_and_norm(kind):
    encoder = make(kind)
    vectors = encoder.encode(TEXTS)
    assert vectors.shape == (len(TEXTS), encoder.dim) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_padding_never_changes_an_embedding(kind):
    encoder = make(kind)
    alone = np.stack([encoder.encode([text])[0] for text in TEXTS])
    together = encoder.encode(TEXTS, batch_size=len(TEXTS))
    assert np.allclose(alone, together, atol=1e-5)


def test_dan_divides_the_sum_by_sqrt_n():
    encoder = make("dan")
    batch = encoder.tokenize(["visa best pizza"])
    words, bigrams = batch["words"][0], batch["bigrams"][0]
    total = encoder.words(words).sum(0) + encoder.bigrams(bigrams[bigrams > 0]).sum(0)
    n = 3 + 2  # three words, two bigrams
    expected = encoder.feed_forward(total / math.sqrt(n))
    assert torch.allclose(encoder(batch)[0], expected, atol=1e-6)


def test_dan_residual_branch_starts_at_zero_and_is_saved_in_the_config():
    torch.manual_seed(0)
    plain = DanModule(VOCABULARY, embedding_dim=16, hidden=(12,))
    torch.manual_seed(0)
    branched = DanModule(VOCABULARY, embedding_dim=16, hidden=(12,), residual_hidden=20)
    batch = plain.tokenize(TEXTS)
    assert torch.equal(plain(batch), branched(batch))
    assert branched.config()["residual_hidden"] == 20 and "residual_hidden" not in plain.config()


def test_cse_is_width_concatenated_sum_pooling():
    encoder = make("cse")
    assert encoder.dim == 3 * 4
    batch = encoder.tokenize(["visa"])
    x = encoder.words(batch["words"]).transpose(1, 2)
    width3 = encoder.convolutions[2](x).sum(dim=2)  # one word, wide conv: 3 windows see it
    assert torch.allclose(encoder(batch)[0, 8:], width3[0], atol=1e-6)


def test_timing_signal():
    signal = timing_signal(10, 8)
    assert signal.shape == (10, 8)
    assert torch.allclose(signal[0, 0::2], torch.zeros(4)) and torch.allclose(signal[0, 1::2], torch.ones(4))


@pytest.mark.parametrize("kind", [  # saving a transformer exports it to ONNX: seconds
    pytest.param(kind, marks=pytest.mark.slow) if kind == "transformer" else kind for kind in KINDS])
def test_save_and_load_round_trip(tmp_path, kind):
    encoder = make(kind)
    model = TrainedModel(encoder, ResponseSelectionHead(encoder.dim), NliHead(encoder.dim, hidden=8),
                         {"note": "test"})
    save_model(model, tmp_path / "model")
    loaded = load_model(tmp_path / "model")
    assert np.allclose(loaded.encoder.encode(TEXTS), encoder.encode(TEXTS), atol=1e-6)
    assert loaded.nli_head is not None and loaded.response_head is not None
    assert loaded.metrics == {"note": "test"}
    save_model(model, tmp_path / "half", half_precision=True)
    assert np.allclose(load_model(tmp_path / "half").encoder.encode(TEXTS), encoder.encode(TEXTS),
                       atol=2e-2)


@pytest.mark.slow  # loads all-MiniLM-L6-v2 in torch
def test_pretrained_backbone_orders_similar_questions(tmp_path):
    model = load_model("pretrained:all-MiniLM-L6-v2")
    vectors = model.encoder.encode(["How can I renew my residence permit in Qatar?",
                                    "What is the procedure to extend a Qatar RP?",
                                    "Where can I watch football in Doha?"])
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    save_model(model, tmp_path / "mini", half_precision=True)
    again = load_model(tmp_path / "mini").encoder.encode(["How can I renew my residence permit?"])
    assert again[0] @ model.encoder.encode(["How can I renew my residence permit?"])[0] > 0.999


def test_bad_model_specs(tmp_path):
    with pytest.raises(ModelError, match="unknown pretrained"):
        load_model("pretrained:nope")
    with pytest.raises(ModelError, match=r"^/nonexistent: no such model directory \(the shipped models"):
        load_model("/nonexistent")
    with pytest.raises(ModelError, match=r"^fastt: no such model directory \(did you mean fast\? "):
        load_model("fastt")
    with pytest.raises(ModelError, match=r"not a model directory \(no config\.json\)"):
        load_model(str(tmp_path))
