"""Lexical (BM25) and hybrid ranking: the BM25 index and its incremental updates, score fusion,
and hybrid reranking of CQA candidates."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from helpers import runner, search_hits
from hypothesis import given, settings
from hypothesis import strategies as st

from askalike.core.cqa_questions import OriginalQuestion, RelatedQuestion
from askalike.core.lexical import LexicalIndex, LexicalSegments, lexical_tokens, rank_candidates
from askalike.retrieval.fusion import SearchMode, fuse, fuse_lists, fused_score, min_max
from askalike.retrieval.reranker import Reranker

DOCS = {10: "how do i renew my visa in doha", 11: "cheap used cars for sale",
        12: "visa renewal fees for expats", 13: "best pizza near the pearl", 14: ""}


def bm25_by_hand(query: str, docs: dict[int, str], doc: int) -> float:
    """Lucene's BM25 written out term by term, for one document."""
    tokens = {d: lexical_tokens(text) for d, text in docs.items()}
    average = sum(len(t) for t in tokens.values()) / len(tokens)
    score = 0.0
    for term in lexical_tokens(query):
        df = sum(term in t for t in tokens.values())
        tf = tokens[doc].count(term)
        if df and tf:
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            score += idf * tf / (tf + 1.5 * (1 - 0.75 + 0.75 * len(tokens[doc]) / average))
    return score


def test_bm25_scores_match_the_formula():
    index = LexicalIndex.build(DOCS.items())
    scores = dict(zip(index.doc_ids.tolist(), index.scores("visa renewal in doha").tolist(), strict=True))
    for doc in DOCS:
        assert scores[doc] == pytest.approx(bm25_by_hand("visa renewal in doha", DOCS, doc))
    assert [doc for doc, _ in index.top("visa renewal", 5)] == [12, 10]


def test_scores_do_not_depend_on_how_spread_the_ids_are():
    """Close ids are looked up in a table, ids spread thinly by a binary search: the same BM25."""
    close = LexicalIndex.build(DOCS.items())
    spread = LexicalIndex.build((doc * 100_000, text) for doc, text in DOCS.items())
    for query in ("visa renewal in doha", "cheap pizza", "nothing"):
        np.testing.assert_array_equal(close.scores(query), spread.scores(query))
    assert [doc // 100_000 for doc, _ in spread.top("visa renewal", 5)] == [12, 10]


def test_postings_of_a_question_the_index_does_not_hold_are_refused():
    index = LexicalIndex.build(DOCS.items())
    held = index.doc_ids != 12  # 12's postings stay, inside the ids' span: a gap in the table
    for foreign in (replace(index, doc_ids=index.doc_ids[held], doc_lengths=index.doc_lengths[held]),
                    replace(index, posting_docs=np.where(index.posting_docs == 12, 15, index.posting_docs))):
        with pytest.raises(ValueError, match="does not hold"):
            foreign.scores("visa")


def test_updates_equal_a_fresh_build_and_survive_a_round_trip(tmp_path):
    first = {k: v for k, v in DOCS.items() if k != 13}
    changed = {**first, 11: "cheap flights to london"}
    changed.pop(12)
    changed[13] = DOCS[13]
    updated = LexicalIndex.build(first.items()).updated([(11, changed[11]), (13, changed[13])], [12])
    fresh = LexicalIndex.build(sorted(changed.items()))
    for query in ("visa", "cheap london", "pizza pearl", "nothing matches"):
        np.testing.assert_allclose(updated.scores(query), fresh.scores(query))
    assert updated.doc_ids.tolist() == sorted(changed)
    path = tmp_path / "lexical.npz"
    updated.write(path)
    np.testing.assert_allclose(LexicalIndex.read(path).scores("visa cheap"), updated.scores("visa cheap"))


def test_appending_new_ids_gives_the_arrays_of_a_fresh_build():
    """Ids above every indexed one are merged into the postings without sorting them again
    (``_appended``): the result must be the index a build of everything makes, array for array,
    new terms included and ids given out of order."""
    first = {k: v for k, v in DOCS.items() if k < 12}
    later = [(31, "visa zolfaghari pizza"), (20, "brand new words here and visa")]
    appended = LexicalIndex.build(first.items()).updated(later, ())
    fresh = LexicalIndex.build(sorted([*first.items(), *later]))
    assert set(appended.terms) == set(fresh.terms)
    for query in ("visa", "zolfaghari pizza", "brand new", "cheap"):
        np.testing.assert_array_equal(appended.scores(query), fresh.scores(query))
    assert appended.doc_ids.tolist() == fresh.doc_ids.tolist() == sorted([*first, 20, 31])
    np.testing.assert_array_equal(appended.doc_lengths, fresh.doc_lengths)
    for term in fresh.terms:  # each term's postings: the same questions, in id order
        old, new = fresh.term_ids[term], appended.term_ids[term]
        assert (appended.posting_docs[appended.offsets[new]:appended.offsets[new + 1]].tolist()
                == fresh.posting_docs[fresh.offsets[old]:fresh.offsets[old + 1]].tolist())
    assert LexicalIndex.empty().updated(later, ()).doc_ids.tolist() == [20, 31]
    # the term ids it carries from the update are those of its own terms
    assert appended.term_ids == {term: number for number, term in enumerate(appended.terms)}


def test_scores_of_chosen_ids_and_zero_for_unknown_ones():
    index = LexicalIndex.build(DOCS.items())
    scores = dict(zip(index.doc_ids.tolist(), index.scores("visa doha").tolist(), strict=True))
    assert index.scores_of("visa doha", [12, 99, 10]) == {12: scores[12], 99: 0.0, 10: scores[10]}


def test_top_respects_the_allowed_ids_and_skips_zero_scores():
    index = LexicalIndex.build(DOCS.items())
    scores = dict(zip(index.doc_ids.tolist(), index.scores("visa").tolist(), strict=True))
    assert index.top("visa", 5, allowed=np.array([12, 13])) == [(12, pytest.approx(scores[12]))]
    assert index.top("zebra", 5) == [] and LexicalIndex.empty().top("visa", 3) == []


def test_segments_score_as_one_index_of_all_their_questions():
    """The main BM25 file and the added one: IDF, lengths and their average are the whole
    collection's, so every score is the one index's, to the last bit."""
    main, added = {k: v for k, v in DOCS.items() if k < 12}, {k: v for k, v in DOCS.items() if k >= 12}
    added[20] = "visa zolfaghari pizza"
    segmented = LexicalSegments(LexicalIndex.build(main.items()), LexicalIndex.build(added.items()))
    whole = LexicalIndex.build({**main, **added}.items())
    np.testing.assert_array_equal(segmented.doc_ids, whole.doc_ids)
    for query in ("visa renewal in doha", "zolfaghari", "cheap pizza visa", "nothing"):
        np.testing.assert_array_equal(segmented.scores(query), whole.scores(query))
        assert segmented.top(query, 3) == whole.top(query, 3)
        allowed = np.array([11, 20])
        assert segmented.top(query, 3, allowed=allowed) == whole.top(query, 3, allowed=allowed)
    assert segmented.scores_of("visa", [20, 99, 10]) == whole.scores_of("visa", [20, 99, 10])
    with pytest.raises(ValueError, match="not above"):
        LexicalSegments(LexicalIndex.build(added.items()), LexicalIndex.build(main.items()))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.text(max_size=40)), max_size=12),
       st.lists(st.integers(0, 30), max_size=5), st.text(max_size=30))
