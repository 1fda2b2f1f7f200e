"""Approximate indexes answer as exact search does: the best k of the questions that pass a
filter, with k hits whenever at least k pass, on every index type and for any k; and hybrid and
lexical results that do not depend on k."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from helpers import collection, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import askalike.indexer.build
from askalike.indexer import index_types
from askalike.indexer.build import IndexOptions, index_sources
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.searcher import CANDIDATE_POOL, Searcher, SearchFilters, SearchResult

COUNT = 700  # enough for ivfpq to train its codebooks (IvfPq.MIN_TRAINING)
TYPES = ("flat", "hnsw", "ivf", "ivfpq")
TIE = 1e-5  # cosines this close are a tie: FAISS and numpy sum in different orders


class RandomEncoder:
    """Each text to a unit vector drawn from its hash: no two questions tie, and a query is as
    far from every question as chance makes it (the hardest case for an approximate index)."""

    kind, dim = "random", 32

    def encode(self, texts: Sequence[str], batch_size: int = 256, normalize: bool = True) -> np.ndarray:
        vectors = np.stack([np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8]))
                            .standard_normal(self.dim) for text in texts]).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _built(directory: Path, model: Path, records: list[dict], encoder: object | None,
           types: Sequence[str] = TYPES) -> dict[str, Path]:
    """The records as an index of each of ``types`` (embedded by ``encoder`` where given)."""
    source = write_jsonl(directory / "q.jsonl", records)
    with pytest.MonkeyPatch.context() as patch:
        if encoder is not None:
            patch.setattr(askalike.indexer.build, "load_encoder", lambda spec, threads=None: encoder)
        for index_type in types:
            index_sources(directory / index_type, [source], str(model),
                          options=IndexOptions(index_type=index_type, show_progress=False))
    return {index_type: directory / index_type for index_type in types}


@pytest.fixture(scope="module")
def random_indexes(tmp_path_factory, tiny_model) -> dict[str, Path]:
    """COUNT questions with random vectors, each in a category of its own (c0, c1, ...), so that a
    list of categories is a filter of any selectivity."""
    records = [{"id": f"q{i}", "subject": f"question {i}", "body": "", "category": f"c{i}"}
               for i in range(COUNT)]
    return _built(tmp_path_factory.mktemp("random"), tiny_model, records, RandomEncoder())


@pytest.fixture(scope="module")
def searchers(random_indexes):
    opened = {index_type: Searcher(path, encoder=RandomEncoder())
              for index_type, path in random_indexes.items()}
    yield opened
    for searcher in opened.values():
        searcher.close()


def assert_same_answer(found: list[SearchResult], exact: list[SearchResult]) -> None:
    """The same hits with the same cosines, best first; two hits may trade places only where
    their cosines tie."""
    assert len(found) == len(exact)
    np.testing.assert_allclose([r.cosine for r in found], [r.cosine for r in exact], atol=TIE)
    expected = {r.external_id: r.cosine for r in exact}
    last = exact[-1].cosine if exact else 0.0
    for result in found:
        assert (abs(expected.get(result.external_id, np.inf) - result.cosine) <= TIE
                or abs(result.cosine - last) <= TIE), result.external_id


# a filter of each selectivity: none passes, one, a few, about half, all (and no filter)
SHARES = st.sampled_from([0, 1, 3, COUNT // 2, COUNT, None])


@st.composite
def filters(draw) -> tuple[SearchFilters | None, int]:
    """A filter and how many questions pass it."""
    passing = draw(SHARES)
    if passing is None:
        return None, COUNT
    chosen = draw(st.permutations(range(COUNT)))[:passing]
    return SearchFilters(categories=tuple(f"c{i}" for i in chosen) or ("nothing",)), passing


@pytest.mark.reliability(
    "a dense search with a filter, or with a large -k, on an hnsw, ivf or ivfpq index",
    "the best k of the questions that pass, as exact search finds them, and k of them whenever "
    "at least k pass (a property test against flat over filters passing none, one, a few, half "
    "and all, and k from 1 to the collection's size)")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(filters(), st.integers(1, COUNT), st.sampled_from(TYPES[1:]))
def test_every_index_type_answers_as_exact_search(searchers, case, k, index_type):
    (filtering, passing), queries = case, ["how far is the airport", "visa fees"]
    exact = searchers["flat"].search_many(queries, k, filtering, SearchMode.dense)
    found = searchers[index_type].search_many(queries, k, filtering, SearchMode.dense)
    for answer, expected in zip(found, exact, strict=True):
        assert len(answer) == min(k, passing)
        assert_same_answer(answer, expected)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(filters(), st.integers(1, COUNT), st.sampled_from(TYPES[1:]))
def test_a_raised_approximate_search_returns_k_hits_that_pass(searchers, monkeypatch, case, k, index_type):
    """Every search that can go to FAISS's approximate search does (the default scans a
    collection this small): its hits are as many as exact search's, pass the filter, and carry
    their exact cosines, best first."""
    monkeypatch.setattr(index_types, "SCAN_MAX", 0)
    monkeypatch.setattr(index_types.Hnsw, "SCORED_PER_EF", 0)
    filtering, passing = case
    every = searchers["flat"].search("visa fees", COUNT, mode=SearchMode.dense)
    cosines = {r.external_id: r.cosine for r in every}
    found = searchers[index_type].search("visa fees", k, filtering, SearchMode.dense)
    assert len(found) == min(k, passing)
    assert filtering is None or {r.metadata["category"] for r in found} <= set(filtering.categories)
    np.testing.assert_allclose([r.cosine for r in found], [cosines[r.external_id] for r in found], atol=TIE)
    assert [r.cosine for r in found] == sorted((r.cosine for r in found), reverse=True)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(filters(), st.integers(1, COUNT), st.sampled_from(TYPES[1:]))
def test_more_like_this_answers_as_exact_search(searchers, case, k, index_type):
    filtering, _ = case
    row_id = searchers[index_type].search("airport", 1, mode=SearchMode.dense)[0].row_id
    found = searchers[index_type].more_like(row_id, k, filtering)
    exact = searchers["flat"].more_like(row_id, k, filtering)  # same source, same row ids
    assert row_id not in {r.row_id for r in found}
    assert_same_answer(found, exact)


@pytest.mark.reliability(
    "an approximate search whose candidates run out before k questions that pass are found "
    "(search settings far too low for the filter and k)",
    "the search is answered again by scanning the questions that pass: k hits whenever at least "
    "k pass, the best ones, never a short list")
@pytest.mark.parametrize("index_type", TYPES[1:])
def test_a_search_that_runs_dry_is_answered_by_the_exact_scan(searchers, monkeypatch, index_type):
    starved = {"ef_search": 1, "probes": 1, "k_factor": 1}
    monkeypatch.setattr(index_types.IndexType, "query_settings", lambda self, *_: starved)
    filtering = SearchFilters(categories=tuple(f"c{i}" for i in range(0, COUNT, 4)))  # 175 pass
    for k in (150, 175, 500):
        found = searchers[index_type].search("visa fees", k, filtering, SearchMode.dense)
        assert len(found) == min(k, COUNT // 4)
        assert_same_answer(found, searchers["flat"].search("visa fees", k, filtering, SearchMode.dense))


# ------------------------------------------------------------------ hybrid and lexical: k only cuts

@pytest.fixture(scope="module")
def word_indexes(tmp_path_factory, tiny_model) -> dict[str, Path]:
    return _built(tmp_path_factory.mktemp("words"), tiny_model, collection(COUNT), None, ("flat", "hnsw"))


QUERIES = ["cheap visa for expats", "where to renew a driving licence", "best pizza near the pearl",
           "school fees", "how to find a flat"]


def _ranking(results: list[SearchResult]) -> list[tuple[str, float]]:
    return [(r.external_id, round(r.score, 9)) for r in results]


@pytest.mark.reliability(
    "`askalike search Q -k 10` and `-k 1000` in hybrid or lexical mode, with or without a filter",
    "the same first 10 results with the same scores: the fused score of a question does not "
    "depend on k, and the best k are found exactly (threshold algorithm)")
@pytest.mark.parametrize("index_type", ["flat", "hnsw"])
@pytest.mark.parametrize("mode", [SearchMode.hybrid, SearchMode.lexical])
@pytest.mark.parametrize("filtering", [None, SearchFilters(categories=("visa", "car", "school"))])
def test_the_top_of_a_search_does_not_depend_on_k(word_indexes, index_type, mode, filtering):
    with Searcher(word_indexes[index_type]) as searcher:
        for k in (1, 10, 150):
            small = searcher.search_many(QUERIES, k, filtering, mode)
            large = searcher.search_many(QUERIES, 1000, filtering, mode)
            for top, longer in zip(small, large, strict=True):
                assert _ranking(top) == _ranking(longer)[:k]
                assert [r.rank for r in longer] == list(range(1, len(longer) + 1))


def test_hybrid_search_returns_k_hits_whenever_k_pass(word_indexes):
    filtering = SearchFilters(categories=("visa", "car"))
    with Searcher(word_indexes["flat"]) as searcher:
        passing = len(searcher.search("visa", COUNT, filtering, SearchMode.dense))
        assert CANDIDATE_POOL < passing < COUNT
        for k in (5, passing - 1, passing, COUNT):
            hybrid = searcher.search("cheap visa for expats", k, filtering, SearchMode.hybrid)
            assert len(hybrid) == min(k, passing)
            lexical = searcher.search("cheap visa for expats", k, filtering, SearchMode.lexical)
            assert all(r.score > 0 for r in lexical)
            assert {r.metadata["category"] for r in [*hybrid, *lexical]} <= {"visa", "car"}
