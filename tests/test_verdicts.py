"""Verdicts on two questions (the same question, or not): given through ``POST /verdicts`` (the
search page's "same question" and "different"), kept in the index's database, and listed or
written as labelled pairs for ``askalike tune`` by ``askalike verdicts``."""

from __future__ import annotations

import json

import pytest
from helpers import assert_one_line_error, collection, invoke
from serving import WRITE, WRONG, assert_answered_as_documented, serving
from test_cli import assert_documented

from askalike.core.pair_files import LabelledPair, read_labelled_pairs
from askalike.core.text import join_subject_body
from askalike.indexer.directory import recorded_verdicts

SOURCE = "questions.jsonl"  # the built index's source, by its name


def _verdict(first: str, second: str, same: bool) -> dict:
    return {"first": {"id": first, "source": SOURCE}, "second": {"id": second}, "same": same}


def _text(external_id: str) -> str:
    record = collection(200)[int(external_id[1:])]
    return join_subject_body(record["subject"], record["body"])


@pytest.fixture
def client(built, tmp_path):
    with serving(built[0], tmp_path / "keys") as client:
        yield client


def test_a_verdict_is_stored_with_the_texts_judged_and_answered_as_documented(client, built):
    answer = client.post("/verdicts", json=_verdict("q1", "q7", True), headers=WRITE)
    assert answer.status_code == 200, answer.text
    assert_answered_as_documented(client, answer, "/verdicts", "post")
    assert {key: answer.json()[key] for key in ("first", "second", "same")} == {
        "first": {"id": "q1", "source": SOURCE}, "second": {"id": "q7", "source": SOURCE}, "same": True}
    (stored,) = recorded_verdicts(built[0])
    assert (stored.first.external_id, stored.first.text, stored.second.text, stored.same) == (
        "q1", _text("q1"), _text("q7"), True)


@pytest.mark.parametrize(("body", "message"), [
    ({**_verdict("q1", "q2", True), "same": "yes"}, "same: Input should be a valid boolean"),
    ({**_verdict("q1", "q2", True), "same": 1}, "same: Input should be a valid boolean"),
    ({"first": {"id": "q1"}, "same": True}, "second: Field required"),
    ({**_verdict("q1", "q2", True), "who": "me"}, "who: Extra inputs are not permitted"),
    ({**_verdict("q1", "q2", True), "first": {"id": "q1", "src": SOURCE}},
     "first.src: Extra inputs are not permitted"),
    ({**_verdict("q1", "q2", True), "first": {"id": ""}},
     "first.id: String should have at least 1 character"),
    (_verdict("q1", "nope", False), "second: no question with id 'nope'"),
    ({**_verdict("q1", "q2", True), "first": {"id": "q1", "source": "other.csv"}},
     "first: no question with id 'q1' in index from other.csv"),
    (_verdict("q1", "q1", False), "first and second are the same stored question"),
])
def test_a_bad_verdict_is_refused_422_in_one_line_and_the_stored_ones_stay(client, built, body, message):
    assert client.post("/verdicts", json=_verdict("q1", "q7", True), headers=WRITE).status_code == 200
    refused = client.post("/verdicts", json=body, headers=WRITE)
    assert refused.status_code == 422 and set(refused.json()) == {"error"}
    assert message in refused.json()["error"]
    stored = recorded_verdicts(built[0])
    assert [(v.first.external_id, v.second.external_id) for v in stored] == [("q1", "q7")]


def test_a_verdict_needs_a_write_key_and_takes_no_parameters(client, built):
    body = _verdict("q1", "q7", True)
    assert client.post("/verdicts", json=body).status_code == 401
    assert client.post("/verdicts", json=body, headers=WRONG).status_code == 401
    unknown = client.post("/verdicts", params={"source": SOURCE}, json=body, headers=WRITE)
    assert unknown.status_code == 422 and "unknown parameter source" in unknown.json()["error"]
    assert recorded_verdicts(built[0]) == []


def test_the_latest_verdict_on_a_pair_counts_whichever_question_came_first(client, built):
    for first, second, same in (("q1", "q7", True), ("q2", "q3", True), ("q7", "q1", False)):
        assert client.post("/verdicts", json=_verdict(first, second, same), headers=WRITE).status_code == 200
    assert [(v.first.external_id, v.second.external_id, v.same) for v in recorded_verdicts(built[0])] == [
        ("q2", "q3", True), ("q7", "q1", False)]


def test_verdicts_are_listed_and_written_as_the_pairs_tune_reads(client, built, tmp_path):
    for first, second, same in (("q1", "q7", True), ("q2", "q3", False)):
        assert client.post("/verdicts", json=_verdict(first, second, same), headers=WRITE).status_code == 200
    listed = invoke("verdicts", "--index", built[0], env={"COLUMNS": "200"})
    assert listed.exit_code == 0, listed.output
    assert "q7 (questions.jsonl)" in listed.stdout and "different" in listed.stdout
    assert "2 pairs judged: 1 the same question, 1 different" in listed.stdout
    printed = invoke("verdicts", "--index", built[0], "--json")
    lines = [json.loads(line) for line in printed.stdout.splitlines()]
    assert [(line["first"]["id"], line["same"]) for line in lines] == [("q1", True), ("q2", False)]
    for line in lines:
        assert_documented(line, "verdicts --json line")
    out = tmp_path / "pairs.jsonl"
    written = invoke("verdicts", "--index", built[0], "--out", out)
    assert written.exit_code == 0 and written.stdout == "" and f"written to {out}" in written.stderr
    assert read_labelled_pairs(out) == [LabelledPair(_text("q1"), _text("q7"), 1),
                                        LabelledPair(_text("q2"), _text("q3"), 0)]


def test_a_pairs_file_must_be_json_lines(built, tmp_path):
    assert_one_line_error(invoke("verdicts", "--index", built[0], "--out", tmp_path / "pairs.csv"),
                          r"--out .*pairs\.csv: give a \.jsonl file")
    assert not (tmp_path / "pairs.csv").exists()


def test_an_index_without_verdicts_says_how_they_are_given(built):
    listed = invoke("verdicts", "--index", built[0])
    assert listed.exit_code == 0 and "no verdicts yet" in listed.stdout
