"""Trust in what an index stores: dates filtered as dates, categories as names, vectors verified
(and repaired by embedding them again), one file counted once, source files that are not files,
and prunes that would empty the index.

Each test is marked ``reliability`` and becomes a row of docs/reliability.md; each asserts that
what was stored before is still there where nothing was meant to change.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import (
    as_first_schema,
    assert_one_line_error,
    collection,
    index,
    invoke,
    own_database,
    search_ids,
    stored_state,
    write_jsonl,
)

from askalike.app.commands import index as index_commands
from askalike.core.loader import load_encoder
from askalike.indexer.directory import check_index
from askalike.indexer.store import Store

# ------------------------------------------------------------------ dates and categories

DATED = ("id,subject,body,category,date\n"
         "iso,visa fees,how much is a visa?, Visas ,2024-01-05\n"
         "written,visa queue,how long is the queue?,VISAS,5 Jan 2024\n"
         "compact,visa office,where is the office?,visas,20240105\n"
         "slashes,visa photo,what photo do they want?,Cars,10/01/2024\n"
         "late,visa renewal,when to renew?,cars,2024-01-05T23:59:59Z\n"
         "never,visa soon,is it soon?,cars,soon\n")


def dated_ids(index_dir: Path, *filters: str) -> list[str]:
    return sorted(search_ids(index_dir, "visa", 50, *filters))


@pytest.fixture
def dated(tmp_path, tiny_model) -> tuple[Path, Path, dict]:
    """An index of the DATED questions, their source and the run's report."""
    source = tmp_path / "dated.csv"
    source.write_text(DATED)
    return tmp_path / "index", source, index(source, tmp_path / "index", tiny_model)


@pytest.mark.reliability("`--since`/`--until` over dates written `2024-01-05`, `5 Jan 2024`, `20240105` "
                         "and `10/01/2024` (day or month first?), and a date that is not one",
                         "dates parsed when indexed and compared as dates; the ambiguous and the bad "
                         "one named in the run's summary, stored undated until `--date-format` decides")
def test_dates_are_compared_as_dates(dated, tiny_model):
    index_dir, source, report = dated
    assert report["undated"] == 2 and len(report["warnings"]) == 2
    assert report["warnings"][0] == (f"{source}:5: date '10/01/2024' is ambiguous (10 January or 1 October "
                                     "2024): give --date-format dmy or mdy")
    assert report["warnings"][1].startswith(f"{source}:7: date 'soon' is not a date (expected YYYY-MM-DD")
    one_day = ["--since", "2024-01-05", "--until", "2024-01-05"]
    assert dated_ids(index_dir, *one_day) == ["compact", "iso", "late", "written"]
    assert dated_ids(index_dir, "--since", "Jan 6, 2024") == []  # the undated pass no date filter
    # an index built without --date-format reads an ambiguous filter date as nothing
    assert_one_line_error(invoke("search", "visa", "--index", index_dir, "--until", "10/01/2024"),
                          r"until '10/01/2024' is ambiguous .*give --date-format dmy or mdy")

    day_first = index(source, index_dir, tiny_model, "--date-format", "dmy")
    assert day_first["metadata_updated"] == 1 and day_first["undated"] == 1
    assert dated_ids(index_dir, "--since", "10/01/2024", "--date-format", "dmy") == ["slashes"]
    assert dated_ids(index_dir, "--until", "01/05/2024", "--date-format", "mdy") == [
        "compact", "iso", "late", "written"]
    # one built with it reads its filters' dates as it read the file's (issue 54)
    assert dated_ids(index_dir, "--since", "10/01/2024") == ["slashes"]


@pytest.mark.reliability("`--category` with a category written ` Visas `, `VISAS` and `visas` in "
                         "the source", "categories compared trimmed and case-folded: all three match")
def test_categories_are_compared_as_names(dated):
    index_dir, _, _ = dated
    assert dated_ids(index_dir, "--category", "visas ") == ["compact", "iso", "written"]
    assert dated_ids(index_dir, "--category", "CARS") == ["late", "never", "slashes"]


