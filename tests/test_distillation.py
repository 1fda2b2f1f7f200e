"""Distillation: the text sample, the resumable teacher cache, the loss."""

import numpy as np
import pytest
import torch

from askalike.core.data_dir import DataError
from askalike.core.text import Vocabulary
from askalike.train.distillation import (
    CHUNK,
    distillation_loss,
    distillation_rows,
    distillation_texts,
    read_in_domain_count,
    teacher_vectors,
    write_distillation_texts,
)
from askalike.train.modules import DanModule
from askalike.train.teacher_init import initialise_from_teacher, pca, zipf_sif_weights
from askalike.train.trained_model import TrainedModel, save_model


def test_distillation_texts_are_distinct_seeded_and_limited():
    texts = [f"question {i % 50}" for i in range(500)] + ["Question  3", ""]
    chosen = distillation_texts([texts], 40, seed=1)
    assert len(chosen) == 40
    assert len({" ".join(t.lower().split()) for t in chosen}) == 40  # "Question  3" is "question 3"
    assert chosen == distillation_texts([texts], 40, seed=1)
    assert chosen != distillation_texts([texts], 40, seed=2)
    assert len(distillation_texts([texts], 1000, seed=1)) == 50


def test_distillation_texts_take_the_groups_in_order_and_a_smaller_sample_is_a_prefix():
    in_domain = [f"visa question {i}" for i in range(30)]
    general = [f"chat line {i}" for i in range(100)] + in_domain[:5]  # repeats are drawn once
    larger = distillation_texts([in_domain, general], 120, seed=3)
    assert set(larger[:30]) == set(in_domain)
    assert len(larger) == 120 and all(text.startswith("chat") for text in larger[30:])
    assert distillation_texts([in_domain, general], 45, seed=3) == larger[:45]


def test_the_in_domain_prefix_is_repeated_among_the_distillation_rows(tmp_path):
    assert distillation_rows(5, 2, 3).tolist() == [0, 1, 2, 3, 4, 0, 1, 0, 1]
    assert distillation_rows(3, 7, 2).tolist() == [0, 1, 2, 0, 1, 2]  # a sample of in-domain texts only
    assert distillation_rows(4, 2, 1).tolist() == [0, 1, 2, 3]
    with pytest.raises(DataError, match=r"in_domain\.json.*predates"):
        read_in_domain_count(tmp_path)
    write_distillation_texts(tmp_path, ["a", "b", "c"], 2)
    assert read_in_domain_count(tmp_path) == 2
    (tmp_path / "in_domain.json").write_text('{"in_domain": -1}')
    with pytest.raises(DataError, match="must be a count"):
        read_in_domain_count(tmp_path)


@pytest.fixture
def teacher_dir(tmp_path):
    vocabulary = Vocabulary.build([f"word{i} common" for i in range(300)], 400, min_count=1)
    encoder = DanModule(vocabulary, embedding_dim=16, hidden=[24])
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

    # a shorter sample of the same texts reads the chunks it shares and keeps the others
    shorter = teacher_vectors(str(teacher_dir), texts[:CHUNK], cache, show_progress=False)
    assert np.array_equal(shorter, vectors[:CHUNK])
    assert sorted(cache.glob("chunk-*.npy")) == chunks
    assert chunks[0].stat().st_mtime_ns == first_written

    # other texts replace the chunk at their position, and never read a cached one
    other_texts = ["word1 word2", "word3"] * 3
    other = teacher_vectors(str(teacher_dir), other_texts, cache, show_progress=False)
    assert other.shape == (6, 24)
    assert not chunks[0].exists() and chunks[1].exists()
    assert np.allclose(other[0], other[2]) and not np.allclose(other[0], other[1])


def test_distillation_loss_is_lowest_at_the_teacher_and_checks_dimensions():
    torch.manual_seed(0)
    teacher = torch.randn(16, 8)
    copy = distillation_loss(teacher * 3, teacher, scale=20.0)  # the scale of a vector is free
    shuffled = distillation_loss(teacher[torch.randperm(16)], teacher, scale=20.0)
    assert float(copy) < 0.01 < float(shuffled)
    with pytest.raises(ValueError, match="dimensions"):
        distillation_loss(torch.randn(16, 4), teacher, scale=20.0)


def test_teacher_init_makes_the_untrained_dan_its_teachers_static_distillation(teacher_dir, tmp_path):
    """Before training, a DAN with a single output layer of the teacher's size embeds a text as
    the PCA back-projection of its words' SIF-weighted teacher vectors, summed."""
    words = [f"word{i}" for i in range(40)] + ["common"]
    student = DanModule(Vocabulary(tuple(words), oov_buckets=3, bigram_buckets=5),
                         embedding_dim=8, hidden=[24])
    initialise_from_teacher(student, str(teacher_dir), tmp_path / "cache")
    assert list((tmp_path / "cache").glob("words-*.npy"))

    teacher = teacher_vectors(str(teacher_dir), words, tmp_path / "cache", prefix="words",
                              show_progress=False)
    reduced, directions = pca(teacher, 8)
    weights = zipf_sif_weights(len(words))
    expected = (reduced[3] * weights[3] + reduced[7] * weights[7]) @ directions
    got = student.encode(["word3 word7"], normalize=False)[0]
    assert np.allclose(got * np.sqrt(3), expected, atol=1e-4)  # 2 words + 1 (zero) bigram
    assert torch.count_nonzero(student.bigrams.weight) == 0
    assert torch.count_nonzero(student.words.weight[len(words) + 1 :]) == 0  # OOV buckets


def test_zipf_sif_weights_fall_with_frequency():
    weights = zipf_sif_weights(1000)
    assert np.all(np.diff(weights) > 0) and 0 < weights[0] < weights[-1] < 1
