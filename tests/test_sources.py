"""Question sources: each format, metadata, and bad input named by file and line."""

from __future__ import annotations

import csv
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from helpers import write_bytes
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from askalike.core.datasets import DataError
from askalike.core.dates import DateOrder
from askalike.indexer.choices import OnError
from askalike.indexer.sources import SourceFile, category_key, clean_text


def read(path: Path, on_error: OnError = OnError.stop) -> tuple[list, list[str]]:
    """Both passes of an index run: the questions checked, and the same read again."""
    problems: list[DataError] = []
    source = SourceFile(path, on_error)
    questions = list(source.check(problems))
    assert list(source.questions()) == questions
    return questions, [str(p) for p in problems]


def test_csv_with_title_body_and_metadata(tmp_path):
    path = write_bytes(tmp_path / "q.csv", b'id,title,body,category\n1,"Visa, fees","how much, really?",'
                                            b'immigration\n2,Cars,"multi\nline body",\n')
    questions, _ = read(path)
    assert [(q.external_id, q.subject, q.body, q.metadata) for q in questions] == [
        ("1", "Visa, fees", "how much, really?", {"category": "immigration"}),
        ("2", "Cars", "multi\nline body", {}),
    ]
    assert questions[1].line == 3


def test_csv_with_a_question_column_and_jsonl_with_a_text_key(tmp_path):
    csv_path = write_bytes(tmp_path / "q.csv", b"id,question\n1,How do I renew my visa?\n")
    jsonl_path = write_bytes(tmp_path / "q.jsonl",
                             b'{"id": 2, "text": "Best beach for kids", "title": "Beach"}\n')
    assert [(q.external_id, q.subject) for q in read(csv_path)[0]] == [("1", "How do I renew my visa?")]
    (question,) = read(jsonl_path)[0]  # the first text column wins; the other is metadata
    assert (question.subject, question.metadata) == ("Beach", {"text": "Best beach for kids"})


def test_tsv_and_gzip(tmp_path):
    import gzip

    path = tmp_path / "q.tsv.gz"
    path.write_bytes(gzip.compress(b"ID\tSubject\tBody\nA\tvisa\trenewal\n"))
    (question,) = read(path)[0]
    assert (question.external_id, question.text) == ("A", "visa renewal")


def test_text_lines_are_numbered_and_blank_lines_skipped(tmp_path):
    path = write_bytes(tmp_path / "q.txt", b"first question\n\n  \nsecond question\n")
    assert [(q.external_id, q.subject) for q in read(path)[0]] == [("1", "first question"),
                                                                  ("4", "second question")]


def test_cqa_xml_originals_once_and_related_with_comments(tmp_path):
    xml = b"""<root>
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>visa</OrgQSubject><OrgQBody>renew?</OrgQBody>
 <Thread THREAD_SEQUENCE="Q1_R1"><RelQuestion RELQ_ID="Q1_R1" RELQ_CATEGORY="Visas" RELQ_DATE="2010-01-01">
  <RelQSubject>renewal</RelQSubject><RelQBody>how long</RelQBody></RelQuestion>
  <RelComment RELC_ID="Q1_R1_C1" RELC_USERNAME="ann"><RelCText>two weeks</RelCText></RelComment>
 </Thread></OrgQuestion>
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>visa</OrgQSubject><OrgQBody>renew?</OrgQBody>
 <Thread THREAD_SEQUENCE="Q1_R2"><RelQuestion RELQ_ID="Q1_R2"><RelQSubject>fees</RelQSubject>
  <RelQBody></RelQBody></RelQuestion></Thread></OrgQuestion>
</root>"""
    questions = read(write_bytes(tmp_path / "q.xml", xml))[0]
    assert [q.external_id for q in questions] == ["Q1_R1", "Q1", "Q1_R2"]
    related = questions[0]
    assert related.metadata["category"] == "Visas" and related.metadata["kind"] == "related"
    assert related.metadata["comments"] == [{"id": "Q1_R1_C1", "date": None, "username": "ann",
                                             "text": "two weeks"}]
    assert questions[1].metadata == {"kind": "original"}


def test_real_cqa_file_has_every_question_once(data_dir):
    questions = read(data_dir / "semeval-cqa" / "SemEval2016-Task3-CQA-QL-test.xml")[0]
    ids = [q.external_id for q in questions]
    assert len(ids) == len(set(ids)) == 70 + 700  # 70 original questions, 10 related each


# the bad-input corpus (tests/bad_inputs, run through `askalike index` in test_reliability.py)
# covers the other cases; these two are reader-only
@pytest.mark.parametrize(("name", "content", "message"), [
    ("q.jsonl", b'{"id": "x", "subject": "a"}\n{"id": " x ", "subject": "b"}\n',
     r"q\.jsonl:2: duplicate id 'x' \(first at line 1\)"),
    ("q.docx", b"whatever", r"unknown source format '.docx'"),
])
def test_bad_input_names_file_and_line(tmp_path, name, content, message):
    with pytest.raises(DataError, match=message):
        read(write_bytes(tmp_path / name, content))


def test_skip_keeps_good_rows_and_lists_the_bad(tmp_path):
    path = write_bytes(tmp_path / "q.jsonl", b'{"id": 1, "subject": "a"}\n"text"\n{"id": 1, "subject": "b"}\n'
                                             b'{"id": 2, "body": "c"}\n')
    questions, problems = read(path, OnError.skip)
    assert [q.external_id for q in questions] == ["1", "2"]
    assert len(problems) == 2 and "q.jsonl:2" in problems[0] and "q.jsonl:3" in problems[1]


