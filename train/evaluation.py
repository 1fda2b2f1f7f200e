"""Evaluation of encoders: STS (raw and tuned), response selection P@N, NLI accuracy and
transfer to STS 2012-2016 and SICK. (CQA ranking by cosine lives in ``retrieval.cqa``.)"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from scipy.stats import pearsonr, spearmanr

from train.batching import text_key
from train.datasets import (
    NLI_LABELS,
    NliPair,
    StsPair,
    read_sick,
    read_sts_benchmark,
    read_sts_year,
    stsb_path,
)
from train.encoders import SentenceEncoder
from train.similarity import angular_similarity
from train.trained_model import TrainedModel

STS_YEARS = ("STS12-en-test", "STS13-en-test", "STS14-en-test", "STS15-en-test", "STS16-en-test")


def _correlations(predicted: np.ndarray, gold: np.ndarray) -> dict[str, float]:
    return {"pearson": float(pearsonr(predicted, gold)[0]),
            "spearman": float(spearmanr(predicted, gold)[0]),
            "n": len(gold)}


def pair_cosines(encoder: SentenceEncoder, first: Sequence[str], second: Sequence[str],
                 transform: np.ndarray | None = None) -> np.ndarray:
    a, b = encoder.encode(first), encoder.encode(second)
    if transform is not None:
        a, b = a @ transform, b @ transform
        a /= np.linalg.norm(a, axis=1, keepdims=True)
        b /= np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def _pearson(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x, y = x - x.mean(), y - y.mean()
    return (x * y).sum() / (x.norm() * y.norm())


def fit_sts_transform(encoder: SentenceEncoder, pairs: Sequence[StsPair], steps: int = 100,
                      identity_pull: float = 0.01) -> np.ndarray:
    """Yang et al. 4.4.1 "tuned": a matrix W, started at the identity, such that the angular
    similarity of (uW, vW) correlates best with the gold scores of STS Benchmark train.

    Maximising Pearson r with an L2 pull of W to the identity was chosen on STSb dev: an
    unregularised fit of the squared error overfits the 5,749 training pairs (dev r falls below
    the untuned figure)."""
    u = torch.from_numpy(encoder.encode([p.sentence1 for p in pairs]))
    v = torch.from_numpy(encoder.encode([p.sentence2 for p in pairs]))
    gold = torch.tensor([p.score for p in pairs], dtype=torch.float32)
    identity = torch.eye(u.shape[1])
    weight = torch.nn.Parameter(identity.clone())
    optimizer = torch.optim.Adam([weight], lr=1e-3)
    for _ in range(steps):
        a = torch.nn.functional.normalize(u @ weight, dim=-1)
        b = torch.nn.functional.normalize(v @ weight, dim=-1)
        cosine = (a * b).sum(-1).clamp(-1 + 1e-6, 1 - 1e-6)
        angular = 5 * (1 - torch.arccos(cosine) / math.pi)
        loss = -_pearson(angular, gold) + identity_pull * (weight - identity).pow(2).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return weight.detach().numpy()


def evaluate_sts(encoder: SentenceEncoder, pairs: Sequence[StsPair],
                 transform: np.ndarray | None = None) -> dict[str, Any]:
    """Pearson and Spearman overall and per genre; Pearson of the angular 0-5 scores, and of
    the raw cosines (``pearson_cosine``)."""
    cosine = pair_cosines(encoder, [p.sentence1 for p in pairs], [p.sentence2 for p in pairs],
                          transform)
    predicted = angular_similarity(cosine)
    gold = np.array([p.score for p in pairs])
    result: dict[str, Any] = {**_correlations(predicted, gold),
                              "pearson_cosine": float(pearsonr(cosine, gold)[0])}
    genres: dict[str, list[int]] = defaultdict(list)
    for i, pair in enumerate(pairs):
        genres[pair.genre.removeprefix("main-")].append(i)
    result["genres"] = {genre: _correlations(predicted[rows], gold[rows])
                        for genre, rows in sorted(genres.items())}
    return result


def evaluate_stsb(encoder: SentenceEncoder, data_dir: Path, split: str = "dev",
                  tuned: bool = False) -> dict[str, Any]:
    transform = (fit_sts_transform(encoder, list(read_sts_benchmark(stsb_path(data_dir, "train"))))
                 if tuned else None)
    pairs = list(read_sts_benchmark(stsb_path(data_dir, split)))
    return {"split": split, "tuned": tuned, **evaluate_sts(encoder, pairs, transform)}


def evaluate_transfer(encoder: SentenceEncoder, data_dir: Path) -> dict[str, Any]:
    """STS 2012-2016 (Pearson per set, mean and pair-weighted mean per year) and SICK-R test
    (Pearson of cosines, no trained regressor), as in Jiao et al. Tables 1-2."""
    result: dict[str, Any] = {}
    for year in STS_YEARS:
        pairs = list(read_sts_year(data_dir / "sts12-16" / year))
        sets: dict[str, list[StsPair]] = defaultdict(list)
        for pair in pairs:
            sets[pair.genre].append(pair)
        per_set = {name: evaluate_sts(encoder, members)["pearson"] for name, members in sets.items()}
        sizes = {name: len(members) for name, members in sets.items()}
        result[year.removesuffix("-en-test")] = {
            "sets": per_set,
            "mean": float(np.mean(list(per_set.values()))),
            "wmean": float(sum(per_set[s] * sizes[s] for s in per_set) / sum(sizes.values())),
        }
    sick = list(read_sick(data_dir / "sick" / "SICK_test_annotated.txt", "test"))
    cosine = pair_cosines(encoder, [p.sentence1 for p in sick], [p.sentence2 for p in sick])
    result["SICK-R"] = _correlations(cosine, np.array([p.relatedness for p in sick]))
    return result


def response_scores(model: TrainedModel, inputs: Sequence[str],
                    responses: Sequence[str]) -> np.ndarray:
    """Input x response scores: the trained response head's dot products where the model has
    one, else cosine similarity (an encoder not trained for response selection)."""
    if model.response_head is None:
        return model.encoder.encode(inputs) @ model.encoder.encode(responses).T
    u = torch.from_numpy(model.encoder.encode(inputs, normalize=False))
    r = torch.from_numpy(model.encoder.encode(responses, normalize=False))
    with torch.inference_mode():
        return model.response_head.scores(u, r).numpy()


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
    u = torch.from_numpy(model.encoder.encode([p.premise for p in pairs], normalize=False))
    v = torch.from_numpy(model.encoder.encode([p.hypothesis for p in pairs], normalize=False))
    with torch.inference_mode():
        predicted = model.nli_head(u, v).argmax(dim=-1).numpy()
    gold = np.array([NLI_LABELS.index(p.label) for p in pairs])
    return {"accuracy": float((predicted == gold).mean()), "n": len(pairs)}