def test_any_sequence_of_updates_equals_a_fresh_build(pairs, removed, query):
    first, added = dict(pairs[:3]), dict(pairs[3:])
    index = LexicalIndex.build(first.items()).updated(added.items(), removed)
    expected = {doc: text for doc, text in first.items() if doc not in removed and doc not in added}
    fresh = LexicalIndex.build(sorted({**expected, **added}.items()))
    assert index.doc_ids.tolist() == fresh.doc_ids.tolist()
    np.testing.assert_allclose(index.scores(query), fresh.scores(query), atol=1e-9)


def test_fusion_is_a_convex_combination_of_normalised_scores():
    assert min_max([2.0, 4.0, 3.0]) == [0.0, 1.0, 0.5] and min_max([1.0, 1.0]) == [0.0, 0.0]
    fused = fuse({"a": 0.9, "b": 0.5}, {"b": 12.0, "c": 2.0}, dense_weight=0.25)
    assert fused == pytest.approx({"a": 0.25, "b": 0.75, "c": 0.0})
    assert fuse_lists([0.1, 0.3], [5.0, 1.0], 1.0) == [0.0, 1.0]  # weight 1: dense alone
    assert fuse_lists([0.1, 0.3], [5.0, 1.0], 0.0) == [1.0, 0.0]  # weight 0: lexical alone
    scored = fused_score([0.9, 0.5], [0.0, 12.0], dense_weight=0.25)  # a pool's bounds
    assert scored(0.5, 12.0) == pytest.approx(0.75)  # on the pool: what fuse gives
    assert scored(0.1, 0.0) == pytest.approx(-0.25)  # beyond it: the same line, not re-fitted


def question(text: str, related: list[str]) -> OriginalQuestion:
    return OriginalQuestion("Q1", text, "", tuple(
        RelatedQuestion(id=f"Q1_R{i}", subject=r, body="", ranking_order=i + 1, relevance=None, relevant=None)
        for i, r in enumerate(related)))


def test_hybrid_reranking_fuses_dense_and_bm25(tiny_model):
    from askalike.core.loader import load_encoder

    questions = [question("visa renewal in doha", ["renew my visa", "cheap cars", "doha visa office"])]
    encoder = load_encoder(tiny_model)
    dense = Reranker(encoder).scores(questions)
    lexical = Reranker(None, SearchMode.lexical).scores(questions)
    assert lexical == rank_candidates(["visa renewal in doha"],
                                      [[(r.id, r.text) for r in questions[0].related]])
    hybrid = Reranker(encoder, SearchMode.hybrid, dense_weight=0.3).scores(questions)
    assert hybrid == [fuse_lists(dense[0], lexical[0], 0.3)]
    with pytest.raises(ValueError, match="needs an encoder"):
        Reranker(None, SearchMode.hybrid)


