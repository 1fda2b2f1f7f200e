"""`askalike search`'s output a person acts on (ids, --fields, --format, --min-match, --collapse,
the mode that ran), `show ID`, `search --like ID` and `similar`'s match."""

from __future__ import annotations

import csv
import io
import json

import pytest
from helpers import assert_one_line_error, collection, index, invoke, search_hits, write_jsonl

from askalike.app.hits import RESULT_FIELDS
from askalike.retrieval.judgement import model_judge

THREAD = b"""<root><Thread THREAD_SEQUENCE="Q9_R1">
<RelQuestion RELQ_ID="Q9_R1" RELQ_CATEGORY="Visas and Permits" RELQ_DATE="2012-03-04 10:00:00">
<RelQSubject>Family visa for my parents</RelQSubject>
<RelQBody>Can I sponsor my parents on a family visit visa with a salary of 10000?</RelQBody></RelQuestion>
<RelComment RELC_ID="Q9_R1_C1" RELC_USERNAME="amir" RELC_DATE="2012-03-04 11:00:00">
<RelCText>Yes, the minimum salary is lower than that.</RelCText></RelComment></Thread></root>"""
ASKED_AGAIN = [{"id": f"again{n}", "subject": "Family visa for my parents",
                "body": "Can I sponsor my parents on a family visit visa with a salary of 10000?" + " " * n}
               for n in (1, 2)]


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, steep_model):
    directory = tmp_path_factory.mktemp("output")
    write_jsonl(directory / "forum.jsonl", [*collection(40), *ASKED_AGAIN])
    (directory / "threads.xml").write_bytes(THREAD)
    index(directory / "forum.jsonl", directory / "index", steep_model, directory / "threads.xml")
    return directory / "index"


def search(index_dir, *args: str):
    result = invoke("search", *args, "--index", index_dir)
    assert result.exit_code == 0, result.output
    return result.stdout


def columns(header: str) -> list[str]:
    return [cell.strip() for cell in header.strip("┃ ").split("┃")]


def test_the_table_shows_ids_and_the_mode_that_ran(index_dir):
    table = search(index_dir, "Family visa for my parents", "-k", "3")
    assert "“Family visa for my parents” · dense" in table
    header = next(line for line in table.splitlines() if "match" in line)
    assert columns(header) == ["#", "id", "match", "subject", "source"]
    assert {"Q9_R1", "again1", "again2"} <= set(table.split())
    lexical = search(index_dir, "Family visa for my parents", "-k", "3", "--mode", "lexical")
    assert "“Family visa for my parents” · lexical" in lexical


def test_fields_pick_the_columns_in_their_order(index_dir):
    table = search(index_dir, "Family visa for my parents", "-k", "3", "--fields", "date,category,id,excerpt")
    header = next(line for line in table.splitlines() if "category" in line)
    assert columns(header) == ["#", "date", "category", "id", "excerpt"]
    assert "Visas and Permits" in table and "2012-03-04" in table


@pytest.mark.reliability("an unknown column in `search --fields`",
                         "exit 2, one line naming the unknown column and the columns there are")
def test_an_unknown_field_is_refused_naming_the_choices(index_dir):
    result = invoke("search", "visa", "--index", index_dir, "--fields", "id,author")
    assert result.exit_code == 2
    assert "--fields author: no question has that field" in result.stderr
    assert "or one of " + ", ".join(RESULT_FIELDS) in " ".join(result.stderr.split())


@pytest.mark.parametrize(("output", "delimiter"), [("csv", ","), ("tsv", "\t")])
def test_csv_and_tsv_have_a_header_and_a_row_per_hit(index_dir, output, delimiter):
    query = "Family visa for my parents"
    text = search(index_dir, query, "-k", "2", "--format", output, "--fields", "id,match,subject")
    rows = list(csv.reader(io.StringIO(text), delimiter=delimiter))
    assert rows[0] == ["search", "rank", "id", "match", "subject"]
    assert [row[:2] for row in rows[1:]] == [[query, "1"], [query, "2"]]
    assert rows[1][4] == "Family visa for my parents"  # the subject alone: no "≈ #1" mark


def test_csv_rows_name_each_query(index_dir):
    result = invoke("search", "--index", index_dir, "-k", "2", "--format", "csv",
                    input="Family visa for my parents\ncheap car\n")
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert [row["search"] for row in rows] == ["Family visa for my parents"] * 2 + ["cheap car"] * 2
    assert rows[0]["source"].endswith("forum.jsonl") or rows[0]["source"].endswith("threads.xml")
    assert 0 <= float(rows[0]["match"]) <= 1 and rows[0]["id"] in {"Q9_R1", "again1", "again2"}


def test_min_match_drops_the_weak_hits_and_says_so_when_none_is_left(index_dir):
    # asked three times: those match, the rest hardly
    query = f"{ASKED_AGAIN[0]['subject']} {ASKED_AGAIN[0]['body']}"
    everything = search_hits(search(index_dir, query, "-k", "20", "--json"))
    matches = [hit["match"] for hit in everything]
    step = next(i for i in range(len(matches) - 1) if matches[i] > matches[i + 1])
    cut = (matches[step] + matches[step + 1]) / 2
    kept = search_hits(search(index_dir, query, "-k", "20", "--json", "--min-match", str(cut)))
    assert kept == [hit for hit in everything if hit["match"] >= cut] and len(kept) < len(everything)
    none = search(index_dir, "cheap car", "--min-match", "100%")
    assert "“cheap car” · dense: no hit reaches --min-match 100%" in none.replace("\n", " ")


