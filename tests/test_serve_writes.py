"""Writes through the server against searches, index runs and other server processes: a search
answers from one committed state (old or new, never half) while writes go on; a server opens a
commit (also one made by `askalike index` or by another server) as soon as it sees it, on a
thread below its searches' priority, and a read of one question opens it first."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from helpers import collection, index, write_jsonl
from serving import WRITE, eventually, listening, serving

from askalike.core.loader import load_encoder
from askalike.core.priority import BACKGROUND_NICENESS
from askalike.core.text import join_subject_body
from askalike.indexer.manifest import read_manifest
from askalike.indexer.upsert import upsert_questions, validated_questions
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.live import LiveSearcher, manifest_state

QUERY = "how do i find a good visa this weekend"
TEXTS = [("visa office hours", "when does the visa office open this weekend?"),
         ("good visa agent", "how do i find a good visa agent this weekend in doha?")]


def switched(manifest: Path, content: bytes) -> None:
    """A new state, as a commit makes it: the manifest replaced by a rename (a file rewritten in
    place could be seen by the follower half written, as a state of its own)."""
    temporary = manifest.with_name(manifest.name + ".new")
    temporary.write_bytes(content)
    os.replace(temporary, manifest)


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


def test_a_cli_index_run_is_opened_by_the_server_unasked_and_read_at_once(built, tmp_path, tiny_model):
    """The follower opens a commit that no request of this server made, without a request; a
    read of one question (or a write) opens it first where it is not open yet."""
    index_dir = built[0]
    with serving(index_dir, tmp_path) as client:
        assert client.get("/ready").json()["questions"] == 200
        more = write_jsonl(tmp_path / "more.jsonl", [{"id": "m1", "subject": "penguin colonies",
                                                      "body": "where do penguins nest?"}])
        index(more, index_dir, tiny_model)
        live = client.app.state.loaded.live
        assert eventually(lambda: live.opened_state == manifest_state(index_dir))  # no request made
        assert client.get("/ready").json()["questions"] == 201
        hits = client.get("/search", params={"q": "penguin colonies where do penguins nest", "k": 1,
                                             "mode": "dense"}).json()["results"]
        assert [(hit["id"], hit["source"].rsplit("/", 1)[-1]) for hit in hits] == [("m1", "more.jsonl")]
        write_jsonl(more, [{"id": "m2", "subject": "penguin food", "body": "what do penguins eat?"}])
        index(more, index_dir, tiny_model)
        read = client.get("/questions/m2", params={"source": "more.jsonl"})  # opens the new state first
        assert read.json()["subject"] == "penguin food"


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
                         "searches go on from the state before; the failure is logged once and the "
                         "new state tried again until it opens")
def test_a_state_that_cannot_be_opened_leaves_the_one_before_answering(built, caplog):
    from askalike.retrieval.live import LiveSearcher
    from askalike.retrieval.searcher import Searcher

    index_dir = built[0]
    opened: list[object] = []
    damaged = threading.Event()

    def open_searcher(encoder):
        opened.append(encoder)
        if damaged.is_set():
            raise OSError("damaged FAISS file")
        return Searcher(index_dir, encoder=encoder)

    live = LiveSearcher(index_dir, open_searcher)
    with live.searching() as first:
        pass
    damaged.set()
    manifest = index_dir / "manifest.json"
    switched(manifest, manifest.read_bytes() + b"\n")  # a new state, as a commit makes
    for _ in range(3):
        with live.searching() as searcher:
            assert searcher is first and searcher.search("visa", 3)
    assert eventually(lambda: len(opened) >= 3)  # tried again, not only once
    assert caplog.text.count("cannot open the index's new state") == 1
    damaged.clear()  # repaired: the next try opens it

    def new_state() -> bool:
        with live.searching() as searcher:
            return searcher is not first

    assert eventually(new_state)
    live.close()


def _recording_openers(index_dir: Path) -> tuple[LiveSearcher, list[str]]:
    """A LiveSearcher of ``index_dir`` and the names of the threads that opened its states."""
    from askalike.retrieval.live import LiveSearcher
    from askalike.retrieval.searcher import Searcher

    opened_on: list[str] = []

    def open_searcher(encoder):
        opened_on.append(threading.current_thread().name)
        return Searcher(index_dir, encoder=encoder)

    return LiveSearcher(index_dir, open_searcher), opened_on


def test_searches_during_a_write_in_this_process_answer_from_the_state_before(built):
    """The writer opens its new state; a search meanwhile never opens it (and so never waits for
    files still being written): it answers at once from the state before. A write that fails
    after its commit still opens what it committed."""
    index_dir = built[0]
    live, opened = _recording_openers(index_dir)

    def search() -> object:
        with live.searching() as searcher:
            assert searcher.search("visa", 3)
            return searcher

    first = search()
    manifest = index_dir / "manifest.json"
    with live.committing(), ThreadPoolExecutor(1, thread_name_prefix="search") as searches:
        switched(manifest, manifest.read_bytes() + b"\n")  # the write's new state
        assert live.ready_now()
        assert searches.submit(search).result() is first
    assert opened == ["MainThread", "MainThread"]
    second = search()
    assert second is not first and len(opened) == 2
    with pytest.raises(RuntimeError, match="after the commit"), live.committing():
        switched(manifest, manifest.read_bytes() + b"\n")
        raise RuntimeError("failed after the commit")
    assert len(opened) == 3 and search() is not second
    live.close()


@pytest.fixture
def unpolled(monkeypatch):
    """The follower opens a state only when a search wakes it: a test that opens each state
    itself (``refresh``) counts every state opened."""
    monkeypatch.setattr("askalike.retrieval.live.FOLLOW_POLL_S", 3600.0)


def _priority() -> int:
    """The calling thread's niceness (Linux: each thread has its own)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def test_searches_answer_at_once_while_the_follower_opens_a_new_state(built):
    """A new commit is opened by the follower thread, below the searches' priority; searches
    meanwhile answer from the state before instead of one of them waiting for the opening."""
    from askalike.retrieval.live import LiveSearcher
    from askalike.retrieval.searcher import Searcher

    index_dir = built[0]
    opening, release = threading.Event(), threading.Event()
    opened_on: list[tuple[str, int]] = []

    def open_searcher(encoder):
        opened_on.append((threading.current_thread().name, _priority()))
        if len(opened_on) > 1:
            opening.set()
            assert release.wait(60)
        return Searcher(index_dir, encoder=encoder)

    live = LiveSearcher(index_dir, open_searcher)
    with live.searching() as first:
        pass
    manifest = index_dir / "manifest.json"
    switched(manifest, manifest.read_bytes() + b"\n")  # a new state, as a commit makes
    with live.searching() as searcher:  # wakes the follower, does not wait for it
        assert searcher is first
    assert opening.wait(60)
    with live.searching() as searcher:  # the follower is opening it
        assert searcher is first and searcher.search("visa", 3)
    release.set()

    def new_state() -> bool:
        with live.searching() as searcher:
            return searcher is not first

    assert eventually(new_state)
    live.close()
    (_, process_priority), (follower, follower_priority) = opened_on  # the first opened by the caller
    assert follower == "askalike-state-follower"
    if sys.platform.startswith("linux"):
        assert follower_priority == min(process_priority + BACKGROUND_NICENESS, 19)


