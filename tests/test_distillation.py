"""Distillation: the text sample, the resumable teacher cache, the loss."""

import numpy as np
import pytest
import torch

from train.distillation import CHUNK, distillation_loss, distillation_texts, teacher_vectors
from train.encoders import DanEncoder
from train.text import Vocabulary
from train.trained_model import TrainedModel, save_model


def test_distillation_texts_are_distinct_seeded_and_limited():
    texts = [f"question {i % 50}" for i in range(500)] + ["Question  3", ""]
    chosen = distillation_texts(texts, 40, seed=1)
    assert len(chosen) == 40
    assert len({" ".join(t.lower().split()) for t in chosen}) == 40  # "Question  3" is "question 3"
    assert chosen == distillation_texts(texts, 40, seed=1)
    assert chosen != distillation_texts(texts, 40, seed=2)
    assert len(distillation_texts(texts, 1000, seed=1)) == 50


@pytest.fixture
def teacher_dir(tmp_path):
    vocabulary = Vocabulary.build([f"word{i} common" for i in range(300)], 400, min_count=1)
    encoder = DanEncoder(vocabulary, embedding_dim=16, hidden=[24])
    save_model(TrainedModel(encoder), tmp_path / "teacher")
    return tmp_path / "teacher"


def test_teacher_vectors_are_cached_by_chunk_and_replaced_for_other_texts(teacher_dir, tmp_path):
    texts = [f"word{i % 300} common word{(7 * i) % 300}" for i in range(CHUNK + 10)]
    cache = tmp_path / "cache"
    vectors = teacher_vectors(str(teacher_dir), texts, cache, show_progress=False)
    assert vectors.shape == (len(texts), 24)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-2)
    chunks = sorted(cache.glob("chunk-*.npy"))
    assert len(chunks) == 2

    # an interrupted pass: the second chunk is missing, the first one is read back, not redone
    chunks[1].unlink()
    first_written = chunks[0].stat().st_mtime_ns
    again = teacher_vectors(str(teacher_dir), texts, cache, show_progress=False)
    assert np.array_equal(vectors, again)
    assert chunks[0].stat().st_mtime_ns == first_written

    # a shorter sample of the same texts keeps the chunks it shares
    teacher_vectors(str(teacher_dir), texts[:CHUNK], cache, show_progress=False)
    assert sorted(cache.glob("chunk-*.npy")) == chunks[:1]
    assert chunks[0].stat().st_mtime_ns == first_written

    other = teacher_vectors(str(teacher_dir), texts[:5], cache, show_progress=False)
    assert other.shape == (5, 24)
    assert len(list(cache.glob("chunk-*.npy"))) == 1


def test_distillation_loss_is_lowest_at_the_teacher_and_checks_dimensions():
    torch.manual_seed(0)
    teacher = torch.randn(16, 8)
    copy = distillation_loss(teacher * 3, teacher, scale=20.0)  # the scale of a vector is free
    shuffled = distillation_loss(teacher[torch.randperm(16)], teacher, scale=20.0)
    assert float(copy) < 0.01 < float(shuffled)
    with pytest.raises(ValueError, match="dimensions"):
        distillation_loss(torch.randn(16, 4), teacher, scale=20.0)
