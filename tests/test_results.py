"""What a person is shown of a search (``retrieval.results``): weak hits dropped, near-duplicates
folded into their better hit, the match agreeing with the order in every mode, the JSON payload,
and a question found by the user's own id."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import collection, index, write_jsonl

from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.results import Shown, at_least, collapsed, search_payload
from askalike.retrieval.searcher import Searcher, SearchError, SearchResult


def hit(rank: int, cosine: float, duplicate_of: int | None = None) -> SearchResult:
    return SearchResult(rank, 100 + rank, f"q{rank}", "/data/forum.jsonl", f"subject {rank}", "body", {},
                        cosine=cosine, score=cosine, duplicate_of=duplicate_of)


def test_at_least_drops_the_hits_below_the_min_match():
    hits = [hit(1, 0.9), hit(2, 0.5), hit(3, 0.49), hit(4, -0.3)]
    assert [h.rank for h in at_least(hits, 0.5)] == [1, 2]
    assert at_least(hits, 0.0) == hits  # a negative cosine matches 0%, which reaches 0


def test_collapse_folds_near_duplicates_into_the_hit_they_duplicate_and_ranks_again():
    # 3 duplicates 1; 4 duplicates 2; 5 duplicates 4, which is itself folded into 2
    hits = [hit(1, 0.9), hit(2, 0.8), hit(3, 0.7, 1), hit(4, 0.6, 2), hit(5, 0.5, 4), hit(6, 0.4)]
    shown = collapsed(hits)
    assert [(h.rank, h.external_id) for h in shown] == [(1, "q1"), (2, "q2"), (3, "q6")]
    assert [[a.external_id for a in h.alike] for h in shown] == [["q3"], ["q4", "q5"], []]
    assert all(a.duplicate_of is None for h in shown for a in h.alike)
    assert collapsed([]) == []


def test_payload_names_the_query_the_mode_and_each_hit_with_its_alike():
    shown = collapsed([hit(1, 0.9), hit(2, 0.85, 1)])
    payload = search_payload(shown, SearchMode.lexical, query="visa")
    assert {k: payload[k] for k in ("query", "mode", "count")} == {"query": "visa", "mode": "lexical",
                                                                  "count": 1}
    first = payload["results"][0]
    assert set(first) == {"rank", "id", "source", "subject", "excerpt", "match", "cosine", "score",
                          "duplicate_of", "alike", "metadata"}
    assert first["alike"] == [{"id": "q2", "source": "/data/forum.jsonl", "match": 0.85}]
    like = search_payload([], SearchMode.dense, like=hit(7, 1.0))
    assert like == {"like": {"id": "q7", "source": "/data/forum.jsonl"}, "mode": "dense", "count": 0,
                    "results": []}


@pytest.mark.parametrize("mode", list(SearchMode))
def test_the_match_is_the_judges_figure_for_the_cosine_in_every_mode(built, mode):
    index_dir, _ = built
    query = "where can i get a cheap car near the pearl"
    with Searcher(index_dir) as searcher:
        results = searcher.search(query, 15, mode=mode)
        dense = {r.external_id: r.match for r in searcher.search(query, 200, mode=SearchMode.dense)}
        judge = searcher.judge
    assert all(r.match == pytest.approx(float(judge.probability(r.cosine))) for r in results)
    assert all(r.match == pytest.approx(dense[r.external_id]) for r in results)  # one scale in every mode
    assert len({r.match for r in results}) > 1 and all(0.0 <= r.match <= 1.0 for r in results)
    if mode == SearchMode.lexical:  # the BM25 order, not the cosine's
        assert [r.score for r in results] == sorted((r.score for r in results), reverse=True)


def test_shown_collapses_to_k_leading_hits_and_drops_weak_ones(tmp_path, steep_model):
    records = collection(30)
    copies = [{**records[3], "id": f"again{n}", "body": records[3]["body"] + " " * n} for n in (1, 2)]
    write_jsonl(tmp_path / "forum.jsonl", [*records, *copies])
    index(tmp_path / "forum.jsonl", tmp_path / "index", steep_model)
    query = f"{records[3]['subject']} {records[3]['body']}"
    with Searcher(tmp_path / "index") as searcher:
        shown = Shown(k=5, collapse=True)
        results = shown.of(searcher, searcher.search(query, shown.depth))
        plain = Shown(k=5).of(searcher, searcher.search(query, 5))
        strict = Shown(k=5, min_match=0.7).of(searcher, searcher.search(query, 5))  # copies: 73%
    assert len(results) == 5 and [r.rank for r in results] == [1, 2, 3, 4, 5]
    assert {results[0].external_id, *(a.external_id for a in results[0].alike)} == {"q3", "again1", "again2"}
    assert [r.duplicate_of for r in plain[:3]] == [None, 1, 1]
    assert {r.external_id for r in strict} == {"q3", "again1", "again2"}


def test_shown_search_and_like_are_the_searchers_hits_at_depth_as_shown(tmp_path, steep_model):
    records = collection(30)
    copies = [{**records[3], "id": f"again{n}", "body": records[3]["body"] + " " * n} for n in (1, 2)]
    write_jsonl(tmp_path / "forum.jsonl", [*records, *copies])
    index(tmp_path / "forum.jsonl", tmp_path / "index", steep_model)
    queries = [f"{records[3]['subject']} {records[3]['body']}", records[7]["subject"]]
    shown = Shown(k=4, min_match=0.3, collapse=True)
    with Searcher(tmp_path / "index") as searcher:
        answers = shown.search(searcher, queries, mode=SearchMode.lexical)
        by_hand = searcher.search_many(queries, shown.depth, mode=SearchMode.lexical)
        liked = searcher.question("q3")
        like = shown.like(searcher, liked)
        like_by_hand = searcher.more_like(liked.id, shown.depth)
        assert [a.hits for a in answers] == [shown.of(searcher, found) for found in by_hand]
        assert like.hits == shown.of(searcher, like_by_hand)
        assert shown.like(searcher, like.hits[0]).hits == shown.of(searcher, searcher.more_like(
            like.hits[0].row_id, shown.depth))  # a hit is liked by its row id
    assert [a.found for a in answers] == [len(found) for found in by_hand] == [12, 12]
    assert answers[0].payload() == search_payload(answers[0].hits, SearchMode.lexical, query=queries[0])
    assert like.payload(str.upper) == search_payload(like.hits, SearchMode.dense, like=liked,
                                                     source_label=str.upper)
    assert (like.found, like.mode) == (len(like_by_hand), SearchMode.dense)


def test_a_question_is_found_by_the_users_id(tmp_path, tiny_model):
    write_jsonl(tmp_path / "a.jsonl", collection(5))
    write_jsonl(tmp_path / "b.jsonl", [replace_id(r, "b") for r in collection(3)])
    index(tmp_path / "a.jsonl", tmp_path / "index", tiny_model, tmp_path / "b.jsonl")
    with Searcher(tmp_path / "index") as searcher:
        assert searcher.question("q4").subject == collection(5)[4]["subject"]
        assert searcher.question("q1", ["b.jsonl"]).body.startswith("b ")
        with pytest.raises(SearchError, match=r"'q1' is in 2 sources \(a.jsonl, b.jsonl\): name one"):
            searcher.question("q1")
        with pytest.raises(SearchError, match="no question with id 'q9'"):
            searcher.question("q9")


def replace_id(record: dict, prefix: str) -> dict:
    return {**record, "body": f"{prefix} {record['body']}"}


def test_a_result_made_without_a_match_gets_the_clipped_cosine():
    assert hit(1, -0.2).match == 0.0 and replace(hit(1, 0.83), match=0.5).match == 0.5
