"""Objectives: hardest negatives, the CSE margin loss, response selection, NLI head."""

import pytest
import torch

from askalike.train.objectives import (
    NliHead,
    ResponseSelectionHead,
    cosine_ranking_loss,
    cosine_regression_loss,
    cse_margin_loss,
    embedding_pull,
    hardest_negatives,
)


def test_hardest_negative_excludes_the_positive():
    similarity = torch.tensor([[0.9, 0.5, 0.7], [0.8, 0.95, 0.1], [0.2, 0.3, 0.99]])
    assert hardest_negatives(similarity, torch.arange(3)).tolist() == [2, 0, 1]
    assert hardest_negatives(similarity[1:], torch.tensor([1, 2])).tolist() == [0, 1]


def test_cse_margin_loss_is_zero_when_pairs_are_separated():
    sources = torch.eye(3)
    assert float(cse_margin_loss(sources, sources.clone(), margin=0.5)) == 0.0
    confused = torch.tensor([[1.0, 0.0], [1.0, 0.1]])
    assert float(cse_margin_loss(confused, confused.clone(), margin=0.5)) > 0.5


def test_cse_margin_value_matches_the_formula():
    s1 = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    s2 = torch.tensor([[0.6, 0.8], [0.8, 0.6]])
    # cos(s1_i, s2_i) = 0.6; hardest negative of each side: 0.8 -> each term 0.5 - 0.6 + 0.8
    assert float(cse_margin_loss(s1, s2, 0.5)) == pytest.approx(1.4)


def test_cse_summed_negatives_match_a_loop_over_every_wrong_pair():
    torch.manual_seed(1)
    s1, s2 = torch.randn(4, 3), torch.randn(4, 3)
    cos = torch.nn.functional.cosine_similarity
    expected = 0.0
    for i in range(4):
        positive = cos(s1[i], s2[i], dim=0)
        for j in range(4):
            if j != i:
                expected += max(0.0, float(0.3 - positive + cos(s1[i], s2[j], dim=0)))
                expected += max(0.0, float(0.3 - positive + cos(s2[i], s1[j], dim=0)))
    assert float(cse_margin_loss(s1, s2, 0.3, hardest=False)) == pytest.approx(expected / 4, rel=1e-5)
    # the hardest-negative loss is bounded by the sum over all negatives
    assert float(cse_margin_loss(s1, s2, 0.3)) <= float(cse_margin_loss(s1, s2, 0.3, hardest=False))


def test_response_loss_prefers_matching_pairs():
    torch.manual_seed(0)
    head = ResponseSelectionHead(4)
    with torch.no_grad():
        for layer in (head.feed_forward[0], head.feed_forward[2]):
            layer.weight.copy_(torch.eye(4) * 3)
            layer.bias.zero_()
    inputs = torch.eye(4)
    with torch.no_grad():
        assert float(head.loss(inputs, inputs)) < float(head.loss(inputs, inputs.flip(0)))


def test_nli_head_features_and_shape():
    head = NliHead(5, hidden=7)
    assert head.classifier[0].in_features == 20
    assert head(torch.zeros(3, 5), torch.ones(3, 5)).shape == (3, 3)
    with torch.no_grad():
        assert float(head.loss(torch.zeros(2, 5), torch.ones(2, 5), torch.tensor([0, 2]))) > 0


def test_embedding_pull_counts_only_batch_rows():
    embedding = torch.nn.Embedding(4, 2)
    initial = embedding.weight.detach().clone()
    with torch.no_grad():
        embedding.weight[3] += 1.0
        assert float(embedding_pull(embedding, initial, torch.tensor([0, 1]), 1.0)) == 0.0
        assert float(embedding_pull(embedding, initial, torch.tensor([3, 3]), 0.5)) == pytest.approx(1.0)


def test_embedding_pull_gives_sparse_gradients_to_sparse_embeddings():
    embedding = torch.nn.Embedding(10, 2, sparse=True)
    initial = embedding.weight.detach().clone() - 1.0
    embedding_pull(embedding, initial, torch.tensor([2, 7, 2]), 1.0).backward()
    gradient = embedding.weight.grad
    assert gradient.is_sparse
    assert sorted(gradient.coalesce().indices()[0].tolist()) == [2, 7]


def test_hard_negatives_join_the_candidates_after_the_batch_responses():
    torch.manual_seed(0)
    inputs, responses, negatives = torch.randn(3, 6), torch.randn(3, 6), torch.randn(2, 6)
    head = ResponseSelectionHead(6, residual=True)  # scores are plain dot products
    candidates = torch.cat([responses, negatives])
    expected = torch.nn.functional.cross_entropy(inputs @ candidates.T, torch.arange(3))
    assert torch.allclose(head.loss(inputs, responses, negatives), expected)
    with torch.no_grad():
        assert head.loss(inputs, responses, responses[[1, 2, 0]] + 0) > head.loss(inputs, responses)


def test_residual_response_head_starts_from_the_encoders_dot_products():
    torch.manual_seed(0)
    inputs, responses = torch.randn(5, 6), torch.randn(5, 6)
    head = ResponseSelectionHead(6, residual=True)
    assert torch.allclose(head.scores(inputs, responses), inputs @ responses.T)
    assert not torch.allclose(ResponseSelectionHead(6).scores(inputs, responses), inputs @ responses.T)


def test_cosine_regression_loss_matches_the_formula():
    first = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    second = torch.tensor([[0.0, 2.0], [2.0, 2.0]])
    # cosines 0 and 1 against gold 0.4 and 0.8
    expected = ((0 - 0.4) ** 2 + (1 - 0.8) ** 2) / 2
    assert float(cosine_regression_loss(first, second, torch.tensor([0.4, 0.8]))) == pytest.approx(expected)


def test_cosine_ranking_loss_matches_the_formula():
    first = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    second = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    cosines = torch.tensor([1.0, 0.0, 2 ** -0.5])
    scores = torch.tensor([0.2, 0.9, 0.5])  # wanted order: pair 1 above 2 above 0
    wrong = [(1, 0), (1, 2), (2, 0)]  # (above, below)
    expected = torch.log(1 + sum(torch.exp(10.0 * (cosines[j] - cosines[i])) for i, j in wrong))
    assert float(cosine_ranking_loss(first, second, scores, scale=10.0)) == pytest.approx(float(expected))


def test_cosine_ranking_loss_ignores_tied_scores_and_falls_when_the_order_comes_right():
    first = torch.eye(2)
    tied = cosine_ranking_loss(first, torch.eye(2).flip(0), torch.tensor([0.5, 0.5]))
    assert float(tied) == pytest.approx(0.0)  # log(1 + nothing)
    scores = torch.tensor([0.9, 0.1])  # pair 0 should have the higher cosine
    right = cosine_ranking_loss(first, torch.tensor([[1.0, 0.0], [1.0, 0.0]]), scores)  # cosines 1, 0
    wrong = cosine_ranking_loss(first, torch.tensor([[0.0, 1.0], [0.0, 1.0]]), scores)  # cosines 0, 1
    assert float(right) < 0.01 < 19 < float(wrong)
