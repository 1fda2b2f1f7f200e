"""`askalike serve` as an adversarial client would try it: what a write leaves for later index
runs, the key file, what a client without a key learns, ids holding a "/", and every bad input
of a request answered 4xx in one clear line, the way the CLI answers it."""

from __future__ import annotations

import csv
import json
import re

import pytest
from helpers import collection, index, invoke, write_jsonl
from serving import KEY, WRITE, serving

from askalike.app.server.settings import ServerConfigError, ServerSettings, api_keys
from askalike.indexer.directory import check_index
from askalike.indexer.store import Store

JSON = {"content-type": "application/json"}
FORM = {**WRITE, "content-type": "application/x-www-form-urlencoded"}  # curl -d's type
FORM_REFUSED = (r"^the body is not JSON \(Content-Type: application/x-www-form-urlencoded\): send it with "
                r"Content-Type: application/json$")


def _csv(path, rows):
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["id", "subject", "body"])
        writer.writeheader()
        writer.writerows({key: row[key] for key in ("id", "subject", "body")} for row in rows)
    return path


def _sources(index_dir) -> dict[str, int]:
    with Store(f"sqlite:///{index_dir / 'askalike.sqlite3'}", read_only=True) as store:
        return store.counts_by_source()


@pytest.mark.reliability("`index c.csv`, then `serve` and `POST /questions` (the API's source, no "
                         "file), then `index new.csv`, `index c.csv --prune` and `--dry-run --prune`",
                         "every file run goes on (the API's source is no file to read); --prune "
                         "removes no question written through the API, nor says it would")
def test_file_runs_leave_the_api_source_alone(tmp_path, tiny_model):
    index_dir = tmp_path / "index"
    first = _csv(tmp_path / "c.csv", collection(6))
    index(first, index_dir, tiny_model)
    with serving(index_dir, tmp_path / "keys") as client:
        written = client.post("/questions", json=[{"id": "api-1", "subject": "renew a visa online"},
                                                  {"id": "api-2", "subject": "driving licence exam"}],
                              headers=WRITE)
        assert written.status_code == 200, written.text
    index(_csv(tmp_path / "new.csv", collection(10)[6:]), index_dir, tiny_model)
    plan = index(first, index_dir, tiny_model, "--prune", "--dry-run")
    assert not any(line.startswith("api:") for line in plan["would_remove"]) and plan["removed"] == 4
    pruned = index(first, index_dir, tiny_model, "--prune", "--yes")
    assert pruned["removed"] == 4  # new.csv's, none of the API's
    assert _sources(index_dir) == {"api": 2, str(first.resolve()): 6}
    assert check_index(index_dir).ok


@pytest.mark.reliability("a key file with an indented `# rotate these keys...` comment, a key with a "
                         "space in it, and a key holding a non-ASCII character",
                         "`serve` refuses to start naming the line (never its text); a comment that "
                         "starts its line is a comment")
@pytest.mark.parametrize("line", ["  # rotate these keys every quarter", "two words-0123456789abcdef",
                                  "clé-0123456789abcdefghij"])
def test_a_key_file_is_read_strictly(tmp_path, line):
    keys = tmp_path / "keys.txt"
    keys.write_text(f"# the keys\n{KEY}\n\n{line}\n")
    with pytest.raises(ServerConfigError, match=r"keys\.txt:4: ") as refused:
        api_keys(ServerSettings("index", keys_file=str(keys)))
    assert line.strip() not in str(refused.value)
    keys.write_text(f"# the keys\n{KEY}\n\n")
    assert api_keys(ServerSettings("index", keys_file=str(keys))) == [KEY]


@pytest.mark.reliability("a client without a key: search hits, a question, `/info`, `/ready` (with "
                         "and without --read-needs-key), `/docs` and `/openapi.json`",
                         "sources by name (`questions.jsonl`), never the server's paths; with "
                         "--read-needs-key `/ready` says ready and no count; the API's description "
                         "holds no path or data")
def test_a_client_learns_no_path_of_the_server(built, tmp_path):
    index_dir, source = built
    with serving(index_dir, tmp_path / "open") as client:
        answers = [client.get("/search", params={"q": "visa renewal", "k": 3}),
                   client.get("/questions/q1"), client.get("/info"),
                   client.get("/duplicates", params={"id": "q1", "min-match": "10%"}),
                   client.get("/openapi.json"), client.get("/docs")]
        assert all(answer.status_code == 200 for answer in answers), [a.text for a in answers]
        assert {hit["source"] for hit in answers[0].json()["results"]} == {"questions.jsonl"}
        assert answers[1].json()["source"] == "questions.jsonl"
        assert answers[2].json()["sources"] == {"questions.jsonl": 200}
        assert answers[3].json()["like"]["source"] == "questions.jsonl"
        for answer in answers:
            assert str(source.parent) not in answer.text and str(tmp_path) not in answer.text
        assert client.get("/ready").json() == {"ready": True, "questions": 200}
    with serving(index_dir, tmp_path / "closed", read_needs_key=True) as client:
        assert client.get("/ready").json() == {"ready": True}
        assert client.get("/search", params={"q": "visa"}).status_code == 401
        assert client.get("/openapi.json").status_code == 200