def test_a_read_of_the_latest_state_opens_it_first(built, unpolled):
    index_dir = built[0]
    live, opened_on = _recording_openers(index_dir)
    with live.searching() as first:
        pass
    manifest = index_dir / "manifest.json"
    switched(manifest, manifest.read_bytes() + b"\n")
    with live.searching(latest=True) as searcher:
        assert searcher is not first
    live.close()
    assert opened_on == ["MainThread", "MainThread"]  # by the read itself


def test_a_write_runs_below_the_searches_save_the_commit_of_new_text(built, tiny_model):
    """What a server runs on its thread below the searches' priority (``unwaited``): a write's
    embedding, and its commit when it changes no stored text; the commit of new text holds the
    searches (an exclusive guard) and runs at their priority, in the request's thread."""
    index_dir = built[0]
    identity = read_manifest(index_dir).encoder
    model = load_encoder(str(tiny_model))
    guarded: list[tuple[bool, str]] = []
    embedded_on: list[str] = []

    class Encoder:
        def encode(self, texts):
            embedded_on.append(threading.current_thread().name)
            return model.encode(texts)

    @contextmanager
    def guard(changes_text: bool) -> Iterator[None]:
        guarded.append((changes_text, threading.current_thread().name))
        yield

    with ThreadPoolExecutor(1, thread_name_prefix="below") as below:
        for subject, body in (("penguin colonies", "nests?"), ("penguin colonies", "what do they eat?")):
            questions, _ = validated_questions([{"id": "n1", "subject": subject, "body": body}])
            upsert_questions(index_dir, questions, Encoder(), identity, commit_guard=guard,
                             unwaited=lambda part: below.submit(part).result())
    assert embedded_on == ["below_0", "below_0"]
    assert guarded == [(False, "below_0"), (True, "MainThread")]  # added; text changed