@pytest.mark.reliability("an index built by the askalike before dates were parsed (schema 1), then "
                         "a search by date, `check`, `check --repair` and the search again",
                         "the search without filters answers, by date it is refused with the command "
                         "that upgrades; check reports it; the repair upgrades, and the search answers")
def test_an_index_of_the_first_schema_is_upgraded(dated):
    index_dir, _, _ = dated
    as_first_schema(own_database(index_dir))
    before = stored_state(index_dir, own_database(index_dir))
    assert len(dated_ids(index_dir)) == 6
    assert_one_line_error(invoke("search", "visa", "--index", index_dir, "--since", "2024-01-05"),
                          r"built by an older askalike.*run `askalike index` with its sources, or "
                          "`askalike check --repair`")
    checked = invoke("check", "--index", index_dir, "--json")
    assert checked.exit_code == 1 and "schema version 1" in json.loads(checked.stdout)["problems"][0]
    assert invoke("check", "--repair", "--index", index_dir).exit_code == 0
    assert dated_ids(index_dir, "--since", "2024-01-05", "--until", "2024-01-05") == [
        "compact", "iso", "late", "written"]
    assert stored_state(index_dir, own_database(index_dir)) == before


# ------------------------------------------------------------------ damaged vectors

def damage_vector_on_disk(database: Path, external_id: str) -> None:
    """Flip the exponent of one stored value of a question's vector inside the SQLite file, as
    a bad disk would: SQLite's integrity check still passes."""
    with sqlite3.connect(database) as connection:
        (blob,) = connection.execute("SELECT vector FROM questions WHERE external_id = ?",
                                     (external_id,)).fetchone()
    content = bytearray(database.read_bytes())
    where = content.find(blob)
    assert where > 0 and content.find(blob, where + 1) < 0
    content[where + 3] = 0x60  # the sign and exponent byte of the first value: about 1e19
    database.write_bytes(bytes(content))
    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.reliability("bytes of one stored vector flipped inside the SQLite file (its norm then "
                         "about 1e19; SQLite's integrity check still ok), then check, an index run that "
                         "rebuilds, search and `check --repair`",
                         "check names the question and exits 1; the rebuild refuses, saying to "
                         "repair; a search scores from the index file's own checksum-verified copy, "
                         "never the damaged row; the repair embeds that question again (only it) and "
                         "the index is consistent; the vector is never indexed")
def test_a_damaged_vector_is_found_and_embedded_again(built, tiny_model):
    index_dir, source = built
    manifest = (index_dir / "manifest.json").read_text()
    damage_vector_on_disk(index_dir / "askalike.sqlite3", "q7")
    checked = invoke("check", "--index", index_dir, "--json")
    report = json.loads(checked.stdout)
    assert checked.exit_code == 1 and report["damaged"] == [
        f"'q7' of {source} (its bytes do not match their checksum)"]
    assert_one_line_error(invoke("index", source, "--index", index_dir, "--index-type", "hnsw"),
                          r"1 stored vectors are damaged \(the first: question 'q7' .*`askalike check "
                          "--repair` to embed them again")
    assert (index_dir / "manifest.json").read_text() == manifest  # nothing indexed from it
    # every question scored (k = all 200): q7's cosine comes from the FAISS file's own copy
    searched = invoke("search", "how do i renew my visa", "--index", index_dir, "--mode", "hybrid",
                      "-k", "200", "--json")
    assert searched.exit_code == 0, searched.output
    hits = {hit["id"]: hit["cosine"] for hit in json.loads(searched.stdout)["results"]}
    record = collection(200)[7]
    encoder = load_encoder(str(tiny_model))
    intact, query = encoder.encode([f"{record['subject']}\n\n{record['body']}", "how do i renew my visa"])
    assert hits["q7"] == pytest.approx(float(intact @ query), abs=1e-5)

    repaired = invoke("check", "--repair", "--index", index_dir, "--json")
    assert repaired.exit_code == 0 and json.loads(repaired.stdout)["reembedded"] == 1
    with Store(own_database(index_dir), read_only=True) as store:
        (row_id,) = [row for row, _, external_id in store.question_keys() if external_id == "q7"]
        np.testing.assert_allclose(store.vectors_of([row_id], intact.size)[row_id], intact, atol=1e-5)
    assert search_ids(index_dir, "where can i get a cheap pizza", 1) != ["q7"]
    assert check_index(index_dir).ok