def test_control_characters_are_kept_but_nul_and_big_questions_kept(tmp_path):
    record = {"id": 1, "subject": "bell\u0007 and\u0000 nul\u009b", "body": "x" * 1_000_000}
    path = write_bytes(tmp_path / "q.jsonl", json.dumps(record).encode() + b"\n")
    (question,) = read(path)[0]
    assert question.subject == "bell\u0007 and nul\u009b" and len(question.body) == 1_000_000


# any text that stays a question once stored (line endings made \n, NUL removed)
question_text = st.text().filter(lambda text: clean_text(text).strip() != "")


@pytest.mark.reliability("any Unicode questions (hypothesis) written as JSON Lines, CSV and TSV",
                         "read back exactly: control characters kept (shown escaped), NUL removed, line "
                         "endings made \\n, ids kept")
@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.tuples(question_text, st.text()), min_size=1, max_size=8),
       suffix=st.sampled_from([".jsonl", ".csv", ".tsv"]))
def test_readers_round_trip_any_text(tmp_path, records, suffix):
    path = tmp_path / f"questions{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps({"id": i, "subject": s, "body": b}) + "\n"
                                for i, (s, b) in enumerate(records)), encoding="utf-8")
    else:
        with open(path, "w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="," if suffix == ".csv" else "\t")
            writer.writerow(["id", "subject", "body"])
            writer.writerows([i, s, b] for i, (s, b) in enumerate(records))
    questions, problems = read(path)
    assert not problems
    assert [(q.external_id, q.subject, q.body) for q in questions] == [
        (str(i), clean_text(s), clean_text(b)) for i, (s, b) in enumerate(records)]


JAN_5, JAN_10 = datetime(2024, 1, 5, tzinfo=UTC), datetime(2024, 1, 10, tzinfo=UTC)


def test_dates_are_parsed_per_row_and_those_that_are_not_dates_named(tmp_path):
    path = write_bytes(tmp_path / "q.csv", b"id,subject,date\n1,a,2024-01-05\n2,b,10/01/2024\n"
                                           b"3,c,5 Jan 2024\n4,d,20240105\n5,e,soon\n6,f,\n")
    source = SourceFile(path, OnError.stop)
    assert [q.dated for q in source.check([])] == [JAN_5, None, JAN_5, JAN_5, None, None]
    assert source.undated == 2
    assert source.date_warnings == [
        f"{path}:3: date '10/01/2024' is ambiguous (10 January or 1 October 2024): give --date-format "
        "dmy or mdy",
        f"{path}:6: date 'soon' is not a date (expected YYYY-MM-DD (or an ISO 8601 date and time), "
        "DD/MM/YYYY or MM/DD/YYYY, 5 Jan 2024, Jan 5, 2024 or 20240105)"]
    day_first = SourceFile(path, OnError.stop, DateOrder.dmy)
    assert [q.dated for q in day_first.check([])][1] == JAN_10
    assert [q.dated for q in day_first.questions()][1] == JAN_10 and day_first.undated == 1


def test_json_dates_may_be_numbers_and_not_booleans(tmp_path):
    path = write_bytes(tmp_path / "q.jsonl", b'{"id": 1, "subject": "a", "date": 20240105}\n'
                                             b'{"id": 2, "subject": "b", "date": true}\n')
    source = SourceFile(path, OnError.stop)
    assert [q.dated for q in source.check([])] == [JAN_5, None]
    assert source.date_warnings == [f"{path}:2: date True is a boolean, not a date"]


@pytest.mark.parametrize(("record", "message"), [
    ({"id": ["a"], "subject": "s"}, "'id' is an array; expected a string or an integer"),
    ({"id": {"a": 1}, "subject": "s"}, "'id' is an object; expected a string or an integer"),
    ({"id": "1", "title": 5}, "'title' is a number; expected a string"),
    ({"id": "1", "subject": "s", "body": {"text": "b"}}, "'body' is an object; expected a string"),
    ({"id": "1", "subject": "s", "x": {"k": 1, "k ": 2}}, None),  # distinct keys, nested
])
def test_json_ids_and_texts_must_be_strings(tmp_path, record, message):
    path = write_bytes(tmp_path / "q.jsonl", json.dumps(record).encode() + b"\n")
    if message is None:
        assert read(path)[0]
    else:
        with pytest.raises(DataError, match=rf"q\.jsonl:1: {re.escape(message)}"):
            read(path)


def test_a_key_repeated_in_nested_metadata_is_refused(tmp_path):
    path = write_bytes(tmp_path / "q.jsonl", b'{"id": "1", "subject": "s", "x": {"k": 1, "k": 2}}\n')
    with pytest.raises(DataError, match=r"q\.jsonl:1: key 'k' appears twice in one object"):
        read(path)


def test_null_subject_or_body_is_no_text(tmp_path):
    path = write_bytes(tmp_path / "q.jsonl", b'{"id": 7, "subject": null, "body": "b"}\n')
    (question,) = read(path)[0]
    assert (question.external_id, question.subject, question.body) == ("7", "", "b")


def test_categories_are_compared_trimmed_and_case_folded():
    assert category_key("  Stra\u00dfe ") == category_key("STRASSE") == "strasse"
    assert category_key("Cafe\u0301") == category_key("CAF\u00c9")  # NFC
    assert category_key(["a"]) is None and category_key("  ") is None and category_key(None) is None