def test_a_replaced_searcher_is_closed_on_a_thread_of_its_own_once_its_last_search_ends(tmp_path, unpolled):
    """Freeing a replaced state's files and arrays takes milliseconds: not in a search's thread,
    where every request queued behind that search would wait for it."""
    from askalike.retrieval.live import LiveSearcher

    closed: list[tuple[int, str]] = []

    class State:
        encoder = None

        def close(self) -> None:
            closed.append((id(self), threading.current_thread().name))

    manifest = tmp_path / "manifest.json"
    switched(manifest, b"{}")
    live = LiveSearcher(tmp_path, lambda encoder: State())
    with live.searching() as first:
        switched(manifest, b"{} ")  # a new state, opened while a search still uses the first
        live.refresh(wait=True)
        with live.searching() as second:
            assert second is not first
        assert closed == []
    switched(manifest, b"{}  ")
    live.refresh(wait=True)  # replaces the second, which no search uses
    live.close()
    closed_on = dict(closed)
    assert len(closed) == len(closed_on) == 3  # each state closed once
    assert closed_on.pop(id(first)) == closed_on.pop(id(second)) == "askalike-retired-searchers"
    assert list(closed_on.values()) == ["MainThread"]  # the current one, by close()


def test_a_replaced_state_that_cannot_be_closed_leaves_the_next_ones_closed(tmp_path, caplog, unpolled):
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
    switched(manifest, b"{}")
    live = LiveSearcher(tmp_path, lambda encoder: State())
    for spaces in range(1, 4):
        switched(manifest, b"{}" + b" " * spaces)  # a new state: the one before is retired
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

    index_dir, source = built
    read_lexical = askalike.indexer.directory.load_lexical
    reads: list[str] = []
    # a run that changes a stored text (one that only adds leaves the files before in place)
    changed = [{**question, "body": "penguins"} if question["id"] == "q0" else question
               for question in collection(200)]

    def caught_mid_write(directory, manifest):
        reads.append(manifest.lexical_file)
        if len(reads) == 1:  # an index run commits between the manifest's read and its files'
            index(write_jsonl(source, [*changed, {"id": "m1", "subject": "penguins"}]), index_dir, tiny_model)
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


def test_a_delete_holds_its_commit_guard_only_once_it_holds_the_index_lock(built):
    """A server's delete that waits for an index run's lock does not hold the searcher's commit
    guard meanwhile (reads of the newest state would wait for it)."""
    from askalike.indexer.layout import index_lock
    from askalike.indexer.upsert import delete_question

    index_dir = built[0]
    entered = threading.Event()

    @contextmanager
    def guard() -> Iterator[None]:
        entered.set()
        yield

    with ThreadPoolExecutor(1) as deleting:
        with index_lock(index_dir):  # an index run's
            deleted = deleting.submit(delete_question, index_dir, "q1", None, None, 60, guard)
            time.sleep(0.2)  # the delete tries the lock meanwhile (LOCK_POLL_S): no guard yet
            assert not entered.is_set() and not deleted.done()
        assert deleted.result() == 1 and entered.is_set()
