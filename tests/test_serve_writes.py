"""Writes through the server against searches, index runs and other server processes: a search
answers from one committed state (old or new, never half) while writes go on, and sees a commit
as soon as it is made, also one made by `askalike index` or by another server."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from helpers import index, write_jsonl
from serving import WRITE, listening, serving

from askalike.core.loader import load_encoder
from askalike.core.text import join_subject_body
from askalike.retrieval.fusion import SearchMode

QUERY = "how do i find a good visa this weekend"
TEXTS = [("visa office hours", "when does the visa office open this weekend?"),
         ("good visa agent", "how do i find a good visa agent this weekend in doha?")]


@pytest.mark.slow
@pytest.mark.reliability("searches from 4 clients while a client edits a question's text 10 times and "
                         "adds 30 questions through the API", "every hit's cosine is that of its "
                         "shown text (never new text with an old vector); none fails; 230 questions after")
def test_searches_during_writes_see_one_committed_state(built, tmp_path, tiny_model):
    encoder = load_encoder(str(tiny_model))
    query_vector = encoder.encode([QUERY])[0]
    problems: list[str] = []
    counts: list[list[int]] = []  # each client's question counts, in the order it saw them
    writing = threading.Event()
    with listening(built[0], tmp_path) as url:

        def search() -> None:
            seen: list[int] = []
            counts.append(seen)
            with httpx.Client(base_url=url, timeout=30) as client:
                while writing.is_set():
                    answer = client.get("/search", params={"q": QUERY, "k": 5, "mode": "dense"})
                    if answer.status_code != 200:
                        problems.append(f"{answer.status_code}: {answer.text}")
                        continue
                    hits = answer.json()["results"]
                    texts = [join_subject_body(hit["subject"], hit["excerpt"]) for hit in hits]
                    cosines = encoder.encode(texts) @ query_vector
                    for hit, cosine in zip(hits, cosines, strict=True):
                        if abs(hit["cosine"] - float(cosine)) > 1e-4:
                            problems.append(f"{hit['id']} {hit['subject']!r}: {hit['cosine']} != {cosine}")
                    seen.append(client.get("/ready").json()["questions"])

        writing.set()
        searchers = [threading.Thread(target=search) for _ in range(4)]
        for thread in searchers:
            thread.start()
        with httpx.Client(base_url=url, headers=WRITE, timeout=60) as writer:
            for round_ in range(10):
                subject, body = TEXTS[round_ % 2]
                edited = writer.put("/questions/q3", params={"source": "questions.jsonl"},
                                    json={"subject": subject, "body": body})
                assert edited.status_code == 200, edited.text
                new = [{"id": f"new-{round_}-{i}", "subject": f"{subject} {i}", "body": body}
                       for i in range(3)]
                added = writer.post("/questions", json=new)
                assert added.status_code == 200, added.text
        writing.clear()
        for thread in searchers:
            thread.join()
        final = httpx.get(f"{url}/ready").json()["questions"]
    assert not problems, problems[:5]
    # no client ever sees fewer than before; nothing lost, nothing doubled
    assert all(seen == sorted(seen) for seen in counts) and sum(map(len, counts)) and final == 230


def test_a_cli_index_run_is_seen_by_the_next_search(built, tmp_path, tiny_model):
    index_dir = built[0]
    with serving(index_dir, tmp_path) as client:
        assert client.get("/ready").json()["questions"] == 200
        more = write_jsonl(tmp_path / "more.jsonl", [{"id": "m1", "subject": "penguin colonies",
                                                      "body": "where do penguins nest?"}])
        index(more, index_dir, tiny_model)
        hits = client.get("/search", params={"q": "penguin colonies where do penguins nest", "k": 1,
                                             "mode": "dense"}).json()["results"]
        assert [(hit["id"], hit["source"].rsplit("/", 1)[-1]) for hit in hits] == [("m1", "more.jsonl")]
        assert client.get("/ready").json()["questions"] == 201


def test_a_write_through_one_server_is_seen_by_another(built, tmp_path):
    """What --workers N (or replicas sharing the directory) rely on: each process follows the
    manifest, so a write through one is answered by the others."""
    with serving(built[0], tmp_path / "a") as first, serving(built[0], tmp_path / "b") as second:
        assert second.get("/questions/n1").status_code == 404
        penguins = {"id": "n1", "subject": "penguin colonies", "body": "nests?"}
        first.post("/questions", json=penguins, headers=WRITE)
        assert second.get("/questions/n1").json()["subject"] == "penguin colonies"
        hits = second.get("/search", params={"q": "penguin colonies nests?", "k": 1, "mode": "dense"}).json()
        assert hits["results"][0]["id"] == "n1"
        second.delete("/questions/n1", headers=WRITE)
        assert first.get("/questions/n1").status_code == 404



@pytest.mark.reliability("a server's index changes to a state that cannot be opened (damaged files)",
                         "searches go on from the state before, each logging the failure and trying "
                         "the new state again")
def test_a_state_that_cannot_be_opened_leaves_the_one_before_answering(built, caplog):
    from askalike.retrieval.live import LiveSearcher
    from askalike.retrieval.searcher import Searcher

    index_dir = built[0]
    opened: list[object] = []

    def open_searcher(encoder):
        opened.append(encoder)
        if len(opened) > 1:
            raise OSError("damaged FAISS file")
        return Searcher(index_dir)

    live = LiveSearcher(index_dir, open_searcher)
    manifest = index_dir / "manifest.json"
    manifest.write_bytes(manifest.read_bytes() + b"\n")  # a new state, as a commit makes
    for _ in range(3):
        with live.searching() as searcher:
            assert searcher.search("visa", 3)
    assert len(opened) == 4 and caplog.text.count("cannot open the index's new state") == 3


def test_searches_during_a_write_in_this_process_answer_from_the_state_before(built):
    """The writer opens its new state; a search meanwhile never opens it (and so never waits for
    files still being written): it answers at once from the state before. A write that fails
    after its commit still opens what it committed."""
    from askalike.retrieval.live import LiveSearcher
    from askalike.retrieval.searcher import Searcher

    index_dir = built[0]
    opened: list[str] = []

    def open_searcher(encoder):
        opened.append(threading.current_thread().name)
        return Searcher(index_dir, encoder=encoder)

    live = LiveSearcher(index_dir, open_searcher)

    def search() -> object:
        with live.searching() as searcher:
            assert searcher.search("visa", 3)
            return searcher

    first = search()
    manifest = index_dir / "manifest.json"
    with live.committing(), ThreadPoolExecutor(1, thread_name_prefix="search") as searches:
        manifest.write_bytes(manifest.read_bytes() + b"\n")  # the write's new state
        assert live.ready_now()
        assert searches.submit(search).result() is first
    assert opened == ["MainThread", "MainThread"]
    second = search()
    assert second is not first and len(opened) == 2
    with pytest.raises(RuntimeError, match="after the commit"), live.committing():
        manifest.write_bytes(manifest.read_bytes() + b"\n")
        raise RuntimeError("failed after the commit")
    assert len(opened) == 3 and search() is not second
    live.close()


def test_a_replaced_searcher_is_closed_on_a_thread_of_its_own_once_its_last_search_ends(tmp_path):
    """Freeing a replaced state's files and arrays takes milliseconds: not in a search's thread,
    where every request queued behind that search would wait for it."""
    from askalike.retrieval.live import LiveSearcher

    closed: list[tuple[int, str]] = []

    class State:
        encoder = None

        def close(self) -> None:
            closed.append((id(self), threading.current_thread().name))

    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    live = LiveSearcher(tmp_path, lambda encoder: State())
    with live.searching() as first:
        manifest.write_text("{} ")  # a new state, opened while a search still uses the first
        live.refresh(wait=True)
        with live.searching() as second:
            assert second is not first
        assert closed == []
    manifest.write_text("{}  ")
    live.refresh(wait=True)  # replaces the second, which no search uses
    live.close()
    closed_on = dict(closed)
    assert len(closed) == len(closed_on) == 3  # each state closed once
    assert closed_on.pop(id(first)) == closed_on.pop(id(second)) == "askalike-retired-searchers"
    assert list(closed_on.values()) == ["MainThread"]  # the current one, by close()


def test_a_replaced_state_that_cannot_be_closed_leaves_the_next_ones_closed(tmp_path, caplog):
    from askalike.retrieval.live import LiveSearcher

    opened: list[object] = []
    closed: list[object] = []

    class State:
        encoder = None

        def __init__(self) -> None:
            opened.append(self)

        def close(self) -> None:
            if self is opened[0]:
                raise OSError("device gone")
            closed.append(self)

    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    live = LiveSearcher(tmp_path, lambda encoder: State())
    for spaces in range(1, 4):
        manifest.write_text("{}" + " " * spaces)  # a new state: the one before is retired
        live.refresh(wait=True)
    live.close()
    assert sorted(map(id, closed)) == sorted(map(id, opened[1:]))  # all but the one that failed
    assert "cannot close a replaced state" in caplog.text


@pytest.mark.reliability("a server starts loading while a write commits: it reads the manifest just "
                         "before the writer replaces it and removes the files it named",
                         "the server opens the new state and answers; a state that fails to open "
                         "while its manifest stays the same is refused as damaged")
def test_a_first_state_caught_mid_write_is_opened_again(built, tmp_path, tiny_model, monkeypatch):
    import askalike.indexer.directory
    from askalike.indexer.layout import IndexDirectoryError
    from askalike.retrieval.searcher import Searcher

    index_dir = built[0]
    read_lexical = askalike.indexer.directory.load_lexical
    reads: list[str] = []

    def caught_mid_write(directory, manifest):
        reads.append(manifest.lexical_file)
        if len(reads) == 1:  # an index run commits between the manifest's read and its files'
            index(write_jsonl(tmp_path / "more.jsonl", [{"id": "m1", "subject": "penguins"}]),
                  index_dir, tiny_model)
        return read_lexical(directory, manifest)

    monkeypatch.setattr(askalike.indexer.directory, "load_lexical", caught_mid_write)
    searcher = Searcher(index_dir, prepared=True)
    assert len(reads) == 2 and reads[0] != reads[1] and searcher.count == 201
    assert searcher.search("penguins", 1, mode=SearchMode.lexical)[0].external_id == "m1"
    searcher.close()

    damaged = index_dir / reads[1]
    damaged.write_bytes(damaged.read_bytes()[:-1])
    with pytest.raises(IndexDirectoryError, match="lexical"):
        Searcher(index_dir, prepared=True)
