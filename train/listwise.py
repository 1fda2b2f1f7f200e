"""Listwise distillation: the student orders each forum question's nearest questions as the
teacher does.

Why: the CQA task ranks ten related questions that a search engine found for an original
question, all on its topic. Matching the teacher's vectors one text at a time
(``train.distillation``) spends a small student's capacity on directions that do not change
such rankings. Here each question of a pool gets a list of candidates: its nearest other
questions by the teacher's cosine and by the starting student's, taken in turn (what the
teacher finds close and what the student confuses with it). The loss is the KL divergence from
the teacher's softmax over the candidates' scaled cosines to the student's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F


@dataclass(frozen=True)
class ListwiseLists:
    """A pool of questions, each row's candidate rows, and the teacher's cosines to them."""

    questions: Sequence[str]
    candidates: np.ndarray  # (rows, count) int64
    teacher_cosines: np.ndarray  # (rows, count) float32


def nearest_candidates(teacher: np.ndarray, student: np.ndarray, count: int) -> np.ndarray:
    """(rows, ``count``) indices: for each row of two L2-normalised embeddings of the same
    texts, the teacher's nearest other row, then the student's, then the teacher's next, and
    so on, each row once. Both similarity matrices are held whole: meant for pools of thousands."""
    rows = teacher.shape[0]
    if not 0 < count < rows:
        raise ValueError(f"{count} candidates need a pool of more than {count} texts, not {rows}")
    rankings = []
    for vectors in (teacher, student):
        similarity = vectors @ vectors.T
        np.fill_diagonal(similarity, -np.inf)
        rankings.append(np.argsort(-similarity, axis=1, kind="stable")[:, :count])
    result = np.empty((rows, count), dtype=np.int64)
    for row in range(rows):
        taken: dict[int, None] = {}
        for pair in zip(rankings[0][row], rankings[1][row], strict=True):
            for index in pair:
                taken.setdefault(int(index))
        result[row] = list(taken)[:count]
    return result


def candidate_cosines(vectors: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """(rows, count): each row's cosine to each of its candidates (rows L2-normalised)."""
    return np.einsum("rd,rkd->rk", vectors, vectors[candidates])


def listwise_loss(queries: torch.Tensor, candidates: torch.Tensor, teacher_cosines: torch.Tensor,
                  scale: float) -> torch.Tensor:
    """KL(teacher || student) between softmaxes over each query's candidates of scaled cosines.
    ``queries`` (Q, d), ``candidates`` (Q, K, d) unnormalised, ``teacher_cosines`` (Q, K)."""
    # in float32 even under autocast: neighbours' cosines differ in the third decimal, below
    # bfloat16's resolution
    queries = F.normalize(queries.float(), dim=-1)
    candidates = F.normalize(candidates.float(), dim=-1)
    with torch.autocast(queries.device.type, enabled=False):
        student = scale * torch.einsum("qd,qkd->qk", queries, candidates)
    target = F.softmax(scale * teacher_cosines.float(), dim=-1)
    return F.kl_div(F.log_softmax(student, dim=-1), target, reduction="batchmean")