# ------------------------------------------------------------------ one file, one source

@pytest.mark.reliability("the indexed file reached through a hard link, indexed again (alone, and "
                         "beside its first path in one run)",
                         "one source: nothing stored twice, and the run says whose questions they are; "
                         "both paths in one run are refused")
def test_a_hard_link_is_the_same_source(built, tiny_model):
    index_dir, source = built
    link = source.parent / "elsewhere" / "link.jsonl"
    link.parent.mkdir()
    os.link(source, link)
    before = stored_state(index_dir, own_database(index_dir))
    report = index(link, index_dir, tiny_model)
    assert (report["added"], report["unchanged"], report["total"]) == (0, 200, 200)
    assert report["warnings"] == [f"{link} is the same file as {source} (a hard link, or another path to "
                                  "it), which is indexed: its questions are kept as that source's"]
    assert stored_state(index_dir, own_database(index_dir)) == before
    assert_one_line_error(invoke("index", source, link, "--index", index_dir),
                          rf"{link}: the same file as {source}: name each source once")


@pytest.mark.reliability("a copy of the indexed file in another folder, indexed into the same index",
                         "indexed (it is another file), with a warning naming both files and how "
                         "to keep one (`--prune` with the sources to keep)")
def test_a_copy_of_an_indexed_file_is_said(built, tiny_model):
    index_dir, source = built
    copy = source.parent / "copy" / source.name
    copy.parent.mkdir()
    shutil.copy(source, copy)
    report = index(copy, index_dir, tiny_model)
    assert report["added"] == 200 and report["warnings"] == [
        f"{copy}: 200 of its 200 questions have the ids and texts of {source}'s, which is indexed (a "
        "copy of that file?): indexing both keeps those questions twice; to keep one file's, run "
        "`askalike index` with the sources to keep and --prune"]
    kept = index(copy, index_dir, tiny_model, "--prune", "--yes")
    assert (kept["removed"], kept["total"], kept["warnings"]) == (200, 200, [])


@pytest.mark.reliability("two sources with some ids in common (in one run, and against an indexed one)",
                         "both indexed; the run names the ids they share (a delete of one then "
                         "needs --source); text files, whose ids are line numbers, are not compared")
def test_ids_shared_between_sources_are_said(built, tmp_path, tiny_model):
    index_dir, source = built
    records = [dict(r, subject=r["subject"] + " again") for r in collection(4)]
    other = write_jsonl(tmp_path / "other.jsonl", records)
    third = write_jsonl(tmp_path / "third.jsonl", records[2:])
    report = index(other, index_dir, tiny_model, third)
    assert report["warnings"] == [
        f"{other}: 4 ids are also ids of {source} (e.g. 'q0', 'q1', 'q2'): `askalike delete` needs "
        "--source to tell them apart",
        f"{third}: 2 ids are also ids of {source} (e.g. 'q2', 'q3'): `askalike delete` needs --source "
        "to tell them apart",
        f"{third}: 2 ids are also ids of {other} (e.g. 'q2', 'q3'): `askalike delete` needs --source "
        "to tell them apart"]
    lines = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for number, path in enumerate(lines):
        path.write_text(f"first question {number}\nsecond question {number}\n")
    assert index(lines[0], index_dir, tiny_model, lines[1])["warnings"] == []


# ------------------------------------------------------------------ sources that are not files

def _not_utf8_name(directory: Path) -> Path:
    path = Path(os.fsdecode(os.fsencode(directory) + b"/caf\xe9.jsonl"))
    write_jsonl(path, collection(2))
    return path


@pytest.mark.reliability("a source that is {case}",
                         "exit 2, one line saying what it is; the index kept")