@pytest.mark.reliability("an id holding `/` (`a/b`), written by `POST /questions`, then `GET`, "
                         "`PUT` and `DELETE /questions/a%2Fb` (and unencoded `/questions/a/b`)",
                         "accepted everywhere: each finds that question, as `index`, `show` and "
                         "`delete` do")
def test_an_id_with_a_slash_works_everywhere(built, tmp_path):
    with serving(built[0], tmp_path) as client:
        assert client.post("/questions", json={"id": "a/b", "subject": "slash in an id"},
                           headers=WRITE).status_code == 200
        assert client.get("/questions/a%2Fb").json()["subject"] == "slash in an id"
        assert client.get("/questions/a/b").json()["id"] == "a/b"
        put = client.put("/questions/a%2Fb", json={"subject": "slash in an id, edited"}, headers=WRITE)
        assert put.status_code == 200 and put.json()["reembedded"] == 1, put.text
        assert client.delete("/questions/a%2Fb", headers=WRITE).json() == {"deleted": 1}
        assert client.get("/questions/a%2Fb").status_code == 404
    assert invoke("show", "a/b", "--index", built[0]).exit_code == 2  # deleted: gone for the CLI too


@pytest.mark.reliability("`POST /questions` with a key written twice (`{{\"id\": \"x\", \"id\": \"y\"}}`) "
                         "and with a lone surrogate (`\\ud800`); the same rows in a JSON Lines file",
                         "400 naming the key (or the string), as `index` refuses the file's row; "
                         "nothing stored; never a 500")
@pytest.mark.parametrize("row", ['{"id": "x", "subject": "a", "id": "y"}',
                                 '{"id": "s", "subject": "half \\ud800 a pair"}'])
def test_api_writes_are_validated_as_file_rows(built, tmp_path, row):
    index_dir = built[0]
    row_file = tmp_path / "row.jsonl"
    row_file.write_text(row + "\n")
    file_error = invoke("index", row_file, "--index", index_dir).stderr.strip()
    assert file_error.startswith(f"error: {row_file}:1: ")
    with serving(index_dir, tmp_path / "keys") as client:
        answer = client.post("/questions", content=row.encode(), headers={**WRITE, **JSON})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "the request body: " + file_error.split(":1: ", 1)[1]
        assert client.get("/ready").json()["questions"] == 200


@pytest.mark.reliability("bad input to the HTTP API: {case}", "{behaviour}")
@pytest.mark.parametrize(("case", "request_args", "status", "message", "behaviour"), [
    ("malformed JSON (`{\"queries\": [\"a\"]`)",
     ("post", "/search", {"content": b'{"queries": ["a"]', "headers": JSON}), 400,
     r"^the request body: invalid JSON: Expecting ',' delimiter \(column 18\)$",
     "400 saying what and where, not `6: JSON decode error`"),
    ("an ambiguous date (`since=10/01/2024`)",
     ("get", "/search", {"params": {"q": "visa", "since": "10/01/2024"}}), 400,
     r"give date-format dmy or mdy", "400 naming the parameter `date-format`, spelt as the CLI's option"),
    ("`min-match=50` (percent without %)", ("get", "/search", {"params": {"q": "visa", "min-match": "50"}}),
     422, r"min-match '50': a number without % is a fraction from 0 to 1; for 50 percent write 50%",
     "422 as the CLI refuses it"),
    ("`k=true`", ("get", "/search", {"params": {"q": "visa", "k": "true"}}), 422,
     r"^k: 'true' is not a whole number", "422, not k=1"),
    ("`k=1_0`", ("get", "/search", {"params": {"q": "visa", "k": "1_0"}}), 422,
     r"^k: '1_0' is not a whole number", "422, not k=10"),
    ("`{\"k\": true}` in `POST /search`",
     ("post", "/search", {"json": {"queries": ["visa"], "k": True}}), 422,
     r"^k: true is not a whole number", "422, not k=1"),
    ("invalid UTF-8 in `q` (`%FF`)", ("get", "/search?q=caf%FF", {}), 400,
     r"^parameter q is not valid UTF-8", "400, not U+FFFD searched for"),
    ("a NUL in `q` (`%00`)", ("get", "/search?q=a%00b", {}), 400, r"^parameter q holds a NUL character",
     "400, as the CLI refuses it"),
    ("a NUL in a query of `POST /search`", ("post", "/search", {"json": {"queries": ["a\u0000b"]}}), 400,
     r"query 1 holds a NUL character", "400"),
    ("questions posted as a form (curl's default `-d` type)",
     ("post", "/questions", {"content": b'{"id": "x7", "subject": "s"}', "headers": FORM}),
     400, FORM_REFUSED, "400 naming the content type to send, not `expected a JSON object, got bytes`"),
    ("a question put as a form", ("put", "/questions/x7", {"content": b'{"subject": "s"}', "headers": FORM}),
     400, FORM_REFUSED, "400, not 422 `Input should be a valid dictionary`"),
    ("a search posted as a form", ("post", "/search", {"content": b'{"queries": ["visa"]}', "headers": FORM}),
     400, FORM_REFUSED, "400, not 422 `Input should be a valid dictionary`"),
    ("a verdict posted as plain text",
     ("post", "/verdicts", {"content": b'{"first": "a", "second": "b", "same": true}',
                            "headers": {**WRITE, "content-type": "text/plain"}}),
     400, r"^the body is not JSON \(Content-Type: text/plain\): send it with Content-Type: application/json$",
     "400, not 422"),
])
def test_bad_requests_are_one_clear_line(reader_client, case, request_args, status, message, behaviour):
    method, url, options = request_args
    answer = getattr(reader_client, method)(url, **options)
    assert answer.status_code == status, answer.text
    assert re.search(message, answer.json()["error"]), answer.json()


