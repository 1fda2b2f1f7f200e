"""What askalike writes for other programs to read: CSV and TSV that a spreadsheet opens without
running a formula stored in a question (``app.safe_text.SpreadsheetWriter``)."""

from __future__ import annotations

import csv
import io

import pytest
from helpers import index, invoke, write_jsonl

from askalike.app.safe_text import spreadsheet_text

FORMULAS = ["=1+2", "\r=1+2", "+SUM(A1)", "-2+3", "@SUM(1)", "  =HYPERLINK(\"x\")", "\t=1"]


@pytest.mark.parametrize("text", FORMULAS)
def test_a_cell_a_spreadsheet_would_run_is_prefixed(text):
    cell = spreadsheet_text(text)
    assert cell.startswith("'") or cell.startswith("\\x"), cell
    assert "\r" not in cell and "\t" not in cell


@pytest.mark.parametrize("text", ["visa = fees", "a-b", "50%", "e-mail me", ""])
def test_other_text_is_written_as_it_is(text):
    assert spreadsheet_text(text) == text


@pytest.fixture(scope="module")
def formula_index(tmp_path_factory, tiny_model):
    directory = tmp_path_factory.mktemp("formulas")
    rows = [{"id": f"=cmd{n}", "subject": subject, "body": subject, "category": "@x"}
            for n, subject in enumerate(FORMULAS)]
    rows += [{"id": "twin-a", "subject": "=1+2 visa renewal", "body": "=1+2 visa renewal"},
             {"id": "twin-b", "subject": "=1+2 visa renewal", "body": "=1+2 visa renewal"}]
    index(write_jsonl(directory / "q.jsonl", rows), directory / "index", tiny_model)
    return directory / "index"


def _cells(text: str, delimiter: str = ",") -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text), delimiter=delimiter))


def _runnable(value: str) -> bool:
    return value.lstrip()[:1] in ("=", "+", "-", "@") or value[:1] in ("\t", "\r")


@pytest.mark.reliability("subjects, bodies, ids and categories that start a spreadsheet formula "
                         "(`=1+2`, `\\r=1+2`, `+SUM(A1)`, `-2+3`, `@SUM(1)`, ` =HYPERLINK(...)`), "
                         "written by `search --format csv` and `tsv` and `duplicates --format csv`",
                         "each such text cell starts with `'` (OWASP), so a spreadsheet shows it and "
                         "runs nothing; the match column stays a number")
def test_no_csv_or_tsv_cell_is_a_formula(formula_index):
    fields = "id,match,subject,excerpt,category,source"
    written = []
    for output, delimiter in (("csv", ","), ("tsv", "\t")):
        result = invoke("search", "=1+2 visa", "--index", formula_index, "--format", output,
                        "--fields", fields, "-k", "20", "--mode", "lexical")
        assert result.exit_code == 0, result.output
        rows = _cells(result.stdout, delimiter)
        assert len(rows) >= 2 and all(float(row["match"]) >= 0 for row in rows)
        written += rows
    result = invoke("duplicates", "--index", formula_index, "--format", "csv", "--min-match", "99%")
    assert result.exit_code == 0, result.output
    groups = _cells(result.stdout)
    assert {row["id"] for row in groups} >= {"'=cmd0", "twin-a", "twin-b"}
    written += groups
    for row in written:
        for column, value in row.items():
            if column != "match":
                assert not _runnable(value), (column, value)
    assert any(row.get("excerpt", "").startswith("'=1+2") for row in written)
