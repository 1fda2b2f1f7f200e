"""Any CSV: columns named by option, ids made for a file without them, separators detected,
every bad row named in one run, and no half-made index left by a failed first run."""

from __future__ import annotations

import json

import pytest
from helpers import invoke, search_hits, write_bytes

from askalike.core.datasets import DataError
from askalike.indexer.choices import OnError
from askalike.indexer.sources import BAD_ROWS_SHOWN, Columns, SourceFile


def read(path, columns: Columns | None = None) -> list:
    source = SourceFile(path, OnError.stop, columns=columns or Columns())
    questions = list(source.check([]))
    assert list(source.questions()) == questions
    return questions


def test_columns_named_by_option_and_several_text_columns_joined(tmp_path):
    path = write_bytes(tmp_path / "tickets.csv", b"Ticket,Summary,Details,Fix,Team,Notes\n"
                                                 b"T-1,Printer offline,Since Monday,Restart spooler,IT,x\n")
    (question,) = read(path, Columns("ticket", ("Summary", "details", "fix"), ("team",)))
    assert (question.external_id, question.subject, question.body, question.metadata) == (
        "T-1", "Printer offline", "Since Monday\n\nRestart spooler", {"team": "IT"})


def test_jsonl_keys_named_by_option(tmp_path):
    path = write_bytes(tmp_path / "q.jsonl", b'{"key": 7, "q": "VPN drops", "extra": 1, "team": "net"}\n')
    (question,) = read(path, Columns("key", ("q",), ("team",)))
    assert (question.external_id, question.text, question.metadata) == ("7", "VPN drops", {"team": "net"})


@pytest.mark.reliability("--id-column or --text-column naming a column the header lacks",
                         "refused naming the option, the column and the header; nothing written")
def test_a_column_option_naming_no_column_is_refused(tmp_path):
    path = write_bytes(tmp_path / "q.csv", b"id,subject\n1,a\n")
    with pytest.raises(DataError, match=r"q\.csv:1: no column 'title' \(--text-column\) in the header"):
        read(path, Columns(text=("title",)))
    with pytest.raises(DataError, match=r"q\.csv:2: missing or empty 'key'"):
        read(write_bytes(tmp_path / "q.csv", b"key,subject\n,a\n"), Columns(id="Key"))
    with pytest.raises(DataError, match=r"apply to .* files only"):
        read(write_bytes(tmp_path / "q.txt", b"a question\n"), Columns(id="x"))


def test_a_csv_without_ids_gets_ids_from_its_text_that_survive_reordering(tmp_path):
    first = write_bytes(tmp_path / "a.csv", b"subject,category\nReset my password,IT\nVPN drops,IT\n"
                                            b"Reset my password,HR\n")
    again = write_bytes(tmp_path / "b.csv", b"subject,category\nNew laptop,IT\nVPN drops,IT\n"
                                            b"Reset my password,IT\nReset my password,HR\n")
    ids = {(q.text, q.metadata["category"]): q.external_id for q in read(first)}
    assert len(set(ids.values())) == 3
    assert ids[("Reset my password", "HR")] == ids[("Reset my password", "IT")] + "-2"
    reordered = {(q.text, q.metadata["category"]): q.external_id for q in read(again)}
    assert reordered[("VPN drops", "IT")] == ids[("VPN drops", "IT")]
    assert reordered[("Reset my password", "IT")] == ids[("Reset my password", "IT")]


@pytest.mark.parametrize("separator", [b";", b"\t", b","])
def test_semicolon_tab_and_comma_separators_are_detected(tmp_path, separator):
    row = separator.join([b"id", b"subject", b"category"]) + b"\n" + separator.join(
        [b"1", b'"Printer, offline; again"', b"IT"]) + b"\n"
    (question,) = read(write_bytes(tmp_path / "q.csv", row))
    assert (question.external_id, question.subject, question.metadata) == (
        "1", "Printer, offline; again", {"category": "IT"})


@pytest.mark.reliability("a CSV with many bad rows, --on-error stop",
                         "exit 2 naming every bad row (the first 20, and how many more), nothing stored")
def test_stop_names_every_bad_row_of_every_source(tmp_path, tiny_model):
    good = "".join(f"{i},question {i}\n" for i in range(5))
    bad = "".join(f"x{i},\n" for i in range(BAD_ROWS_SHOWN + 3))  # empty questions
    first = write_bytes(tmp_path / "one.csv", f"id,subject\n{good}7,a,b\n{bad}".encode())
    second = write_bytes(tmp_path / "two.jsonl", b'{"subject": "no id"}\n')
    index_dir = tmp_path / "index"
    result = invoke("index", first, second, "--model", tiny_model, "--index", index_dir)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert lines[0] == "error: " + str(tmp_path / "one.csv") + ":7: expected 2 fields (id, subject), got 3"
    assert len(lines) == BAD_ROWS_SHOWN + 2
    assert lines[-2] == "error: ... and 5 more bad rows"  # 24 in one.csv, 1 in two.jsonl
    assert lines[-1].startswith("error: 25 bad rows: nothing was stored")
    assert not index_dir.exists()


@pytest.mark.reliability("the first index run of a directory fails (bad rows, a model that is not there)",
                         "no index directory left behind; an existing empty directory stays empty")
def test_a_failed_first_run_leaves_no_index_directory(tmp_path, tiny_model):
    source = write_bytes(tmp_path / "q.csv", b"id,subject\n1,fine\n")
    missing_model = invoke("index", source, "--model", tmp_path / "nope", "--index", tmp_path / "new")
    assert missing_model.exit_code == 2 and not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    bad = write_bytes(tmp_path / "bad.csv", b"id,subject\n1,\n")
    assert invoke("index", bad, "--model", tiny_model, "--index", tmp_path / "empty").exit_code == 2
    assert list((tmp_path / "empty").iterdir()) == []
    result = invoke("index", source, "--model", tiny_model, "--index", tmp_path / "new", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["added"] == 1


def test_index_command_maps_columns_and_warns_about_made_ids(tmp_path, tiny_model):
    path = write_bytes(tmp_path / "desk.csv", b"Summary;Details;Team\nPrinter offline;since Monday;IT\n")
    index_dir = tmp_path / "index"
    result = invoke("index", path, "--model", tiny_model, "--index", index_dir, "--text-column", "summary",
                    "--text-column", "details", "--json")
    assert result.exit_code == 0, result.output
    assert "no 'id' column" in result.stderr
    shown = invoke("search", "printer", "--index", index_dir, "--json")
    hit = search_hits(shown.stdout)[0]
    assert hit["subject"] == "Printer offline" and hit["metadata"] == {"team": "IT"}


def test_broken_quoting_after_bad_rows_is_named_with_them(tmp_path):
    empty_rows = "".join(f"e{i},\n" for i in range(BAD_ROWS_SHOWN + 5))
    path = write_bytes(tmp_path / "q.csv", f'id,subject\n1,fine\n{empty_rows}9,"never closed\n'.encode())
    with pytest.raises(DataError) as refused:
        read(path)
    lines = refused.value.lines()
    assert len(lines) == BAD_ROWS_SHOWN + 2 and "broken quoting" in lines[BAD_ROWS_SHOWN - 1]
    assert lines[-1].startswith(f"{BAD_ROWS_SHOWN + 6} bad rows: nothing was stored")
