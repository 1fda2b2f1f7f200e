"""The arithmetic of the ranking levers measured by bench scripts (weight averaging, fusions,
post-processing)."""

import numpy as np
import torch

from askalike.core.encoder import BatchedEncoder
from askalike.train.seed_average import averaged_state
from bench.experiments.fusion import FUSIONS, ranks, z_scores
from bench.experiments.postprocess import PostProcessed


def test_average_is_the_mean_moved_along_its_direction_from_the_origin() -> None:
    first = {"w": torch.tensor([1.0, 3.0]), "ids": torch.tensor([0, 1])}
    second = {"w": torch.tensor([3.0, 5.0]), "ids": torch.tensor([7, 7])}
    origin = {"w": torch.tensor([0.0, 2.0]), "ids": torch.tensor([0, 1])}
    assert torch.equal(averaged_state([first, second], None, 1.0)["w"], torch.tensor([2.0, 4.0]))
    assert torch.equal(averaged_state([first, second], origin, 1.0)["w"], torch.tensor([2.0, 4.0]))
    assert torch.equal(averaged_state([first, second], origin, 0.0)["w"], origin["w"])
    assert torch.equal(averaged_state([first, second], origin, 0.5)["w"], torch.tensor([1.0, 3.0]))
    assert torch.equal(averaged_state([first, second], origin, 2.0)["w"], torch.tensor([4.0, 6.0]))
    assert torch.equal(averaged_state([first, second], origin, 1.0)["ids"], first["ids"])


def test_ranks_and_z_scores() -> None:
    assert ranks([0.2, 0.9, 0.2, 0.5]).tolist() == [3, 1, 4, 2]
    assert np.allclose(z_scores([1.0, 3.0]), [-1.0, 1.0])
    assert z_scores([2.0, 2.0]).tolist() == [0.0, 0.0]


def test_every_fusion_follows_dense_alone_at_weight_one_and_bm25_alone_at_zero() -> None:
    dense, lexical = [0.9, 0.1, 0.5], [0.0, 7.0, 3.0]
    for method, fusion in FUSIONS.items():
        assert np.argsort(-np.asarray(fusion(dense, lexical, 1.0))).tolist() == [0, 2, 1], method
        assert np.argsort(-np.asarray(fusion(dense, lexical, 0.0))).tolist() == [1, 2, 0], method


class _FixedVectors(BatchedEncoder):
    kind, dim = "dan", 3

    def embed_batch(self, texts):
        table = {"a": [2.0, 0.0, 0.0], "b": [0.0, 3.0, 4.0], "c": [1.0, 1.0, 0.0]}
        return np.array([table[text] for text in texts], dtype=np.float32)


def test_post_processing_centres_unit_vectors_and_removes_the_given_directions() -> None:
    mean = np.array([0.5, 0.0, 0.0], dtype=np.float32)
    direction = np.array([[0.0, 1.0, 0.0]], dtype=np.float32)
    raw = PostProcessed(_FixedVectors(), mean, direction).embed_batch(["a", "b"])
    assert np.allclose(raw, [[0.5, 0.0, 0.0], [-0.5, 0.0, 0.8]])
    encoded = PostProcessed(_FixedVectors(), mean, direction[:0]).encode(["a", "c"])
    assert np.allclose(np.linalg.norm(encoded, axis=1), 1.0)
    centred = np.array([np.sqrt(0.5) - 0.5, np.sqrt(0.5), 0.0])
    assert np.allclose(encoded[1], centred / np.linalg.norm(centred), atol=1e-6)
