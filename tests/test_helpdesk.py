"""A help desk's export as a new user indexes it (issue 54): a CSV ``case_no,received,question,team``
with dd/mm/yyyy dates; column roles, metadata filters and metadata in every output, a weekly
export under a new name replacing the last one, dry runs that agree with the run, and the
index's date format used by its filters."""

from __future__ import annotations

import csv
import json

import pytest
from helpers import assert_one_line_error, invoke, make_tiny_model

TEAMS = ("Billing", "Sales", "Support")


def _export(path, rows):
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["case_no", "received", "question", "team"])
        writer.writerows(rows)
    return path


def _rows(count=30, edited=()):
    """Questions C00001...; their date 1..28 of a month (dd/mm/yyyy), February for the first 15."""
    rows = []
    for i in range(1, count + 1):
        text = f"how do I change the {['address', 'card', 'plan', 'password', 'invoice'][i % 5]} of case {i}"
        if i in edited:
            text += " (edited)"
        rows.append([f"C{i:05d}", f"{(i % 28) + 1:02d}/{2 if i <= 15 else 3:02d}/2025", text,
                     TEAMS[i % 3]])
    return rows


INDEX_OPTIONS = ("--id-column", "case_no", "--date-column", "received", "--category-column", "team",
                 "--date-format", "dmy")


@pytest.fixture
def helpdesk(tmp_path, tiny_model):
    source = _export(tmp_path / "export-week1.csv", _rows())
    result = invoke("index", source, "--model", tiny_model, "--index", tmp_path / "index", "--json",
                    *INDEX_OPTIONS)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["undated"] == 0
    return tmp_path / "index", source


def _search(index_dir, *extra):
    result = invoke("search", "change the card", "--index", index_dir, "-k", "50", "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["results"]


def test_date_and_category_columns_are_named_and_filtered_on(helpdesk):
    index_dir, _ = helpdesk
    billing = _search(index_dir, "--category", "billing")
    assert billing and all(hit["metadata"]["team"] == "Billing" for hit in billing)
    march = _search(index_dir, "--since", "2025-03-01")
    assert march and all(hit["metadata"]["received"].endswith("/03/2025") for hit in march)


def test_the_index_date_format_reads_the_filters_dates(helpdesk):
    index_dir, _ = helpdesk
    # 01/03/2025 is ambiguous alone; the index was built with --date-format dmy: 1 March
    march = _search(index_dir, "--since", "01/03/2025")
    assert march and all(hit["metadata"]["received"].endswith("/03/2025") for hit in march)
    assert len(march) == 15


def test_where_filters_on_any_metadata_column(helpdesk):
    index_dir, _ = helpdesk
    sales = _search(index_dir, "--where", "team=sales")
    assert sales and {hit["metadata"]["team"] for hit in sales} == {"Sales"}
    either = _search(index_dir, "--where", "team=Sales", "--where", "team=Billing")
    assert {hit["metadata"]["team"] for hit in either} == {"Sales", "Billing"}
    one_day = _search(index_dir, "--where", "received=02/02/2025", "--where", "team=Sales")
    assert [hit["id"] for hit in one_day] == ["C00001"] or all(
        hit["metadata"]["received"] == "02/02/2025" for hit in one_day)


@pytest.mark.reliability("a search whose filters match nothing", "names what the index holds: its "
                         "sources, its categories, the values of a --where column, or that it holds "
                         "no dates")
def test_a_filter_that_matches_nothing_says_what_there_is(helpdesk, tmp_path, tiny_model):
    index_dir, _ = helpdesk
    result = invoke("search", "card", "--index", index_dir, "--category", "Accounts")
    assert result.exit_code == 0
    assert "Billing (10)" in result.stdout and "Sales (10)" in result.stdout
    result = invoke("search", "card", "--index", index_dir, "--source", "export-week9.csv")
    assert "its sources: export-week1.csv (30)" in " ".join(result.stdout.split())
    result = invoke("search", "card", "--index", index_dir, "--where", "team=Accounts")
    assert "team: Billing (10)" in " ".join(result.stdout.split())
    # of two filters, the one that empties the result is named: every Billing case is before April
    result = invoke("search", "card", "--index", index_dir, "--where", "team=Billing",
                    "--since", "01/04/2025")
    said = " ".join(result.stdout.split())
    assert "without the date filter, 10 would match" in said and "without the metadata filter" not in said
    assert "its dates run from 2025-02-02 to 2025-03-28 (30 dated)" in said
    undated = _export(tmp_path / "undated.csv", [["C1", "", "a question", "Sales"]])
    assert invoke("index", undated, "--model", tiny_model, "--index", tmp_path / "bare").exit_code == 0
    result = invoke("search", "question", "--index", tmp_path / "bare", "--since", "2025-01-01")
    assert "holds no dates" in " ".join(result.stdout.split())


def test_a_where_on_a_field_no_question_has_is_refused_naming_the_fields(helpdesk):
    """A misspelt column could only ever match nothing: the command says so and exits non-zero
    (the API still answers, with the same reason under ``why``)."""
    index_dir, _ = helpdesk
    result = invoke("search", "card", "--index", index_dir, "--where", "branch=North")
    assert result.exit_code == 2
    assert_one_line_error(result, r"--where branch: no question has that field \(its fields: ")
    assert "team" in result.stderr


@pytest.mark.reliability("--where without KEY=VALUE", "a one-line error naming --where, exit 2")
def test_a_where_that_is_not_key_value_is_refused(helpdesk):
    index_dir, _ = helpdesk
    assert_one_line_error(invoke("search", "card", "--index", index_dir, "--where", "Billing"),
                          r"--where 'Billing': expected KEY=VALUE")


def test_fields_and_csv_carry_metadata_columns(helpdesk):
    index_dir, _ = helpdesk
    result = invoke("search", "card", "--index", index_dir, "--fields", "id,team,received",
                    "--format", "csv", "-k", "3")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(result.stdout.splitlines()))
    assert rows[0] == ["search", "rank", "id", "team", "received"]
    assert all(row[3] in TEAMS and row[4].endswith("/2025") for row in rows[1:])
    table = invoke("search", "card", "--index", index_dir, "--fields", "id,team", "-k", "3")
    assert table.exit_code == 0 and any(team in table.stdout for team in TEAMS)


