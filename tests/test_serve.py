"""``askalike serve``: every endpoint, the keys, the limits and the errors (a TestClient over the
application; the tiny model keeps it fast)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time

import pytest
from helpers import collection, documented_schema, index, write_jsonl
from serving import KEY, WRITE, WRONG, assert_answered_as_documented, serving

from askalike.app.commands.serve import UVICORN_OPTIONS
from askalike.app.server.security import KeyChecker, public_message
from askalike.app.server.settings import Limits, ServerConfigError, ServerSettings, api_keys
from askalike.indexer.layout import index_lock
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.results import Shown, search_payload
from askalike.retrieval.searcher import Searcher, SearchFilters

JSON = {"content-type": "application/json"}
NEW = {"id": "new-1", "subject": "zebra crossing rules", "body": "who may cross first at a zebra crossing?",
       "category": "traffic"}


@pytest.fixture(scope="module")
def shared_index(tmp_path_factory, tiny_model):
    """An index of 200 questions that the read-only tests share."""
    directory = tmp_path_factory.mktemp("shared")
    index(write_jsonl(directory / "questions.jsonl", collection(200)), directory / "index", tiny_model)
    return directory / "index"


@pytest.fixture(scope="module")
def reader(shared_index, tmp_path_factory):
    with serving(shared_index, tmp_path_factory.mktemp("keys")) as client:
        yield client


@pytest.fixture
def client(built, tmp_path):
    with serving(built[0], tmp_path) as served:
        yield served


def _payloads(index_dir, queries, k=5, mode=None, filters=None, shown=None):
    """What the library (and so `search --json`) answers for ``queries``, sources by name."""
    shown = shown or Shown(k)
    with Searcher(index_dir) as searcher:
        hits = searcher.search_many(queries, shown.depth, filters, mode)
        return [search_payload(shown.of(searcher, results), mode or searcher.default_mode, query=query,
                               source_label=searcher.source_label)
                for query, results in zip(queries, hits, strict=True)]


def test_get_search_answers_what_search_json_prints(reader, shared_index):
    answer = reader.get("/search", params={"q": "cheap car in doha", "k": 5})
    assert answer.status_code == 200
    assert answer.json() == _payloads(shared_index, ["cheap car in doha"])[0]
    assert answer.json()["count"] == 5 and answer.json()["results"][0]["rank"] == 1


def test_post_search_answers_each_query_as_get_does(reader):
    queries = ["visa renewal", "pizza near the pearl"]
    batch = reader.post("/search", json={"queries": queries, "k": 3, "mode": "lexical"})
    assert batch.status_code == 200
    singles = [reader.get("/search", params={"q": q, "k": 3, "mode": "lexical"}).json() for q in queries]
    assert batch.json() == {"searches": singles}
    assert all(search["mode"] == "lexical" for search in singles)


@pytest.mark.reliability("an API parameter spelt otherwise than the CLI's option (min_match, "
                         "date_format) or unknown", "422 naming it and the spelling taken, never ignored")
def test_parameters_have_one_spelling_and_unknown_ones_are_refused(reader):
    strong = reader.post("/search", json={"queries": ["good school"], "k": 50, "min-match": 0.5}).json()
    assert all(hit["match"] >= 0.5 for hit in strong["searches"][0]["results"])
    other = reader.post("/search", json={"queries": ["good school"], "k": 50, "min_match": 0.5})
    assert other.status_code == 422 and "min_match (spelt min-match" in other.json()["error"]
    misspelt = reader.post("/search", json={"queries": ["good school"], "categroy": ["pizza"]})
    assert misspelt.status_code == 422 and "unknown parameter categroy" in misspelt.json()["error"]
    assert "this endpoint takes queries, k, mode, source, category" in misspelt.json()["error"]  # as GET
    for params, named in (({"q": "school", "min_match": "0.5"}, "min_match (spelt min-match"),
                          ({"q": "school", "date_format": "dmy"}, "date_format (spelt date-format"),
                          ({"q": "school", "categroy": "pizza"}, "unknown parameter categroy")):
        answer = reader.get("/search", params=params)
        assert answer.status_code == 422 and named in answer.json()["error"], answer.text
    assert reader.get("/duplicates", params={"id": "q3", "min_match": "0.5"}).status_code == 422
    assert reader.get("/search", params={"q": "school", "date-format": "dmy"}).status_code == 200


def test_where_filters_the_api_as_the_cli(reader):
    pizza = reader.get("/search", params={"q": "good school", "where": "category=PIZZA", "k": 50}).json()
    assert pizza["results"] and all(hit["metadata"]["category"] == "pizza" for hit in pizza["results"])
    posted = reader.post("/search", json={"queries": ["good school"], "where": ["category=PIZZA"], "k": 50})
    assert posted.json()["searches"][0] == pizza
    none = reader.get("/search", params={"q": "good school", "where": "category=nothing"}).json()
    assert none["count"] == 0 and "category: " in none["why"] and "pizza (" in none["why"]
    bad = reader.get("/search", params={"q": "good school", "where": "pizza"})
    assert bad.status_code == 400 and "where 'pizza': expected KEY=VALUE" in bad.json()["error"]


def test_search_filters_min_match_and_collapse(reader, shared_index):
    filtered = reader.get("/search", params={"q": "good school", "category": "pizza", "k": 10}).json()
    assert filtered["count"] and {hit["metadata"]["category"] for hit in filtered["results"]} == {"pizza"}
    strong = reader.get("/search", params={"q": "good school", "min-match": 0.5, "k": 50}).json()
    assert strong["count"] and all(hit["match"] >= 0.5 for hit in strong["results"])
    params = {"q": "how do i find a good visa", "collapse": "true", "k": 5, "mode": "dense"}
    collapsed = reader.get("/search", params=params).json()
    assert collapsed == _payloads(shared_index, [params["q"]], mode=SearchMode.dense,
                                  shown=Shown(5, collapse=True))[0]
    assert all(hit["duplicate_of"] is None for hit in collapsed["results"])
    dated = reader.get("/search", params={"q": "visa", "since": "2024-01-01"}).json()
    assert dated["count"] == 0  # the collection has no dates: no date filter passes a question
    assert _payloads(shared_index, ["visa"], filters=SearchFilters(date_from="2024-01-01"))[0]["count"] == 0


def test_get_question_by_id(reader):
    question = reader.get("/questions/q3")
    assert question.status_code == 200
    assert question.json() | {"source": ""} == {
        "id": "q3", "source": "", "subject": "how do i find a good visa",
        "body": "how do i find a good visa this weekend, case 3?", "metadata": {"category": "visa"}}
    missing = reader.get("/questions/nope")
    assert missing.status_code == 404 and "nope" in missing.json()["error"]


def test_duplicates_of_a_question_and_of_a_text(reader):
    by_id = reader.get("/duplicates", params={"id": "q3", "min-match": 0.5}).json()
    assert by_id["like"]["id"] == "q3" and by_id["count"]
    assert all(hit["match"] >= 0.5 and hit["id"] != "q3" for hit in by_id["results"])
    text = "how do i find a good visa this weekend, case 3?"
    by_text = reader.get("/duplicates", params={"text": "how do i find a good visa\n" + text[26:]}).json()
    assert by_text["results"][0]["id"] == "q3" and by_text["results"][0]["match"] >= 0.95
    assert reader.get("/duplicates").status_code == 422
    assert reader.get("/duplicates", params={"id": "q3", "text": "x"}).status_code == 422
    assert reader.get("/duplicates", params={"id": "nope"}).status_code == 404


def test_health_ready_and_info(reader, shared_index):
    assert reader.get("/health").json() == {"status": "alive"}
    assert reader.get("/ready").json() == {"ready": True, "questions": 200}
    info = reader.get("/info").json()
    assert info["questions"] == 200 and info["index_type"] == "flat"
    assert str(shared_index.parent) not in json.dumps(info)  # no path of the server's files


def test_page_and_openapi_docs(reader):
    page = reader.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "fetch(" in page.text and "http" not in page.text.replace("https://", "")  # no external asset
    paths = reader.get("/openapi.json").json()["paths"]
    endpoints = {"/search", "/questions", "/questions/{id}", "/duplicates", "/health", "/ready", "/info"}
    assert endpoints <= set(paths)
    assert reader.get("/docs").status_code == 200


def test_openapi_documents_the_search_answer_as_docs_cli_md_does(reader):
    """The search answer is `search --json`'s: its schema names the fields of docs/cli.md's
    "search --json line" and "search hit" (the other answers are documented in docs/api.md only,
    generated from this schema)."""
    spec = reader.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]

    def named(reference: dict) -> dict:
        return schemas[reference["$ref"].rsplit("/", 1)[1]]

    def answer(path: str, method: str) -> dict:
        return named(spec["paths"][path][method]["responses"]["200"]["content"]["application/json"]["schema"])

    search = answer("/search", "get")
    hit = named(search["properties"]["results"]["items"])
    batch = answer("/search", "post")
    assert named(batch["properties"]["searches"]["items"]) == search == answer("/duplicates", "get")
    for schema, title in ((search, "search --json line"), (hit, "search hit")):
        documented = documented_schema(title)
        assert set(schema["properties"]) == set(documented["properties"]), title
        assert set(schema.get("required", ())) == set(documented["required"]), title


def test_a_question_posted_is_found_by_the_next_search(client):
    added = client.post("/questions", json=NEW, headers=WRITE)
    assert added.status_code == 200
    assert added.json() | {"warnings": []} == {"added": 1, "reembedded": 0, "metadata_updated": 0,
                                               "unchanged": 0, "total": 201, "ids": ["new-1"], "warnings": []}
    found = client.get("/search", params={"q": "zebra crossing rules who may cross first", "k": 1,
                                          "mode": "dense"}).json()
    assert [(hit["id"], hit["source"]) for hit in found["results"]] == [("new-1", "api")]
    assert client.get("/questions/new-1").json()["metadata"] == {"category": "traffic"}
    again = client.post("/questions", json=[NEW], headers=WRITE).json()
    assert (again["added"], again["unchanged"], again["total"]) == (0, 1, 201)  # an upsert: no double


def test_put_replaces_a_question_and_delete_removes_it(client):
    client.post("/questions", json=NEW, headers=WRITE)
    penguins = {"subject": "penguin colonies", "body": "where do penguins nest?"}
    edited = client.put("/questions/new-1", json=penguins, headers=WRITE)
    assert (edited.json()["reembedded"], edited.json()["total"]) == (1, 201)
    hits = client.get("/search", params={"q": "penguin colonies where do penguins nest", "k": 1,
                                         "mode": "dense"}).json()["results"]
    assert (hits[0]["id"], hits[0]["subject"]) == ("new-1", "penguin colonies")
    metadata = client.put("/questions/new-1", json={**penguins, "category": "birds"}, headers=WRITE).json()
    assert (metadata["metadata_updated"], metadata["reembedded"]) == (1, 0)
    other = client.put("/questions/new-1", json={"id": "other", "subject": "x"}, headers=WRITE)
    assert other.status_code == 422
    assert client.delete("/questions/new-1", headers=WRITE).json() == {"deleted": 1}
    assert client.get("/questions/new-1").status_code == 404
    assert client.get("/ready").json()["questions"] == 200
    assert client.delete("/questions/new-1", headers=WRITE).status_code == 404


@pytest.mark.reliability("a POST /questions whose second question has no id", "refused (400) naming "
                         "`questions:2`; none of the request's questions is stored")
def test_a_bad_question_stores_none_of_the_request(client):
    answer = client.post("/questions", json=[NEW, {"subject": "no id here"}], headers=WRITE)
    assert answer.status_code == 400
    assert answer.json() == {"error": "questions:2: missing or empty 'id'"}
    assert client.get("/questions/new-1").status_code == 404
    assert client.get("/ready").json()["questions"] == 200
    for bad, problem in [([NEW, NEW], "duplicate id 'new-1'"), (["text"], "expected a JSON object"),
                         ([{"id": "x", "subject": 3}], "'subject' is a number"),
                         ([{"id": "x", "body": ""}], "is empty")]:
        refused = client.post("/questions", json=bad, headers=WRITE)
        assert refused.status_code == 400 and problem in refused.json()["error"], refused.json()


WRITES = [("post", "/questions", NEW), ("put", "/questions/new-1", NEW), ("delete", "/questions/q1", None)]


@pytest.mark.reliability("a write (POST, PUT, DELETE /questions) without an API key, or with a wrong one",
                         "refused (401, one line naming the Authorization header); nothing is stored")
@pytest.mark.parametrize(("method", "path", "body"), WRITES)
def test_writes_need_the_right_key(client, method, path, body):
    send = getattr(client, method)
    options = {} if body is None else {"json": body}
    for headers in ({}, WRONG, {"Authorization": KEY}, {"Authorization": "Bearer "}):
        refused = send(path, headers=headers, **options)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer", refused.json()
        assert KEY not in refused.text
    if body is not None:  # the key first, then what the body is
        as_text = send(path, content=json.dumps(body), headers={"content-type": "text/plain"})
        assert as_text.status_code == 401, as_text.json()
    assert client.get("/ready").json()["questions"] == 200
    assert send(path, headers=WRITE, **options).status_code == 200


@pytest.mark.reliability("a search or read without an API key where the server is started with "
                         "--read-needs-key", "refused (401); the right key reads")
def test_reads_need_a_key_when_told(built, tmp_path):
    with serving(built[0], tmp_path, read_needs_key=True) as client:
        for path in ("/search?q=visa", "/questions/q1", "/duplicates?id=q1", "/info"):
            assert client.get(path).status_code == 401
            assert client.get(path, headers=WRONG).status_code == 401
            assert client.get(path, headers=WRITE).status_code == 200
        assert client.post("/search", json={"queries": ["visa"]}).status_code == 401
        assert client.post("/search", json={"queries": ["visa"]}, headers=WRONG).status_code == 401
        assert client.post("/search", json={"queries": ["visa"]}, headers=WRITE).status_code == 200
        assert client.get("/health").status_code == client.get("/ready").status_code == 200


def test_a_worker_of_several_has_its_index_loaded_before_it_takes_a_request(built, monkeypatch):
    """serve --workers N: the workers share one socket and uvicorn accepts once the lifespan has
    started, so that no request reaches a worker still loading (a lone worker loads in the
    background and says so on /ready). The load is slowed so that a background one would
    still be running at the first request."""
    from fastapi.testclient import TestClient

    from askalike.app.server.api import ServedIndex, create_app

    load = ServedIndex.load
    monkeypatch.setattr(ServedIndex, "load", lambda self: (time.sleep(2), load(self)))
    with TestClient(create_app(ServerSettings(str(built[0]), load_before_accepting=True))) as client:
        ready = client.get("/ready")  # the first request, with no wait before it
        assert ready.status_code == 200 and ready.json()["questions"] == 200


def test_writes_are_off_without_keys(built, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    from askalike.app.server.api import create_app

    monkeypatch.delenv("ASKALIKE_API_KEYS", raising=False)
    with TestClient(create_app(ServerSettings(str(built[0])))) as client:
        refused = client.post("/questions", json=NEW, headers=WRITE)
        assert refused.status_code == 403 and "no API key" in refused.json()["error"]


def test_keys_come_from_the_file_and_the_environment(tmp_path, monkeypatch):
    keys = tmp_path / "keys"
    keys.write_text("# comment\n\nfile-key-0123456789abc\n")
    monkeypatch.setenv("ASKALIKE_API_KEYS", "env-key-0123456789abcd, env-key-2-0123456789abcd")
    found = api_keys(ServerSettings("index", keys_file=str(keys)))
    assert sorted(found) == ["env-key-0123456789abcd", "env-key-2-0123456789abcd", "file-key-0123456789abc"]
    checker = KeyChecker(found)
    assert checker.accepts("file-key-0123456789abc") and not checker.accepts("file-key-0123456789ab")
    assert not checker.accepts("") and not KeyChecker([]).accepts("anything")
    monkeypatch.setenv("ASKALIKE_API_KEYS", "short")
    with pytest.raises(ServerConfigError, match="shorter than 16"):
        api_keys(ServerSettings("index"))


@pytest.mark.reliability("requests over the limits: a body over --max-body-bytes, a query over "
                         "--max-query-chars, k over --max-k, more queries or questions than --max-batch",
                         "refused (413 or 422) with a one-line JSON message naming the limit")
def test_each_limit_is_refused(built, tmp_path):
    limits = Limits(body_bytes=4096, query_chars=50, k=20, batch=3)
    with serving(built[0], tmp_path, limits=limits) as client:
        big = client.post("/questions", content=b"[" + b" " * 5000 + b"]", headers={**WRITE, **JSON})
        assert big.status_code == 413 and "4,096 bytes" in big.json()["error"]
        unsized = client.post("/questions", content=iter([b"[" + b" " * 3000, b" " * 3000 + b"]"]),
                              headers={**WRITE, **JSON})  # sent in chunks, without a length
        assert unsized.status_code == 413 and "4,096 bytes" in unsized.json()["error"]
        long = client.get("/search", params={"q": "x" * 51})
        assert long.status_code == 422
        assert long.json() == {"error": "q: String should have at most 50 characters"}
        assert client.get("/search", params={"q": "visa", "k": 21}).status_code == 422
        assert client.get("/search", params={"q": "visa", "k": 0}).status_code == 422
        assert client.get("/search", params={"q": ""}).status_code == 422
        assert client.get("/duplicates", params={"text": "x" * 51}).status_code == 422
        assert client.post("/search", json={"queries": ["a"] * 4}).status_code == 422
        assert client.post("/search", json={"queries": ["x" * 51]}).status_code == 422
        assert client.post("/search", json={"queries": ["visa"], "k": 21}).status_code == 422
        many = client.post("/questions", json=[{**NEW, "id": f"n{i}"} for i in range(4)], headers=WRITE)
        assert many.status_code == 413 and "at most 3" in many.json()["error"]
        assert client.get("/ready").json()["questions"] == 200


@pytest.mark.reliability("malformed requests (JSON that does not parse, an unknown mode, a date "
                         "that is not one) and an error whose message names a server file",
                         "a JSON object with one line under `error` and a 4xx status: no traceback, "
                         "no file path")
def test_errors_are_one_json_line_without_paths(client, built):
    cases = [client.post("/questions", content=b"{not json", headers={**WRITE, **JSON}),
             client.get("/search", params={"q": "visa", "mode": "psychic"}),
             client.get("/search", params={"q": "visa", "until": "31/31/2024"}),
             client.get("/questions/nope"), client.get("/nowhere")]
    for answer in cases:
        assert 400 <= answer.status_code < 500
        body = answer.json()
        assert list(body) == ["error"] and "\n" not in body["error"] and "Traceback" not in answer.text
        assert str(built[0].parent) not in answer.text
    assert public_message(f"the index at {built[0]} is empty: add") == "the index at index is empty: add"
    assert public_message("postgresql://bob:s3cr3t@db/x failed") == "postgresql://bob:***@db/x failed"


def test_cors_is_off_unless_origins_are_named(built, tmp_path, reader):
    origin = {"Origin": "https://forum.example"}
    assert "access-control-allow-origin" not in reader.get("/search?q=visa", headers=origin).headers
    with serving(built[0], tmp_path, cors_origins=("https://forum.example",)) as client:
        allowed = client.get("/search?q=visa", headers=origin)
        assert allowed.headers["access-control-allow-origin"] == "https://forum.example"
        other = client.get("/search?q=visa", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers


@pytest.mark.reliability("a write while an `askalike index` run holds the index's writer lock",
                         "waits for the lock, then (503, Retry-After) refused in one line; nothing stored")
def test_a_write_waits_for_an_index_run_then_gives_up(built, tmp_path):
    with serving(built[0], tmp_path, limits=Limits(lock_wait_s=0.2)) as client, index_lock(built[0]):
        busy = client.post("/questions", json=NEW, headers=WRITE)
        assert busy.status_code == 503 and busy.headers["retry-after"] == "5"
        assert "is being written by askalike pid" in busy.json()["error"]
        assert client.delete("/questions/q1", headers=WRITE).status_code == 503
        assert client.get("/search", params={"q": "visa"}).status_code == 200  # reads go on
    with serving(built[0], tmp_path) as client:
        assert client.get("/ready").json()["questions"] == 200


@pytest.mark.reliability("`askalike serve` on a directory without an index", "one `error:` line, exit 2, "
                         "before anything listens")
def test_serve_refuses_a_missing_index(tmp_path):
    from helpers import assert_one_line_error, invoke

    assert_one_line_error(invoke("serve", "--index", tmp_path / "none", "--port", "1"), "no index here")


def test_answers_are_as_documented(client):
    from test_cli import assert_documented

    searched = client.get("/search", params={"q": "visa", "k": 3, "collapse": "true"}).json()
    assert_documented(searched, "search --json line")
    for hit in searched["results"]:
        assert_documented(hit, "search hit")
    for path in ("/health", "/ready"):
        assert_answered_as_documented(client, client.get(path), path, "get")
    assert_answered_as_documented(client, client.get("/questions/q1"), "/questions/{id}", "get")
    written = client.post("/questions", json={**NEW, "date": "not a date"}, headers=WRITE)
    assert_answered_as_documented(client, written, "/questions", "post")
    assert written.json()["warnings"] == [
        "questions:1: date 'not a date' is not a date (expected YYYY-MM-DD (or an ISO 8601 date and "
        "time), DD/MM/YYYY or MM/DD/YYYY, 5 Jan 2024, Jan 5, 2024 or 20240105)"]
    assert_answered_as_documented(client, client.get("/questions/nope"), "/questions/{id}", "get")
    assert_answered_as_documented(client, client.delete("/questions/q1", headers=WRITE),
                                  "/questions/{id}", "delete")
    refused = client.get("/search", params={"q": "visa", "k": 0})
    assert_answered_as_documented(client, refused, "/search", "get")


def _server_side(client: socket.socket) -> socket.socket:
    """The socket of this process at the other end of ``client``: the one the server accepted."""
    for fd in map(int, os.listdir("/proc/self/fd")):
        try:
            candidate = socket.socket(fileno=os.dup(fd))
        except OSError:  # not a socket, or the listing's own descriptor, closed since
            continue
        with contextlib.suppress(OSError):  # a socket with no peer
            if candidate.getpeername() == client.getsockname():
                return candidate
        candidate.close()
    raise AssertionError("no accepted socket")


async def _hello(scope, receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="finds the accepted socket in /proc (Linux)")
@pytest.mark.parametrize(("http", "nodelay"), [("auto", 0), (UVICORN_OPTIONS["http"], 1)])
def test_connections_accepted_from_the_socket_of_several_workers_have_tcp_nodelay(http, nodelay):
    """serve --workers N: uvicorn binds a socket of protocol 0, on whose connections asyncio
    leaves Nagle's algorithm on (uvicorn's own protocol, "auto"); responses of a kept-alive
    connection then waited about 40 ms for the client's delayed ACK. serve's protocol sets
    TCP_NODELAY on each connection (issue 55)."""
    import uvicorn

    config = uvicorn.Config(_hello, host="127.0.0.1", port=0, lifespan="off",
                            **{**UVICORN_OPTIONS, "http": http})
    listening = config.bind_socket()  # as uvicorn.run binds for several workers
    listening.listen()  # the client's connection waits in the backlog until the server runs
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        with socket.create_connection(listening.getsockname()) as client:
            client.sendall(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            assert client.recv(1024).startswith(b"HTTP/1.1 200")  # accepted, and answered
            with _server_side(client) as accepted:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == nodelay
    finally:
        server.should_exit = True
        thread.join(10)