def test_collapse_folds_the_question_asked_three_times(index_dir):
    plain = search_hits(search(index_dir, "Family visa for my parents", "-k", "3", "--json"))
    assert [hit["duplicate_of"] for hit in plain] == [None, 1, 1]
    (folded, *others) = search_hits(search(index_dir, "Family visa for my parents", "-k", "3", "--json",
                                           "--collapse"))
    assert {folded["id"], *(a["id"] for a in folded["alike"])} == {"Q9_R1", "again1", "again2"}
    assert len(others) == 2 and [hit["rank"] for hit in others] == [2, 3]  # still k hits
    table = search(index_dir, "Family visa for my parents", "-k", "3", "--collapse", "--fields", "subject")
    assert "Family visa for my parents  (+2 alike)" in table


def test_lexical_orders_by_bm25_and_shows_the_judges_match_of_the_cosine(index_dir, steep_model):
    hits = search_hits(search(index_dir, "cheap car near the pearl", "-k", "15", "--json",
                              "--mode", "lexical"))
    assert {hit["mode"] for hit in hits} == {"lexical"}
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    judge = model_judge(steep_model)
    assert all(h["match"] == pytest.approx(float(judge.probability(h["cosine"])), abs=1e-4) for h in hits)


def test_lexical_with_no_hit_and_no_filter_does_not_blame_filters(index_dir):
    said = search(index_dir, "zzqx", "--mode", "lexical")
    assert "no question holds a word of the query" in said and "filters" not in said
    filtered = search(index_dir, "zzqx", "--mode", "lexical", "--category", "car")
    assert "no questions match the filters" in filtered


def test_show_prints_the_whole_question_with_its_comments(index_dir):
    shown = invoke("show", "Q9_R1", "--index", index_dir)
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    for expected in ("Family visa for my parents", "id Q9_R1", "source threads.xml",
                     "category Visas and Permits", "salary of 10000", "1 comments", "amir",
                     "minimum salary is lower"):
        assert expected in text, expected
    as_json = json.loads(invoke("show", "Q9_R1", "--index", index_dir, "--json").stdout)
    assert as_json["body"].endswith("salary of 10000?")
    assert as_json["metadata"]["comments"][0]["username"] == "amir"


@pytest.mark.reliability("`show ID` and `search --like ID` with an id the index lacks, or one that two "
                         "sources share", "exit 2, one line: no such id in the index / the sources that "
                                          "have it and --source to pick one")
def test_show_and_like_refuse_an_unknown_or_ambiguous_id(index_dir, tmp_path, tiny_model):
    assert_one_line_error(invoke("show", "nope", "--index", index_dir), r"no question with id 'nope' in ")
    assert_one_line_error(invoke("search", "--like", "nope", "--index", index_dir),
                          r"no question with id 'nope'")
    write_jsonl(tmp_path / "a.jsonl", collection(3))
    write_jsonl(tmp_path / "b.jsonl", collection(3))
    index(tmp_path / "a.jsonl", tmp_path / "index", tiny_model, tmp_path / "b.jsonl")
    assert_one_line_error(invoke("show", "q1", "--index", tmp_path / "index"),
                          r"'q1' is in 2 sources \(a.jsonl, b.jsonl\): name one with --source")
    picked = invoke("show", "q1", "--index", tmp_path / "index", "--source", "b.jsonl", "--json")
    assert json.loads(picked.stdout)["source"].endswith("b.jsonl")


def test_like_finds_more_like_a_question_by_its_id(index_dir):
    (payload,) = map(json.loads, search(index_dir, "--like", "Q9_R1", "-k", "3", "--json").splitlines())
    assert payload["like"]["id"] == "Q9_R1" and payload["mode"] == "dense"
    ids = [hit["id"] for hit in payload["results"]]
    assert "Q9_R1" not in ids and ids[:2] in (["again1", "again2"], ["again2", "again1"])
    assert "more like Q9_R1 “Family visa for my parents” · dense" in search(index_dir, "--like", "Q9_R1")


@pytest.mark.reliability("`search` given both a QUERY and --like, or --like with a lexical mode",
                         "exit 2, one line saying which to leave out")
def test_like_with_a_query_or_a_word_mode_is_refused(index_dir):
    both = invoke("search", "visa", "--like", "Q9_R1", "--index", index_dir)
    assert both.exit_code == 2 and "give a QUERY or --like ID, not both" in both.stderr
    lexical = invoke("search", "--like", "Q9_R1", "--mode", "lexical", "--index", index_dir)
    assert lexical.exit_code == 2 and "--like searches by meaning" in lexical.stderr


def test_similar_shows_the_match_search_shows(tiny_model, index_dir):
    said = invoke("similar", "Family visa", "Family visa", "--model", tiny_model)
    assert said.stdout.strip() == "100% match: the same question (cosine 1.0000)"  # uncalibrated: the cosine
    scaled = invoke("similar", "visa", "visa", "--model", tiny_model, "--sts-scale")
    assert scaled.stdout.strip() == "100% match: the same question (cosine 1.0000), 5.00 on the STS 0-5 scale"


def test_search_settings_help_says_they_are_raised_for_k_and_filters():
    text = " ".join(invoke("search", "--help").stdout.split())
    assert text.count("raised as needed for a larger -k and for filters") == 2