@pytest.mark.reliability("--fields naming no column of the index", "a one-line error listing the "
                         "fields and metadata columns there are, exit 2")
def test_fields_refuse_a_column_the_index_lacks(helpdesk):
    index_dir, _ = helpdesk
    assert_one_line_error(invoke("search", "card", "--index", index_dir, "--fields", "id,branch"),
                          r"--fields branch: no question has that field \(its fields: received, team; "
                          r"or one of id, .*\)")


def test_show_displays_every_metadata_column(helpdesk):
    index_dir, _ = helpdesk
    result = invoke("show", "C00004", "--index", index_dir)
    assert result.exit_code == 0, result.output
    assert "received 05/02/2025" in result.stdout and "team Sales" in result.stdout


def test_duplicates_csv_carries_metadata_columns(helpdesk):
    index_dir, _ = helpdesk
    result = invoke("duplicates", "--index", index_dir, "--format", "csv", "--min-match", "0.5")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(result.stdout.splitlines()))
    assert rows[0][-2:] == ["received", "team"]
    assert len(rows) > 1 and all(row[-1] in TEAMS for row in rows[1:])


def test_a_weekly_export_under_a_new_name_replaces_the_last(helpdesk, tmp_path):
    index_dir, week1 = helpdesk
    week2 = _export(tmp_path / "export-week2.csv", _rows(29, edited={3}))  # C00030 gone, C00003 edited
    planned = invoke("index", week2, "--index", index_dir, "--replace", "export-week1.csv", "--json",
                     "--dry-run", *INDEX_OPTIONS)
    assert planned.exit_code == 0, planned.output
    result = invoke("index", week2, "--index", index_dir, "--replace", "export-week1.csv", "--json",
                    *INDEX_OPTIONS)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["added"], report["reembedded"], report["removed"], report["total"]) == (0, 1, 1, 29)
    assert report["unchanged"] == 28 and report["replaced"] == str(week1.resolve())
    assert not report["warnings"]
    assert {key: json.loads(planned.stdout)[key] for key in ("added", "reembedded", "removed", "total")} \
        == {key: report[key] for key in ("added", "reembedded", "removed", "total")}
    shown = invoke("show", "C00004", "--index", index_dir, "--json")  # one source: no --source needed
    assert shown.exit_code == 0 and json.loads(shown.stdout)["source"] == str(week2.resolve())
    ids = [hit["id"] for hit in _search(index_dir)]
    assert len(ids) == len(set(ids)) == 29


