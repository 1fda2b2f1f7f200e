"""Response selection P@N (Yang et al. Table 1) on held-out consecutive turns."""

import itertools

import torch

from askalike.train.evaluation import response_precision
from askalike.train.modules import EncoderModule
from askalike.train.trained_model import TrainedModel


class BagOfWords(EncoderModule):
    """Counts of the words w0..w(dim-1): texts sharing words have positive cosine."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dim = dim
        self.anchor = torch.nn.Parameter(torch.zeros(1))  # gives the encoder a device

    def tokenize(self, texts):
        counts = torch.zeros(len(texts), self.dim)
        for row, text in enumerate(texts):
            for word in text.split():
                counts[row, int(word[1:])] += 1
        return {"counts": counts}

    def forward(self, batch):
        return batch["counts"]


def test_a_candidate_equal_to_the_input_does_not_count_against_the_true_response():
    # a dialogue of 300 turns "wk wk+1"; pair k is (turn k, turn k+1), so the response of
    # pair k-1 is the input of pair k (cosine 1) while the true response shares one word (0.5)
    turns = [f"w{k} w{k + 1}" for k in range(301)]
    pairs = list(itertools.pairwise(turns))
    result = response_precision(TrainedModel(BagOfWords(302)), pairs)
    assert result == {"p@1": 1.0, "p@3": 1.0, "p@10": 1.0, "n": 300}


def test_a_distractor_sharing_words_with_the_input_ranks_above_a_true_response_that_shares_none():
    # input k shares w(k+101) with the response of pair k+1 and nothing with its own response
    pairs = [(f"w{k} w{k + 101}", f"w{k + 100}") for k in range(100)]
    result = response_precision(TrainedModel(BagOfWords(201)), pairs)
    assert result["p@1"] == 0.01  # only pair 99 has no such distractor
    assert result["n"] == 100
