"""``askalike duplicates`` and ``retrieval.collection_duplicates``: near-duplicate groups across a
whole collection, found through the index's nearest neighbours."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import numpy as np
import pytest
from helpers import (
    assert_one_line_error,
    collection,
    imported_by,
    index,
    invoke,
    own_database,
    write_jsonl,
)
from test_cli import assert_documented

from askalike.indexer.directory import open_index
from askalike.retrieval.collection_duplicates import Pair, centred_groups, duplicate_groups
from askalike.retrieval.judgement import SAME_QUESTION, SameQuestionJudge, UncalibratedJudge

EXACT = "99.99%"  # only copies of the same text reach it, whatever the (untrained) model


def _copy(record: dict, new_id: str, date: str) -> dict:
    return {**record, "id": new_id, "date": date}


@pytest.fixture(scope="module")
def duplicated(tmp_path_factory, tiny_model):
    """An index of 40 distinct questions dated 2024-01-01 and four copies: q3's two before
    March, q10's and q20's after."""
    directory = tmp_path_factory.mktemp("duplicates")
    records = [{**record, "date": "2024-01-01"} for record in collection(40)]
    records += [_copy(records[3], "copy-3a", "2024-02-01"), _copy(records[3], "copy-3b", "2024-02-02"),
                _copy(records[10], "copy-10", "2024-06-01"), _copy(records[20], "copy-20", "2024-07-01")]
    source = write_jsonl(directory / "questions.jsonl", records)
    index(source, directory / "index", tiny_model)
    return directory / "index"


def _ids(groups) -> list[list[str]]:
    return [sorted(member.question.external_id for member in group.members) for group in groups]


def test_a_group_is_a_centre_and_the_questions_judged_the_same_as_it():
    # 2 has the most partners: it is a centre, 1 and 3 its members (the closer first)
    pairs = [Pair(1, 2, 0.92), Pair(2, 3, 0.95), Pair(4, 5, 0.97), Pair(7, 8, 0.89)]
    assert centred_groups(pairs) == [(2, [3, 1]), (4, [5]), (7, [8])]
    assert centred_groups([]) == []


def _unit(*angles: float) -> dict[int, np.ndarray]:
    """Row id i -> the unit vector at angles[i] degrees in a plane."""
    return {i: np.array([np.cos(np.radians(a)), np.sin(np.radians(a))], dtype=np.float32)
            for i, a in enumerate(angles)}


def _pairs(vectors: dict[int, np.ndarray]) -> list[Pair]:
    return [Pair(a, b, float(vectors[a] @ vectors[b])) for a in vectors for b in vectors if a < b]


def test_a_chain_never_joins_questions_that_are_not_the_same_as_their_centre():
    # 0..4 are 20 degrees apart (cosine 0.94 to the next, 0.77 to the one after), 5 far away:
    # joined, the pairs at 0.9 would chain all five; centred, 0 and 2 are 40 degrees apart but
    # each the same as 1, and 3 and 4 form a group of their own
    vectors = _unit(0, 20, 40, 60, 80, 200)
    pairs = [pair for pair in _pairs(vectors) if pair.cosine >= 0.9]
    groups = centred_groups(pairs)
    assert groups == [(1, [0, 2]), (3, [4])]
    for centre, members in groups:
        assert all(vectors[centre] @ vectors[i] >= 0.9 for i in members)
    vectors = _unit(0, 5, 10, 90, 94, 96, 300)
    pairs = [pair for pair in _pairs(vectors) if pair.cosine >= 0.9]
    assert sorted(centred_groups(pairs)) == [(1, [0, 2]), (4, [5, 3])]  # the middle one, the closer first


def test_the_copies_of_a_question_form_its_group_largest_first(duplicated):
    opened = open_index(duplicated)
    try:
        progress: list[tuple[int, int]] = []
        groups = duplicate_groups(opened, UncalibratedJudge(), 0.9999,
                                  on_progress=lambda *counts: progress.append(counts))
    finally:
        opened.close()
    assert _ids(groups) == [["copy-3a", "copy-3b", "q3"], ["copy-10", "q10"], ["copy-20", "q20"]]
    # copies are equally central: the first indexed leads
    assert [member.question.external_id for member in groups[0].members] == ["q3", "copy-3a", "copy-3b"]
    assert all(member.match == pytest.approx(1.0, abs=1e-4) for group in groups for member in group.members)
    assert progress[-1] == (44, 44)


def test_since_checks_only_new_questions_against_the_whole_collection(duplicated):
    result = invoke("duplicates", "--index", duplicated, "--min-match", EXACT, "--since", "2024-03-01",
                    "--json")
    assert result.exit_code == 0, result.output
    groups = [json.loads(line) for line in result.stdout.splitlines()]
    assert [sorted(m["id"] for m in group["members"]) for group in groups] == [["copy-10", "q10"],
                                                                               ["copy-20", "q20"]]
    for group in groups:
        assert_documented(group, "duplicates --json line")
        for member in group["members"]:
            assert_documented(member, "duplicates --json member")


@pytest.fixture(scope="module")
def many_copies(tmp_path_factory, tiny_model):
    """40 distinct questions, 12 copies of q5 from January and one from June."""
    directory = tmp_path_factory.mktemp("many-copies")
    records = [{**record, "date": "2024-01-01"} for record in collection(40)]
    records += [_copy(records[5], f"copy-{n}", "2024-01-02") for n in range(12)]
    records.append(_copy(records[5], "copy-june", "2024-06-01"))
    index(write_jsonl(directory / "questions.jsonl", records), directory / "index", tiny_model)
    return directory / "index"


def test_a_group_holds_every_copy_however_few_neighbours_are_looked_at_first(many_copies):
    result = invoke("duplicates", "--index", many_copies, "--min-match", EXACT, "--neighbours", "3", "--json")
    assert result.exit_code == 0, result.output
    groups = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(groups) == 1 and groups[0]["size"] == 14
    assert groups[0]["members"][0]["id"] == "q5"  # copies are equally central: the first indexed leads


def test_since_shows_the_whole_group_of_a_new_question(many_copies):
    result = invoke("duplicates", "--index", many_copies, "--min-match", EXACT, "--since", "2024-03-01",
                    "--neighbours", "3", "--json")
    assert result.exit_code == 0, result.output
    groups = [json.loads(line) for line in result.stdout.splitlines()]
    assert [group["size"] for group in groups] == [14]
    copies = {"copy-june", *(f"copy-{n}" for n in range(12))}
    assert {member["id"] for member in groups[0]["members"]} == {"q5", *copies}


def test_a_calibrated_judge_decides_the_pairs_and_gives_each_member_its_probability(duplicated):
    # the curve of slope 20 reaches 50% at cosine 0.9999 (20 * 0.9999 - 19.998 = 0)
    judge = SameQuestionJudge(20.0, -19.998)
    opened = open_index(duplicated)
    try:
        groups = duplicate_groups(opened, judge, 0.5)
        assert _ids(groups) == _ids(duplicate_groups(opened, UncalibratedJudge(), 0.9999))
        assert duplicate_groups(opened, judge, 0.99) == []  # no cosine reaches a 99% judgement
    finally:
        opened.close()
    copies = [member for group in groups for member in group.members[1:]]
    assert all(member.match == pytest.approx(judge.probability(1.0), abs=1e-3) for member in copies)
    assert all(group.members[0].match == 1.0 for group in groups)


def test_table_shows_each_group_with_ids_sources_and_dates(duplicated):
    result = invoke("duplicates", "--index", duplicated, "--min-match", EXACT, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "group 1: 3 questions" in result.stdout and "group 3: 2 questions" in result.stdout
    assert "copy-3b" in result.stdout and "questions.jsonl" in result.stdout and "2024-07-01" in result.stdout
    assert "3 groups of near-duplicates, 7 questions, at 99.99% or more" in result.stdout


def test_csv_on_stdout_and_in_a_file_has_one_row_per_question(duplicated, tmp_path):
    printed = invoke("duplicates", "--index", duplicated, "--min-match", EXACT, "--format", "csv")
    assert printed.exit_code == 0, printed.output
    rows = list(csv.DictReader(io.StringIO(printed.stdout)))
    sizes = [("1", "3")] * 3 + [("2", "2")] * 2 + [("3", "2")] * 2
    assert [(row["group"], row["size"]) for row in rows] == sizes
    assert {row["id"] for row in rows if row["group"] == "2"} == {"q10", "copy-10"}
    out = tmp_path / "dups.csv"  # the table format writes a file as its suffix says
    written = invoke("duplicates", "--index", duplicated, "--min-match", EXACT, "--out", out)
    assert written.exit_code == 0, written.output
    assert out.read_text() == printed.stdout and written.stdout == ""
    assert f"written to {out}" in written.stderr


def test_every_format_shows_the_stored_date_whatever_column_it_came_from(tmp_path, tiny_model):
    """Built with --date-column received: each member's date is the one the run stored, in UTC,
    the day alone at midnight."""
    records = [{**record, "received": "2024-03-05"} for record in collection(10)]
    records.append({**records[4], "id": "copy-4", "received": "7 Mar 2024 14:30"})
    index(write_jsonl(tmp_path / "questions.jsonl", records), tmp_path / "index", tiny_model,
          "--date-column", "received")
    dates = {"q4": "2024-03-05", "copy-4": "2024-03-07T14:30:00+00:00"}
    found = invoke("duplicates", "--index", tmp_path / "index", "--min-match", EXACT, "--json")
    assert found.exit_code == 0, found.output
    assert {m["id"]: m["date"] for m in json.loads(found.stdout)["members"]} == dates
    found = invoke("duplicates", "--index", tmp_path / "index", "--min-match", EXACT, "--format", "csv")
    assert {row["id"]: row["date"] for row in csv.DictReader(io.StringIO(found.stdout))} == dates
    found = invoke("duplicates", "--index", tmp_path / "index", "--min-match", EXACT, env={"COLUMNS": "200"})
    assert all(date in found.stdout for date in dates.values()), found.stdout


def test_the_table_lists_the_group_s_metadata_and_a_date_only_where_one_is_known(tmp_path, tiny_model):
    records = [{**record, "queue": "email" if i % 2 else "phone"} for i, record in enumerate(collection(10))]
    records.append({**records[4], "id": "copy-4"})
    index(write_jsonl(tmp_path / "questions.jsonl", records), tmp_path / "index", tiny_model)
    found = invoke("duplicates", "--index", tmp_path / "index", "--min-match", EXACT, env={"COLUMNS": "200"})
    assert found.exit_code == 0, found.output
    header = next(line for line in found.stdout.splitlines() if "subject" in line)
    assert "queue" in header and "date" not in header  # no question has a date
    assert any("copy-4" in line and "phone" in line for line in found.stdout.splitlines())


def test_help_shows_the_default_min_match():
    help_text = " ".join(invoke("duplicates", "--help").stdout.split())
    assert f"default: ({SAME_QUESTION:.0%})" in help_text


def test_duplicates_load_no_model_and_json_shows_no_progress_bar(duplicated):
    result, heavy = imported_by(("torch", "onnxruntime", "transformers", "rich.progress"),
                                "duplicates", "--index", duplicated, "--min-match", EXACT, "--json")
    assert heavy == []
    assert len(result.stdout.splitlines()) == 3


HOSTILE = "visa\x1b]0;pwned\x07\x1b[2J\u009b31m\u202e renewal\nfees"


@pytest.mark.reliability("terminal control sequences, a bidi override and a line break in the "
                         "stored subjects of duplicate questions, printed by `duplicates` as CSV, "
                         "JSON and a table",
                         "shown as visible escapes (`\\x1b[2J`; JSON `\\u001b`), never raw; CSV "
                         "keeps one line per question")
def test_control_characters_in_subjects_are_escaped_in_every_format(tmp_path, tiny_model):
    record = {"id": "a", "subject": "visa renewal fees", "body": "how much?"}
    source = write_jsonl(tmp_path / "questions.jsonl", [record, {**record, "id": "b"}])
    index(source, tmp_path / "index", tiny_model)
    with sqlite3.connect(own_database(tmp_path / "index").removeprefix("sqlite:///")) as connection:
        connection.execute("UPDATE questions SET subject = ?", (HOSTILE,))  # as another program may
    for output, visible in (("csv", "\\x1b[2J"), ("table", "\\x1b[2J"), ("json", "\\u001b[2J")):
        result = invoke("duplicates", "--index", tmp_path / "index", "--format", output)
        assert result.exit_code == 0, result.output
        assert not {"\x1b", "\x07", "\u009b", "\u202e"} & set(result.stdout), output
        assert visible in result.stdout.replace("\n", ""), output
    rows = list(csv.reader(io.StringIO(invoke("duplicates", "--index", tmp_path / "index",
                                              "--format", "csv").stdout)))
    assert len(rows) == 3 and rows[1][5] == "visa\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202e renewal\\x0afees"


def test_no_duplicates_says_so(duplicated):
    result = invoke("duplicates", "--index", duplicated, "--min-match", EXACT, "--since", "2030-01-01")
    assert result.exit_code == 0, result.output
    assert "no near-duplicates at 99.99% or more, dated 2030-01-01 or later" in result.stdout


@pytest.mark.reliability("`duplicates` with a --min-match that is not a share, a --since that is "
                         "not a date, an --out file of no known format, or no index",
                         "one `error:` line naming the option, exit 2, nothing written")
@pytest.mark.parametrize(("args", "pattern"), [
    (["--min-match", "lots"], r"--min-match 'lots': not a number"),
    (["--min-match", "0"], r"--min-match '0': must be above 0"),
    (["--min-match", "150%"], r"--min-match '150%': must be above 0 and at most 100%"),
    (["--since", "soon"], r"since 'soon'"),
    (["--out", "dups.txt"], r"--out dups.txt: give --format csv or json"),
])
def test_bad_options_are_one_line_errors(duplicated, tmp_path, monkeypatch, args, pattern):
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(invoke("duplicates", "--index", duplicated, *args), pattern)
    assert list(tmp_path.iterdir()) == []


def test_no_index_is_a_one_line_error(tmp_path):
    assert_one_line_error(invoke("duplicates", "--index", tmp_path / "none"), r"no index here")


def test_groups_and_since_on_postgresql(tmp_path, tiny_model, postgres_url):
    records = [{**record, "date": "2024-01-01"} for record in collection(20)]
    records.append(_copy(records[5], "copy-5", "2024-06-01"))
    source = write_jsonl(tmp_path / "questions.jsonl", records)
    index(source, tmp_path / "index", tiny_model, "--db", postgres_url)
    result = invoke("duplicates", "--index", tmp_path / "index", "--db", postgres_url, "--min-match", EXACT,
                    "--since", "2024-05-01", "--json")
    assert result.exit_code == 0, result.output
    assert [[m["id"] for m in json.loads(line)["members"]] for line in result.stdout.splitlines()] == [
        ["q5", "copy-5"]]


def test_an_emptied_index_is_a_one_line_error(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "questions.jsonl", collection(2))
    index(source, tmp_path / "index", tiny_model)
    assert invoke("delete", "q0", "q1", "--index", tmp_path / "index").exit_code == 0
    assert_one_line_error(invoke("duplicates", "--index", tmp_path / "index"), r"is empty: add questions")
