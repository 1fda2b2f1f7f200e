"""Teacher-initialised word embeddings for the DAN (a model2vec-style static distillation).

Each vocabulary word is embedded alone by the teacher; the vectors are centred, reduced by PCA to
the encoder's embedding size and weighted by the SIF weight a / (a + p(w)) of Arora et al. 2017,
with p(w) estimated from the word's frequency rank (Zipf's law; the vocabulary is sorted by
frequency), so that frequent words weigh little in a sum. Out-of-vocabulary buckets and hashed
bigrams start at zero and are learnt. When the DAN's feed-forward is a single linear layer to the
teacher's dimension it starts as the PCA's back-projection, so that before any training the
student is the static distillation of its teacher: the floor that training builds on.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from askalike.train.distillation import teacher_vectors
from askalike.train.modules import DanModule

SIF_A = 1e-3


def zipf_sif_weights(size: int, a: float = SIF_A) -> np.ndarray:
    """SIF weights of words ranked 1..size, with p(rank) = 1 / (rank * H(size))."""
    ranks = np.arange(1, size + 1, dtype=np.float64)
    probability = 1.0 / (ranks * (1.0 / ranks).sum())
    return (a / (a + probability)).astype(np.float32)


def pca(vectors: np.ndarray, dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(centred vectors in the top ``dim`` principal directions, those directions (dim, D))."""
    centred = vectors - vectors.mean(axis=0)
    _, _, directions = np.linalg.svd(centred.astype(np.float64), full_matrices=False)
    directions = directions[:dim].astype(np.float32)
    return centred @ directions.T, directions


def initialise_from_teacher(encoder: DanModule, teacher: str, cache_dir: Path) -> None:
    """Set ``encoder``'s word embeddings (and, where it fits, its output layer) from the teacher's
    embeddings of each vocabulary word, cached in ``cache_dir`` beside the distillation texts'."""
    words = list(encoder.vocabulary.words)
    dim = encoder.embedding_dim
    if len(words) < dim:
        raise ValueError(f"teacher initialisation needs at least {dim} vocabulary words "
                         f"(the embedding size), got {len(words)}")
    vectors = teacher_vectors(teacher, words, cache_dir, prefix="words")
    reduced, directions = pca(vectors, dim)
    reduced *= zipf_sif_weights(len(words))[:, None]
    layers = [m for m in encoder.feed_forward if isinstance(m, torch.nn.Linear)]
    with torch.no_grad():
        encoder.words.weight.zero_()
        encoder.words.weight[1 : len(words) + 1] = torch.from_numpy(reduced)
        if encoder.bigrams is not None:
            encoder.bigrams.weight.zero_()
        if len(layers) == 1 and layers[0].weight.shape == (vectors.shape[1], dim):
            layers[0].weight.copy_(torch.from_numpy(directions.T.copy()))
            layers[0].bias.zero_()