@pytest.mark.reliability("index --replace naming no indexed source", "a one-line error listing the "
                         "sources, exit 2, nothing changed")
def test_replace_refuses_a_source_the_index_lacks(helpdesk, tmp_path):
    index_dir, _ = helpdesk
    week2 = _export(tmp_path / "export-week2.csv", _rows())
    for extra in ((), ("--dry-run",)):
        assert_one_line_error(invoke("index", week2, "--index", index_dir, "--replace", "nope.csv",
                                     *extra, *INDEX_OPTIONS),
                              r"--replace nope.csv: the index has no such source \(its sources: "
                              r"export-week1.csv\)")
    assert len(_search(index_dir)) == 30


@pytest.mark.reliability("index --dry-run with a model that is not the index's", "refused as the run "
                         "is, with the same one-line error (exit 2)")
def test_a_dry_run_refuses_another_encoder_as_the_run_does(helpdesk, tmp_path):
    index_dir, source = helpdesk
    other = make_tiny_model(tmp_path / "other", seed=1)
    dry = invoke("index", source, "--index", index_dir, "--model", other, "--dry-run", *INDEX_OPTIONS)
    run = invoke("index", source, "--index", index_dir, "--model", other, *INDEX_OPTIONS)
    assert_one_line_error(run, "is a different encoder")
    assert_one_line_error(dry, "is a different encoder")
    assert dry.stderr.strip() == run.stderr.strip()


@pytest.mark.reliability("--date-column naming no column of the CSV", "a one-line error naming the "
                         "file, line 1 and --date-column, exit 2")
def test_a_date_column_the_file_lacks_is_refused(tmp_path, tiny_model):
    source = _export(tmp_path / "export.csv", _rows(3))
    assert_one_line_error(invoke("index", source, "--model", tiny_model, "--index", tmp_path / "index",
                                 "--id-column", "case_no", "--date-column", "opened"),
                          r"export.csv:1: no column 'opened' \(--date-column\)")


def test_date_and_category_fields_come_from_the_columns_the_run_read(helpdesk):
    index_dir, _ = helpdesk
    result = invoke("search", "card", "--index", index_dir, "--fields", "id,date,category,received,team",
                    "--format", "csv", "-k", "3")
    assert result.exit_code == 0, result.output
    for row in list(csv.DictReader(result.stdout.splitlines())):
        day, month, year = row["received"].split("/")
        assert row["date"] == f"{year}-{month}-{day}" and row["category"] == row["team"] in TEAMS


def test_a_question_written_through_the_api_is_read_as_the_index_runs_read_theirs(helpdesk, tmp_path):
    from serving import WRITE, serving

    index_dir, _ = helpdesk
    with serving(index_dir, tmp_path / "served") as client:
        written = client.post("/questions", headers=WRITE, json={
            "id": "A1", "question": "printer offline again", "received": "15/03/2025",
            "team": "IT"})
        assert written.status_code == 200 and written.json()["warnings"] == [], written.text
    since = invoke("search", "printer offline again", "--index", index_dir, "--json", "--since", "14/03/2025",
                   "--category", "IT", "-k", "50")
    assert since.exit_code == 0, since.output
    hits = json.loads(since.stdout)["results"]
    # dated by its `received` (read dmy, as the index remembers), filed under its `team`
    assert "A1" in [hit["id"] for hit in hits]
