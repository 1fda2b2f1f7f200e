"""Training objectives of both papers, written so that negatives come from the global batch.

- Input-response selection (Yang et al. 2.1-2.2): dot products between inputs and responses
  passed through an extra feed-forward, softmax cross-entropy over in-batch negatives.
- NLI (2.4): features (u, v, |u-v|, u*v) into a 512-unit layer and a 3-way softmax.
- CSE margin (Jiao et al. 3.2): max(0, delta - cos(s1, s2) + cos(s1, t)) + the symmetric term,
  t the most similar in-batch negative, plus an L2 pull of word embeddings to their start.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from askalike.train.modules import tanh_feed_forward


class _GatherWithGradient(torch.autograd.Function):
    """all_gather whose backward sums every worker's gradient for this worker's slice.

    Written with all_reduce so that it runs on gloo (CPU) as well as NCCL.
    """

    @staticmethod
    def forward(ctx: Any, local: torch.Tensor) -> torch.Tensor:
        ctx.rank, ctx.size = dist.get_rank(), local.shape[0]
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, local.contiguous())
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.contiguous()
        dist.all_reduce(grad)
        return grad[ctx.rank * ctx.size : (ctx.rank + 1) * ctx.size]


def gather_batch(local: torch.Tensor) -> torch.Tensor:
    """The global batch across workers (the local batch when not distributed)."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        return _GatherWithGradient.apply(local)
    return local


def local_offset(local_size: int) -> int:
    """Where this worker's rows start in the gathered batch."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() * local_size
    return 0


class ResponseSelectionHead(nn.Module):
    """The response-side feed-forward; scores are dot products input . ff(response).

    ``residual``: ff(r) = r + W2 tanh(W1 r) with W2 starting at zero, so that training starts
    from the encoder's own dot products instead of a random projection of the responses (a
    pretrained encoder would otherwise be pulled away from its geometry by a random head).
    """

    def __init__(self, dim: int, residual: bool = False) -> None:
        super().__init__()
        self.residual = residual
        self.feed_forward = tanh_feed_forward(dim, dim, dim, zero_start=residual)

    def scores(self, inputs: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
        projected = self.feed_forward(responses)
        if self.residual:
            projected = projected + responses
        return inputs @ projected.T

    def loss(self, inputs: torch.Tensor, responses: torch.Tensor,
             hard_negatives: torch.Tensor | None = None) -> torch.Tensor:
        """Cross-entropy of picking each input's own response among all responses of the
        global batch, and this worker's ``hard_negatives`` (wrong responses) if any; ``inputs``
        are this worker's rows."""
        all_responses = gather_batch(responses)
        if hard_negatives is not None:
            all_responses = torch.cat([all_responses, hard_negatives])
        targets = torch.arange(inputs.shape[0], device=inputs.device) + local_offset(inputs.shape[0])
        return F.cross_entropy(self.scores(inputs, all_responses), targets)


class NliHead(nn.Module):
    def __init__(self, dim: int, hidden: int = 512, classes: int = 3) -> None:
        super().__init__()
        self.classifier = nn.Sequential(nn.Linear(4 * dim, hidden), nn.ReLU(),
                                        nn.Linear(hidden, classes))

    def forward(self, premises: torch.Tensor, hypotheses: torch.Tensor) -> torch.Tensor:
        features = torch.cat([premises, hypotheses, (premises - hypotheses).abs(),
                              premises * hypotheses], dim=-1)
        return self.classifier(features)

    def loss(self, premises: torch.Tensor, hypotheses: torch.Tensor,
             labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self(premises, hypotheses), labels)


def cosine_regression_loss(first: torch.Tensor, second: torch.Tensor,
                           scores: torch.Tensor) -> torch.Tensor:
    """Squared error between cosine similarity and a gold score scaled to [0, 1] (STS 0-5)."""
    return F.mse_loss(F.cosine_similarity(first, second, dim=-1), scores)


def cosine_ranking_loss(first: torch.Tensor, second: torch.Tensor, scores: torch.Tensor,
                        scale: float = 20.0) -> torch.Tensor:
    """CoSENT (Su 2022): log(1 + sum of exp(scale (cos_j - cos_i))) over the batch's pairs of
    pairs where pair i's gold score is above pair j's. It asks that cosines order the pairs as
    the scores do, which is what pair ranking accuracy measures (and rank correlation), not that
    they equal the scores (the regression's stricter ask)."""
    cosines = F.cosine_similarity(first, second, dim=-1) * scale
    above = scores[:, None] > scores[None, :]  # [i, j]: pair i should have the higher cosine
    differences = (cosines[None, :] - cosines[:, None])[above]
    return torch.logsumexp(torch.cat([differences.new_zeros(1), differences]), dim=0)


def hardest_negatives(similarity: torch.Tensor, positives: torch.Tensor) -> torch.Tensor:
    """For each row i, the column other than ``positives[i]`` with the highest similarity."""
    masked = similarity.clone()
    masked[torch.arange(similarity.shape[0], device=similarity.device), positives] = float("-inf")
    return masked.argmax(dim=1)


def cse_margin_loss(sources: torch.Tensor, targets: torch.Tensor, margin: float,
                    hardest: bool = True) -> torch.Tensor:
    """Jiao et al. eq. 3 for this worker's pairs, negatives drawn from the global batch: each
    source against its hardest wrong target, each target against its hardest wrong source.

    With ``hardest=False`` the hinge is summed over every wrong pair instead (Faghri et al.'s
    VSE0). Hardest negatives from random initial embeddings collapse training (all sentences
    map to nearly one point, where every hinge equals the margin); a warm-up on the sum first
    spreads the embeddings out, as VSE++ does.
    """
    all_sources = F.normalize(gather_batch(sources), dim=-1)
    all_targets = F.normalize(gather_batch(targets), dim=-1)
    local = torch.arange(sources.shape[0], device=sources.device)
    positions = local + local_offset(sources.shape[0])
    source_vs_targets = F.normalize(sources, dim=-1) @ all_targets.T
    target_vs_sources = F.normalize(targets, dim=-1) @ all_sources.T
    positive = source_vs_targets[local, positions]
    if hardest:
        wrong_target = source_vs_targets[local, hardest_negatives(source_vs_targets, positions)]
        wrong_source = target_vs_sources[local, hardest_negatives(target_vs_sources, positions)]
        return (F.relu(margin - positive + wrong_target)
                + F.relu(margin - positive + wrong_source)).mean()
    wrong = torch.ones_like(source_vs_targets, dtype=torch.bool)
    wrong[local, positions] = False
    hinges = (F.relu(margin - positive.unsqueeze(1) + source_vs_targets)
              + F.relu(margin - positive.unsqueeze(1) + target_vs_sources))
    return (hinges * wrong).sum(dim=1).mean()


def embedding_pull(embedding: nn.Embedding, initial: torch.Tensor, ids: torch.Tensor,
                   weight: float) -> torch.Tensor:
    """L2 distance of the rows used in this batch from their initial values (Jiao et al. 3.2).
    Looked up like the encoder looks them up, so sparse embeddings get sparse gradients."""
    rows = ids.unique()
    current = F.embedding(rows, embedding.weight, sparse=embedding.sparse)
    return weight * (current - initial[rows]).pow(2).sum()