def test_min_match_reads_percentages_in_the_api(reader_client):
    percent = reader_client.get("/search", params={"q": "visa", "min-match": "50%", "k": 50}).json()
    fraction = reader_client.post("/search", json={"queries": ["visa"], "min-match": 0.5, "k": 50}).json()
    assert percent == fraction["searches"][0]
    assert all(hit["match"] >= 0.5 for hit in percent["results"])
    whole = reader_client.get("/search", params={"q": "visa", "min-match": "1"}).json()
    assert all(hit["match"] >= 1.0 for hit in whole["results"])


@pytest.fixture(scope="module")
def reader_client(tmp_path_factory, tiny_model):
    directory = tmp_path_factory.mktemp("api-input")
    index(write_jsonl(directory / "q.jsonl", collection(40)), directory / "index", tiny_model)
    with serving(directory / "index", directory / "keys") as client:
        yield client


@pytest.mark.reliability("C1 controls (`\\u009b`), DEL and bidi overrides (`\\u202e`) in a stored "
                         "subject, answered by `GET /search` and `GET /questions/{{id}}`",
                         "escaped in the JSON (`\\u009b`) as `search --json` prints them; the text "
                         "decodes unchanged")
def test_controls_come_back_escaped_in_json(built, tmp_path):
    subject = "visa \u009b31m renewal \u202eevil\x7f"
    with serving(built[0], tmp_path) as client:
        client.post("/questions", json={"id": "c1", "subject": subject}, headers=WRITE)
        for answer in (client.get("/questions/c1"), client.get("/search", params={"q": "visa renewal"})):
            raw = answer.content.decode("utf-8")
            assert "\u009b" not in raw and "\u202e" not in raw and "\x7f" not in raw
            assert "\\u009b" in raw and "\\u202e" in raw
        assert client.get("/questions/c1").json()["subject"] == subject
        assert json.loads(client.get("/questions/c1").content)["subject"] == subject


@pytest.mark.reliability("`askalike serve --port P` where another server listens on P",
                         "exit 2, one line: cannot listen on 127.0.0.1:P; it never says it serves there")
def test_serve_on_a_port_in_use_says_so_first(built):
    import socket

    from helpers import assert_one_line_error

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = invoke("serve", "--index", built[0], "--port", str(port))
    assert_one_line_error(result, rf"cannot listen on 127\.0\.0\.1:{port} \(Address already in use\)")
    assert "serving" not in result.output


def test_an_id_in_two_sources_names_the_parameter_that_picks_one(built, tmp_path):
    with serving(built[0], tmp_path) as client:
        added = client.put("/questions/q1", json={"subject": "the api's own q1"}, headers=WRITE).json()
        assert added["added"] == 1 and added["warnings"] == [
            "1 of the ids added to source 'api' are also ids of 'questions.jsonl' (e.g. 'q1'): to "
            "replace those, send the questions with source=questions.jsonl; reads and deletes of these "
            "ids now need source= to pick one"]
        replaced = client.put("/questions/q2", params={"source": "questions.jsonl"}, headers=WRITE,
                              json={"subject": "q2 replaced in its file's source"}).json()
        assert (replaced["added"], replaced["reembedded"], replaced["warnings"]) == (0, 1, [])
        for answer in (client.get("/questions/q1"), client.delete("/questions/q1", headers=WRITE),
                       client.get("/duplicates", params={"id": "q1"})):
            assert answer.status_code == 409  # it exists: a 404 would say there is no such question
            assert answer.json()["error"].endswith("2 sources (questions.jsonl, api): name one with ?source=")
        assert client.get("/questions/q1", params={"source": "api"}).json()["subject"] == "the api's own q1"