@pytest.mark.parametrize(("case", "make", "message"), [
    ("a directory", lambda d: (d / "folder.jsonl").mkdir() or d / "folder.jsonl",
     r"folder\.jsonl: is a directory, not a file: give the files in it"),
    ("a named pipe (FIFO)", lambda d: os.mkfifo(d / "pipe.jsonl") or d / "pipe.jsonl",
     r"pipe\.jsonl: is a named pipe \(FIFO\), not a file: .*save it to a file first"),
    ("a symbolic link to itself", lambda d: os.symlink("loop.jsonl", d / "loop.jsonl") or d / "loop.jsonl",
     r"loop\.jsonl: cannot open: a loop of symbolic links"),
    ("a file whose name is not valid UTF-8", _not_utf8_name,
     r"caf\\xe9\.jsonl: the file name is not valid UTF-8: rename the file"),
])
def test_a_source_that_is_not_a_file(built, tmp_path, case, make, message):
    index_dir, _ = built
    before = stored_state(index_dir, own_database(index_dir))
    assert_one_line_error(invoke("index", make(tmp_path), "--index", index_dir), message)
    assert stored_state(index_dir, own_database(index_dir)) == before


# ------------------------------------------------------------------ prunes that would empty the index

EMPTY_SOURCES = {
    "EMPTY.jsonl": b"",
    "blank.txt": b"\n\n",
    "nothing.jsonl.gz": gzip.compress(b"", mtime=0),
    "header_only.csv": b"id,subject,body\n",
}


@pytest.mark.reliability("`askalike index {name} --prune` on an index of 200 questions, the source "
                         "holding no question", "exit 2: the sources hold no questions; nothing removed")
@pytest.mark.parametrize("name", sorted(EMPTY_SOURCES))
def test_a_prune_from_empty_sources_is_refused(built, tmp_path, name):
    index_dir, _ = built
    empty = tmp_path / name
    empty.write_bytes(EMPTY_SOURCES[name])
    before = stored_state(index_dir, own_database(index_dir))
    assert_one_line_error(invoke("index", empty, "--index", index_dir, "--prune", "--yes"),
                          "the sources hold no questions: --prune would remove all 200 questions of "
                          "the index; nothing was changed")
    assert_one_line_error(invoke("index", empty, "--index", index_dir, "--prune", "--dry-run"),
                          "the sources hold no questions")
    assert stored_state(index_dir, own_database(index_dir)) == before


@pytest.mark.reliability("`askalike index --prune` that would remove 190 of the 200 questions: without "
                         "a terminal and without `--yes`; at a terminal, answered no, then yes; with `--yes`",
                         "refused (exit 2) and declined with nothing removed; confirmed, the 190 go")
def test_a_large_prune_is_confirmed_first(built, tiny_model, monkeypatch):
    index_dir, source = built
    write_jsonl(source, collection(10))
    before = stored_state(index_dir, own_database(index_dir))
    assert_one_line_error(invoke("index", source, "--index", index_dir, "--prune"),
                          r"--prune would remove 190 of the 200 questions in the index \(more than 50%\): "
                          "pass --yes to confirm; nothing was changed")
    monkeypatch.setattr(index_commands, "sys", SimpleNamespace(stdin=SimpleNamespace(isatty=lambda: True)))
    declined = invoke("index", source, "--index", index_dir, "--prune", "--json", input="n\n")
    assert declined.exit_code == 2
    assert "--prune would remove 190 of the 200 questions in the index. Remove them? [y/N]" in declined.stderr
    assert declined.stderr.endswith("error: --prune would remove 190 of the 200 questions in the index: not "
                                    "confirmed; nothing was changed\n")
    assert stored_state(index_dir, own_database(index_dir)) == before
    confirmed = invoke("index", source, "--index", index_dir, "--prune", "--json", input="y\n")
    report = json.loads(confirmed.stdout.splitlines()[-1])  # the runner echoes the answer first
    assert confirmed.exit_code == 0 and report["removed"] == 190
    write_jsonl(source, collection(6))  # 4 of 10: under half, not asked
    monkeypatch.undo()
    assert index(source, index_dir, tiny_model, "--prune")["removed"] == 4