# ------------------------------------------------------------------ the index directory's BM25 file

RARE = {"id": "rare", "subject": "Zolfaghari clinic", "body": "Has anyone been to the Zolfaghari clinic?"}


def build(index_dir, records, model, tmp_path, *extra_options) -> None:
    from helpers import QUIET, write_jsonl

    from askalike.indexer.build import index_sources

    source = write_jsonl(tmp_path / "questions.jsonl", records)
    options = QUIET if not extra_options else extra_options[0]
    index_sources(index_dir, [source], str(model), options=options)


def test_hybrid_search_finds_a_question_sharing_only_a_rare_term(tmp_path, tiny_model):
    from helpers import collection

    from askalike.retrieval.searcher import Searcher

    build(tmp_path / "index", [*collection(60), RARE], tiny_model, tmp_path)
    with Searcher(tmp_path / "index") as searcher:
        assert searcher.default_mode == SearchMode.dense  # the tiny model has no tuned weight
        for mode in (SearchMode.lexical, SearchMode.hybrid):
            (first, *_) = searcher.search("zolfaghari opening hours", 5, mode=mode)
            assert first.external_id == "rare", mode
        dense_ids = [r.external_id for r in searcher.search("zolfaghari opening hours", 5,
                                                            mode=SearchMode.dense)]
        hybrid = searcher.search("zolfaghari opening hours", 5, mode=SearchMode.hybrid)
    assert [r.rank for r in hybrid] == [1, 2, 3, 4, 5]
    assert all(-1.0 <= r.cosine <= 1.0 for r in hybrid) and hybrid[0].score == pytest.approx(
        max(r.score for r in hybrid))
    assert "rare" not in dense_ids[:1]  # what hybrid adds: the untrained dense model misses it


def test_the_bm25_file_follows_added_and_removed_questions(tmp_path, tiny_model):
    from helpers import QUIET, collection

    from askalike.indexer.build import IndexOptions
    from askalike.indexer.directory import check_index, open_index
    from askalike.indexer.manifest import load_lexical
    from askalike.retrieval.searcher import Searcher

    index_dir = tmp_path / "index"
    records = collection(40)
    build(index_dir, records, tiny_model, tmp_path)
    build(index_dir, [*records, RARE], tiny_model, tmp_path)  # add-only: the file is extended
    opened = open_index(index_dir)
    try:
        extended = load_lexical(index_dir, opened.manifest)
        fresh = LexicalIndex.build(opened.store.texts())
    finally:
        opened.close()
    assert extended.doc_ids.tolist() == fresh.doc_ids.tolist()
    np.testing.assert_allclose(extended.scores("zolfaghari visa"), fresh.scores("zolfaghari visa"))

    prune = IndexOptions(prune=True, show_progress=False)
    build(index_dir, records, tiny_model, tmp_path, prune)  # RARE removed from the sources
    with Searcher(index_dir) as searcher:
        for mode in (SearchMode.lexical, SearchMode.hybrid):
            assert "rare" not in [r.external_id for r in searcher.search("zolfaghari clinic", 10, mode=mode)]
    assert check_index(index_dir).ok
    assert QUIET.show_progress is False


def test_a_damaged_bm25_file_is_refused_and_repaired(tmp_path, tiny_model):
    from helpers import collection

    from askalike.app.cli import app

    index_dir = tmp_path / "index"
    build(index_dir, [*collection(20), RARE], tiny_model, tmp_path)
    (lexical_file,) = index_dir.glob("lexical-*.npz")
    content = bytearray(lexical_file.read_bytes())
    content[len(content) // 2] ^= 0xFF
    lexical_file.write_bytes(bytes(content))
    refused = runner.invoke(app, ["search", "zolfaghari", "--index", str(index_dir), "--mode", "lexical"])
    assert refused.exit_code == 2
    assert lexical_file.name in refused.stderr and "check --repair" in refused.stderr
    assert runner.invoke(app, ["check", "--index", str(index_dir)]).exit_code == 1
    assert runner.invoke(app, ["check", "--index", str(index_dir), "--repair"]).exit_code == 0
    repaired = runner.invoke(app, ["search", "zolfaghari", "--index", str(index_dir), "--mode", "lexical",
                                   "--json"])
    assert repaired.exit_code == 0, repaired.output
    assert search_hits(repaired.stdout)[0]["id"] == "rare"


def test_hybrid_is_the_default_only_where_tuning_found_that_words_help():
    from askalike.retrieval.fusion import default_mode

    assert default_mode(None) == SearchMode.dense  # never tuned
    assert default_mode(1.0) == SearchMode.dense  # tuning chose dense alone
    assert default_mode(0.5) == SearchMode.hybrid
