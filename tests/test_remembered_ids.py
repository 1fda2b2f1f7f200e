"""A searcher that remembers the ids stored when it opened (what `askalike serve` opens, so that
searches check their candidates in memory) answers as one that asks the database: a question
deleted after it opened is never shown, and a search still returns k hits."""

from __future__ import annotations

import pytest
from helpers import own_database

from askalike.indexer.store import Store
from askalike.indexer.upsert import delete_question
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.searcher import Searcher

QUERY = "how do i renew my visa in doha"


@pytest.mark.parametrize("mode", list(SearchMode))
def test_a_question_deleted_after_opening_is_not_shown(built, mode):
    index_dir, _ = built
    with Searcher(index_dir, remember_stored=True) as remembering:
        gone = remembering.search(QUERY, 5, mode=mode)[0]
        # the delete commits and writes new files; this searcher keeps the state it opened
        assert delete_question(index_dir, gone.external_id) == 1
        after = remembering.search(QUERY, 5, mode=mode)
        with Searcher(index_dir) as asking:
            expected = asking.search(QUERY, 5, mode=mode)
    assert gone.row_id not in [hit.row_id for hit in after] and len(after) == 5
    assert [hit.row_id for hit in after] == [hit.row_id for hit in expected]


def test_more_like_skips_a_question_deleted_after_opening(built):
    index_dir, _ = built
    with Searcher(index_dir, remember_stored=True) as remembering:
        question = remembering.question("q0")
        gone = remembering.more_like(question.id, 5)[0]
        assert delete_question(index_dir, gone.external_id) == 1
        after = remembering.more_like(question.id, 5)
    assert gone.row_id not in [hit.row_id for hit in after] and len(after) == 5


def test_the_ids_remembered_at_opening_come_from_the_faiss_file_while_it_is_current(built, monkeypatch):
    """At the manifest's generation the FAISS file holds exactly the stored ids, so a server's
    searcher, reopened after each write, reads them there, not row by row from the database."""
    index_dir, _ = built
    with Searcher(index_dir) as asking:
        expected = asking.search(QUERY, 5)
    monkeypatch.setattr(Store, "ids", lambda _: pytest.fail("every stored id read from the database"))
    with Searcher(index_dir, remember_stored=True) as remembering:
        assert [hit.row_id for hit in remembering.search(QUERY, 5)] == [hit.row_id for hit in expected]


@pytest.mark.parametrize("mode", list(SearchMode))
def test_a_database_ahead_of_the_files_is_asked_instead(built, mode, monkeypatch):
    """A run that committed deletes but was stopped before its files (or, in a server, the next
    write committed while a state opens): the FAISS file still holds the deleted ids, so the
    searcher remembers none and asks the database, shows none of them, and never reads every
    stored id (100 ms of a server's interpreter at 100,000 questions)."""
    index_dir, _ = built
    with Searcher(index_dir) as asking:
        gone = [hit.row_id for hit in asking.search(QUERY, 3, mode=mode)]
    with Store(own_database(index_dir)) as store:
        store.delete(gone)
    monkeypatch.setattr(Store, "ids", lambda _: pytest.fail("every stored id read from the database"))
    asked, live_ids = [], Store.live_ids
    monkeypatch.setattr(Store, "live_ids", lambda store, ids: asked.append(1) or live_ids(store, ids))
    with Searcher(index_dir, remember_stored=True) as remembering:
        after = remembering.search(QUERY, 5, mode=mode)
    assert asked and not set(gone) & {hit.row_id for hit in after} and len(after) == 5
    with Searcher(index_dir) as asking:
        assert [hit.row_id for hit in after] == [hit.row_id for hit in asking.search(QUERY, 5, mode=mode)]
