"""Figures of a trained model's heads: response selection P@N (Yang et al. Table 1) and NLI
accuracy. An encoder's STS figures are ``core.sts_evaluation``'s, its CQA figures
``retrieval.cqa``'s."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from askalike.core.datasets import (
    NLI_LABELS,
    NliPair,
)
from askalike.train.batching import text_key
from askalike.train.trained_model import TrainedModel


def response_scores(model: TrainedModel, inputs: Sequence[str],
                    responses: Sequence[str]) -> np.ndarray:
    """Input x response scores: the trained response head's dot products where the model has
    one, else cosine similarity (an encoder not trained for response selection)."""
    if model.response_head is None:
        return model.encoder.encode(inputs) @ model.encoder.encode(responses).T
    u, r = _head_inputs(model.response_head, model.encoder.encode(inputs, normalize=False),
                        model.encoder.encode(responses, normalize=False))
    with torch.inference_mode():
        return model.response_head.scores(u, r).cpu().numpy()


def _head_inputs(head: torch.nn.Module, *vectors: np.ndarray) -> list[torch.Tensor]:
    """Encoded vectors as tensors on the head's device (a model trained on a GPU is there)."""
    parameter = next(head.parameters(), None)
    device = parameter.device if parameter is not None else torch.device("cpu")
    return [torch.from_numpy(array).to(device) for array in vectors]


def response_precision(model: TrainedModel, pairs: Sequence[tuple[str, str]], group: int = 100,
                       ks: Sequence[int] = (1, 3, 10), seed: int = 0) -> dict[str, float]:
    """Yang et al. Table 1: P@k of the true response among ``group`` candidates, 1 true and the
    rest random other held-out responses.

    The pairs are shuffled (seeded) before grouping: held-out pairs are consecutive turns, so
    unshuffled, the previous pair's response is this pair's input and a cosine model would
    rank it first every time. For the same reason a candidate whose text equals the input or
    the true response does not count against it.
    """
    order = np.random.default_rng(seed).permutation(len(pairs))
    hits = dict.fromkeys(ks, 0)
    total = 0
    for start in range(0, len(pairs) - group + 1, group):
        chunk = [pairs[i] for i in order[start : start + group]]
        inputs, responses = [a for a, _ in chunk], [b for _, b in chunk]
        scores = response_scores(model, inputs, responses)
        input_keys = np.array([text_key(a) for a in inputs])
        response_keys = np.array([text_key(b) for b in responses])
        same_text = ((response_keys[None, :] == input_keys[:, None])
                     | (response_keys[None, :] == response_keys[:, None]))
        np.fill_diagonal(same_text, False)
        scores[same_text] = -np.inf
        true_scores = scores.diagonal()[:, None]
        ranks = (scores > true_scores).sum(axis=1) + 1
        for k in ks:
            hits[k] += int((ranks <= k).sum())
        total += len(chunk)
    if total == 0:
        raise ValueError(f"response evaluation needs at least {group} held-out pairs")
    return {f"p@{k}": hits[k] / total for k in ks} | {"n": total}


def nli_accuracy(model: TrainedModel, pairs: Sequence[NliPair]) -> dict[str, float]:
    if model.nli_head is None:
        raise ValueError("this model has no NLI head: train it with NLI data to evaluate NLI")
    u, v = _head_inputs(model.nli_head, model.encoder.encode([p.premise for p in pairs], normalize=False),
                        model.encoder.encode([p.hypothesis for p in pairs], normalize=False))
    with torch.inference_mode():
        predicted = model.nli_head(u, v).argmax(dim=-1).cpu().numpy()
    gold = np.array([NLI_LABELS.index(p.label) for p in pairs])
    return {"accuracy": float((predicted == gold).mean()), "n": len(pairs)}
