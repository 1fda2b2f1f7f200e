"""Listwise distillation: candidate lists from two rankings, the loss, the forum question pool."""

import numpy as np
import pytest
import torch

from askalike.core.cqa_questions import read_split_questions
from askalike.train.batching import text_key
from askalike.train.config import QATAR_LIVING_FILES
from askalike.train.corpus import forum_questions
from askalike.train.listwise import candidate_cosines, listwise_loss, nearest_candidates


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_candidates_take_the_teachers_and_the_students_nearest_in_turn_without_the_row_itself():
    angles = np.array([0.0, 0.1, 0.3, 0.6, 1.0, 1.5])
    teacher = np.stack([np.cos(angles), np.sin(angles)], axis=1)
    student = teacher.copy()
    student[5] = _unit(teacher[[0]] + 0.001 * teacher[[1]])[0]  # the student confuses 5 with 0
    candidates = nearest_candidates(teacher, student, 3)
    assert candidates.shape == (6, 3)
    assert all(row not in candidates[row] and len(set(candidates[row])) == 3 for row in range(6))
    # row 0: the teacher's nearest (1), the student's nearest (5), the teacher's second (2)
    assert candidates[0].tolist() == [1, 5, 2]
    cosines = candidate_cosines(teacher, candidates)
    assert np.allclose(cosines[0], [teacher[0] @ teacher[i] for i in (1, 5, 2)])
    with pytest.raises(ValueError, match="pool of more than 6"):
        nearest_candidates(teacher, student, 6)


def test_listwise_loss_is_zero_at_the_teachers_order_and_its_gradient_moves_towards_it():
    torch.manual_seed(0)
    vectors = torch.nn.functional.normalize(torch.randn(40, 8), dim=-1)
    candidates = torch.arange(1, 33).view(4, 8)
    teacher = torch.einsum("qd,qkd->qk", vectors[:4], vectors[candidates])
    assert float(listwise_loss(vectors[:4] * 2, vectors[candidates], teacher, 20.0)) < 1e-6
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the student's cosines stay float32
        assert float(listwise_loss(vectors[:4].bfloat16(), vectors[candidates], teacher, 20.0)) < 1e-3

    student = torch.randn(40, 8, requires_grad=True)
    optimiser = torch.optim.SGD([student], lr=0.05)
    losses = []
    for _ in range(50):
        loss = listwise_loss(student[:4], student[candidates], teacher, 20.0)
        losses.append(float(loss.detach()))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
    assert losses[-1] < 0.5 * losses[0]


def test_forum_questions_are_the_train_splits_and_the_threads_questions_once_each(data_dir):
    train = {text_key(q.text) for o in read_split_questions(data_dir, "train")
             for q in (o, *o.related)} - {""}
    questions = forum_questions(data_dir, [])
    keys = [text_key(text) for text in questions]
    assert len(set(keys)) == len(keys) and set(keys) == train
    with_threads = forum_questions(data_dir, list(QATAR_LIVING_FILES[1:]))  # the 2015 threads
    assert with_threads[: len(questions)] == questions and len(with_threads) > len(questions) + 500
