"""Trust at the command line: no wrong advice, no traceback, no secret and no terminal control
sequence in what a command prints, whatever the input (issue 40).

Each test is marked ``reliability`` and becomes a row of docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import unicodedata
from pathlib import Path

import pytest
from helpers import (
    ROOT,
    SECRET,
    assert_one_line_error,
    collection,
    index,
    invoke,
    listing,
    make_tiny_model,
    own_database,
    read_only,
    readable_index,
    run_cli,
    search_hits,
    search_ids,
    write_jsonl,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from askalike.app.safe_text import json_line, printable
from askalike.core.cqa_questions import read_cqa_xml
from askalike.indexer.directory import check_index
from askalike.indexer.layout import LOCK_FILE, index_lock
from askalike.indexer.manifest import read_manifest
from askalike.indexer.store import Store

EVIL = "\x1b]0;pwned\x07\x1b[2J\u009b31m\u202eevil"  # set the title, clear the screen, CSI, bidi


@pytest.fixture
def built(tmp_path, tiny_model) -> tuple[Path, Path]:
    """An index of 30 questions (its own SQLite file) and its source."""
    source = write_jsonl(tmp_path / "q.jsonl", collection(30))
    index(source, tmp_path / "index", tiny_model)
    return tmp_path / "index", source


def assert_one_error_line(stderr: bytes, text: str) -> None:
    lines = [line for line in stderr.decode().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and text in lines[0], stderr


# ------------------------------------------------------------------ terminal escape sequences

def _store_execute(index_dir: Path, statement: str, *values: object) -> None:
    with sqlite3.connect(own_database(index_dir).removeprefix("sqlite:///")) as connection:
        connection.execute(statement, values)


@pytest.fixture
def evil(built) -> Path:
    """``built`` with q3's subject and source holding terminal control sequences and markup, as
    a database written by another program (or an older askalike) may."""
    index_dir, _ = built
    _store_execute(index_dir, "UPDATE questions SET subject = ? WHERE external_id = 'q3'", f"[/x] {EVIL}")
    _store_execute(index_dir, "UPDATE questions SET source = ? WHERE external_id = 'q3'",
                   f"/data/{EVIL}.csv")
    return index_dir


def _hostile_text_free(output: str) -> None:
    assert not {"\x1b", "\x07", "\u009b", "\u202e"} & set(output), repr(output)


@pytest.mark.reliability("terminal control sequences (set the window title, clear the screen, C1 "
                         "CSI, bidi override) and Rich markup in a stored subject, a source name "
                         "and the query, for `search` (table and JSON)",
                         "the table shows them escaped (\\x1b...), never writes them raw; JSON "
                         "keeps the exact text, escaped")
def test_control_sequences_are_escaped_in_the_table(evil, tiny_model):
    result = invoke("search", f"how do i find a good visa {EVIL}", "--index", evil, "-k", "30")
    assert result.exit_code == 0, result.output
    _hostile_text_free(result.stdout)
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x9b31m\\u202eevil" in result.stdout.replace("\n", "")
    assert "[/x]" in result.stdout
    as_json = invoke("search", "how do i find a good visa", "--index", evil, "-k", "30", "--json")
    hits = {hit["id"]: hit for hit in search_hits(as_json.stdout)}
    assert hits["q3"]["subject"] == f"[/x] {EVIL}" and "\x1b" not in as_json.stdout
    info = invoke("index-info", "--index", evil)  # source names are the table's row names
    assert info.exit_code == 0 and "\\x1b" in info.stdout
    _hostile_text_free(info.stdout)


ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(text=ANY_TEXT)
def test_printable_and_json_lines_leave_nothing_a_terminal_acts_on(text):
    """Any text, lone surrogates included: ``printable`` keeps only newlines and tabs of the
    control characters, ``json_line`` none, and the JSON still reads back as the same text."""
    shown = printable(text)
    assert all(char in "\n\t" or not _acted_on(char) for char in shown)
    line = json_line({"text": text})
    assert not any(_acted_on(char) for char in line) and json.loads(line) == {"text": text}


def _acted_on(char: str) -> bool:
    return (unicodedata.category(char) in ("Cc", "Cs")
            or "\u202a" <= char <= "\u202e" or "\u2066" <= char <= "\u2069")


@pytest.mark.reliability("terminal control sequences in a stored subject and source, in the TUI "
                         "(results table, detail pane)", "shown escaped, never written raw")
@pytest.mark.slow
def test_control_sequences_are_escaped_in_the_tui(evil):
    import asyncio

    from textual.widgets import DataTable

    from askalike.app.tui import DEBOUNCE_S, SearchApp
    from askalike.retrieval.searcher import Searcher

    async def shown() -> tuple[str, str]:
        app = SearchApp(lambda: Searcher(evil), k=30, collapse=False)  # q3 listed, not folded
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press(*"how do i find a good visa")
            await pilot.pause(DEBOUNCE_S + 0.1)
            await app.workers.wait_for_complete()
            await pilot.pause()
            table = app.query_one(DataTable)
            row = next(i for i, hit in enumerate(app.results) if hit.external_id == "q3")
            table.move_cursor(row=row)
            await pilot.pause()
            cells = " ".join(str(cell) for cell in table.get_row_at(row))
            return cells, str(app.query_one("#detail-text").render())

    cells, detail = asyncio.run(shown())
    for text in (cells, detail):
        _hostile_text_free(text)
        assert "\\x1b]0;pwned" in text and "[/x]" in text


# ------------------------------------------------------------------ credentials

@pytest.mark.reliability("a password holding `@` and `:` in the `--db` URL (`bob:pw@x:y@host`), "
                         "and one in the query string (`?password=`), for every command that "
                         "takes --db", "exit 2, one line; no part of the password is printed")
@pytest.mark.parametrize("url", [f"postgresql+psycopg://bob:{SECRET}@x:{SECRET}@127.0.0.1:99999/db",
                                 f"postgresql+psycopg://bob:pw@{SECRET}@127.0.0.1:5432/db",
                                 f"postgresql+psycopg://bob@127.0.0.1:99999/db?password={SECRET}",
                                 f"nosuchdb://bob:{SECRET}@host/db?sslpassword={SECRET}"])
def test_no_part_of_a_password_is_printed(built, url):
    index_dir, source = built
    for command in (["search", "visa"], ["index", source], ["delete", "q1"], ["check"],
                    ["check", "--repair"], ["index-info"]):
        assert_one_line_error(invoke(*command, "--index", index_dir, "--db", url), r"\*\*\*")


@pytest.mark.reliability("an index on PostgreSQL reached by a URL with a password, then "
                         "`index --json`, `index-info` and the manifest",
                         "the password is in none of them")
def test_a_password_is_never_recorded_or_reported(tmp_path, tiny_model, postgres_url):
    with_password = postgres_url.replace("@", f":{SECRET}@", 1)  # trust auth: accepted, unused
    source = write_jsonl(tmp_path / "q.jsonl", collection(5))
    report = index(source, tmp_path / "index", tiny_model, "--db", with_password)
    assert SECRET not in json.dumps(report)
    assert SECRET not in (tmp_path / "index" / "manifest.json").read_text()
    info = invoke("index-info", "--index", tmp_path / "index", "--db", with_password, "--json")
    assert info.exit_code == 0 and SECRET not in info.stdout


# ------------------------------------------------------------------ undecodable input

@pytest.mark.reliability("bytes that are not UTF-8 in a command's text: {case}",
                         "exit 2, one line naming the option and asking for UTF-8")
@pytest.mark.parametrize(("case", "args", "name"), [
    ("the query of `search`", ["search", "caf\udce9"], "QUERY"),
    ("`search --category`", ["search", "visa", "--category", "\udcff"], "--category"),
    ("`search --source`", ["search", "visa", "--source", "a\udcffb.csv"], "--source"),
    ("`--db`", ["search", "visa", "--db", "sqlite:///\udcff"], "--db"),
    ("the ids of `delete`", ["delete", "q\udcff"], "IDS"),
    ("`similar`'s first text", ["similar", "\udcff\udcfe", "b"], "FIRST"),
])
def test_undecodable_text_is_refused(built, case, args, name):
    index_dir, _ = built
    extra = ["--index", index_dir] if args[0] != "similar" else []
    assert_one_line_error(invoke(*args, *extra),
                          rf"{name} '[^']*\\x[0-9a-f]{{2}}[^']*' is not valid UTF-8: give it in UTF-8")


@pytest.mark.reliability("a Latin-1 query as a real command-line argument (`$'caf\\xe9'`), and "
                         "Latin-1 text piped into `search`", "exit 2, one line (the argument, or "
                         "stdin and its line); no traceback")
def test_undecodable_bytes_from_the_shell_and_a_pipe(built):
    index_dir, _ = built
    argument = run_cli("search", b"caf\xe9", "--index", index_dir)
    assert argument.returncode == 2
    assert_one_error_line(argument.stderr, "QUERY 'caf\\xe9' is not valid UTF-8")
    piped = invoke("search", "--index", index_dir, input=b"visa\ncaf\xe9 au lait\n")
    assert_one_line_error(piped, r"stdin:2: not valid UTF-8 at byte 3")


# ------------------------------------------------------------------ directories that cannot be written

@pytest.mark.reliability("a read-only index directory (`chmod -R a-w`, run as uid 65534) for "
                         "`index`, `delete` and `check --repair`, and a new index in a read-only "
                         "directory", "exit 2: the index directory cannot be written; nothing changes")
@pytest.mark.slow
def test_writing_to_a_read_only_index_directory(tiny_model):
    with readable_index(tiny_model, 20) as (index_dir, source, model):
        read_only(index_dir.parent)
        before = listing(index_dir)
        new = index_dir.parent / "new" / "index"
        for command in (["index", source, "--model", model, "--index", index_dir],
                        ["delete", "q1", "--index", index_dir], ["check", "--repair", "--index", index_dir],
                        ["index", source, "--model", model, "--index", new]):
            result = run_cli(*command, as_nobody=True, env={**os.environ, "HOME": str(index_dir.parent)})
            assert result.returncode == 2
            assert_one_error_line(result.stderr, "cannot write to the index directory (Permission denied)")
        assert listing(index_dir) == before
        assert not new.parent.exists()


@pytest.mark.reliability("`--index` under /proc (a directory that cannot be made)",
                         "exit 2: cannot write to the index directory")
def test_an_index_directory_that_cannot_be_made(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection(3))
    result = invoke("index", source, "--model", tiny_model, "--index", "/proc/askalike/index")
    assert_one_line_error(result, r"/proc/askalike/index: cannot write to the index directory")


@pytest.mark.reliability("`delete` on a directory holding no index (missing, or empty)",
                         "exit 2: no index here; no directory or lock file is created")
def test_delete_on_a_missing_index_creates_nothing(tmp_path):
    assert_one_line_error(invoke("delete", "q1", "--index", tmp_path / "missing"), r"no index here")
    assert not (tmp_path / "missing").exists()
    (tmp_path / "empty").mkdir()
    assert_one_line_error(invoke("delete", "q1", "--index", tmp_path / "empty"), r"no index here")
    assert list((tmp_path / "empty").iterdir()) == []


# ------------------------------------------------------------------ output that cannot be written

@pytest.mark.reliability("a full disk under the results (`search --json`, `index-info --json`, "
                         "the search table: stdout is /dev/full)",
                         "exit 2, one line: cannot write the output; no traceback")
@pytest.mark.parametrize("command", [["search", "visa", "--json"], ["search", "visa"],
                                     ["index-info", "--json"]])
def test_a_full_disk_under_the_output(built, command):
    index_dir, _ = built
    with open("/dev/full", "w") as full:
        result = run_cli(*command, "--index", index_dir, stdout=full, stderr=subprocess.PIPE)
    assert result.returncode == 2
    assert_one_error_line(result.stderr, "cannot write the output to stdout (No space left on device)")


# ------------------------------------------------------------------ wrong cause, wrong advice

@pytest.mark.reliability("`delete --source ./q.jsonl` (a relative path, as search accepts it)",
                         "the question of that source is deleted")
def test_delete_takes_a_source_as_search_does(built, monkeypatch):
    index_dir, source = built
    monkeypatch.chdir(source.parent)
    assert search_ids(index_dir, "visa", 30, "--source", "./q.jsonl")
    result = invoke("delete", "q4", "--source", "./q.jsonl", "--index", index_dir, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"deleted": 1, "excluded": 0}
    assert_one_line_error(invoke("delete", "q5", "--source", "other.jsonl", "--index", index_dir),
                          r"no question with id 'q5' .* from other\.jsonl; nothing deleted")


@pytest.mark.reliability("`check` while an `index` run holds the directory's lock, with the "
                         "database ahead of the FAISS file as mid-run",
                         "exit 2: an index run is in progress (its pid), check again later; no "
                         "repair advised. A killed run's stale pid does not count")
def test_check_during_a_live_index_run(built):
    index_dir, _ = built
    with Store(own_database(index_dir)) as store:  # as mid-run: the database is ahead
        store.delete(store.ids()[:3])
    with index_lock(index_dir):
        result = invoke("check", "--index", index_dir)
        assert_one_line_error(result, rf"is being written by askalike pid {os.getpid()}: check it "
                                      "again when that run has finished")
        assert "repair" not in result.stderr
    (index_dir / LOCK_FILE).write_text("askalike pid 999999")  # a killed run's, lock not held
    after = invoke("check", "--index", index_dir)
    assert after.exit_code == 1 and "check --repair" in after.stdout


@pytest.mark.reliability("a relative `--db sqlite:///rel.sqlite3`, then a search from another "
                         "directory without --db", "the URL is recorded absolute: the search answers")
def test_a_relative_sqlite_url_is_recorded_absolute(tmp_path, tiny_model, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    source = write_jsonl(tmp_path / "q.jsonl", collection(10))
    index(source, tmp_path / "index", tiny_model, "--db", "sqlite:///rel.sqlite3")
    monkeypatch.chdir(tmp_path)
    assert read_manifest(tmp_path / "index").database == f"sqlite:///{work.resolve() / 'rel.sqlite3'}"
    assert len(search_ids(tmp_path / "index", "visa", 3)) == 3
    assert check_index(tmp_path / "index").ok


@pytest.mark.reliability("`score` with a NaN or infinite score, and with an empty gold file",
                         "exit 2 naming the file and line (NaN), or calling the gold file empty")
def test_score_refuses_nan_and_names_an_empty_gold_file(tmp_path):
    gold = tmp_path / "gold.relevancy"
    gold.write_text("Q1\tQ1_R1\t1\t1.0\ttrue\nQ1\tQ1_R2\t2\t0.5\tfalse\n")
    for bad in ("nan", "inf", "-Infinity"):
        predictions = tmp_path / "system.pred"
        predictions.write_text(f"Q1\tQ1_R1\t1\t0.9\ttrue\nQ1\tQ1_R2\t2\t{bad}\ttrue\n")
        assert_one_line_error(invoke("score", gold, predictions),
                              rf"system\.pred:2: score is '{bad}': give a finite number")
    empty = tmp_path / "empty.relevancy"
    empty.write_text("")
    assert_one_line_error(invoke("score", empty, gold), r"empty\.relevancy: empty: no gold lines")


@pytest.mark.reliability("`ASKALIKE_DB_TIMEOUT` set to {value}", "exit 2 naming the variable")
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "1e300", "soon"])
def test_an_unusable_lock_timeout_is_refused(built, value):
    index_dir, source = built
    result = invoke("index", source, "--index", index_dir, env={"ASKALIKE_DB_TIMEOUT": value})
    assert_one_line_error(result, rf"ASKALIKE_DB_TIMEOUT='{value}': ")


@pytest.mark.reliability("a SemEval XML input whose original question holds several `<Thread>`s, "
                         "for `rerank`", "every thread is a candidate, none dropped")
def test_every_thread_of_an_original_question_is_kept(tmp_path, tiny_model):
    threads = "".join(f'<Thread THREAD_SEQUENCE="Q1_R{i}"><RelQuestion RELQ_ID="Q1_R{i}" '
                      f'RELQ_RANKING_ORDER="{i}"><RelQSubject>s{i}</RelQSubject><RelQBody>visa {i}'
                      "</RelQBody></RelQuestion></Thread>" for i in (1, 2, 3))
    source = tmp_path / "input.xml"
    source.write_text(f'<xml><OrgQuestion ORGQ_ID="Q1"><OrgQSubject>visa</OrgQSubject><OrgQBody>how'
                      f"</OrgQBody>{threads}</OrgQuestion></xml>")
    (question,) = read_cqa_xml(source)
    assert [related.id for related in question.related] == ["Q1_R1", "Q1_R2", "Q1_R3"]
    out = tmp_path / "run.pred"
    result = invoke("rerank", source, "--out", out, "--model", tiny_model, "--json")
    assert result.exit_code == 0, result.output
    assert len(out.read_text().splitlines()) == 3


@pytest.mark.reliability("`similar` of texts whose words the model knows none of (unknown "
                         "symbols, zero-width characters): DAN ({model})",
                         "exit 2: the model knows none of the words, not 5.0 identical")
@pytest.mark.parametrize("model", ["tiny", "models/accurate (word pieces)"])
def test_similar_of_unknown_words_is_refused(tiny_model, model):
    spec = tiny_model if model == "tiny" else ROOT / "models" / "accurate"
    for first, second in (("☃☃☃", "✈✈"), ("\u200b", "\u200c")):
        assert_one_line_error(invoke("similar", first, second, "--model", spec),
                              r"text 1: .* knows none of its words")
    known = invoke("similar", "how do i renew my visa", "☃", "--model", spec)
    assert_one_line_error(known, r"text 2: ")


@pytest.mark.reliability("searching after the index's model directory was changed in place "
                         "(other weights at the recorded path)",
                         "exit 2 naming the two encoders and how to fix it with `askalike index`; "
                         "never advising an option `search` does not have")
def test_a_changed_model_gets_advice_search_can_follow(tmp_path, tiny_model):
    model = shutil.copytree(tiny_model, tmp_path / "model")
    index(write_jsonl(tmp_path / "q.jsonl", collection(10)), tmp_path / "index", model)
    shutil.rmtree(model)
    make_tiny_model(model, seed=3)
    result = invoke("search", "visa", "--index", tmp_path / "index")
    assert_one_line_error(result, r"different encoder: restore the weights .*`askalike index SOURCES "
                                  r"--model MODEL --index NEWDIR`")
    assert "search with --model" not in result.stderr


@pytest.mark.reliability("the index's model directory moved: search, an index run, then "
                         "`askalike index --model NEWPATH` (no sources); and a model with other weights",
                         "exit 2 naming the missing model and the fix; the fix finds the model by its "
                         "weights, says so and records the new place (manifest and database); "
                         "other weights are refused and change nothing")
def test_a_moved_model_is_found_again_by_its_weights(tmp_path, tiny_model):
    model = shutil.copytree(tiny_model, tmp_path / "models" / "mine")
    source = write_jsonl(tmp_path / "q.jsonl", collection(10))
    index_dir = tmp_path / "index"
    index(source, index_dir, model)
    expected = search_ids(index_dir, "cheap car", 3)
    moved = model.rename(tmp_path / "moved")
    for command in (["search", "cheap car"], ["index", source]):
        assert_one_line_error(invoke(*command, "--index", index_dir),
                              rf"its model {model} is missing \(moved or deleted\?\); if it moved, "
                              rf"record the new place with `askalike index --model NEWPATH --index "
                              rf"{index_dir}`")
    result = invoke("index", "--model", moved, "--index", index_dir, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["model_moved_from"] == str(model) and report["model"] == str(moved.resolve())
    assert f"the index's model is now {moved.resolve()} (the same weights; recorded before at {model})" \
        in result.stderr
    assert search_ids(index_dir, "cheap car", 3) == expected
    assert read_manifest(index_dir).encoder.model == str(moved.resolve())
    with Store(own_database(index_dir), read_only=True) as store:
        assert store.encoder().model == str(moved.resolve())
    assert check_index(index_dir).ok
    other = make_tiny_model(tmp_path / "other", seed=3)
    assert_one_line_error(invoke("index", "--model", other, "--index", index_dir), r"different encoder")
    assert read_manifest(index_dir).encoder.model == str(moved.resolve())


@pytest.mark.reliability("`askalike index` without sources: on a new directory, and with --prune",
                         "exit 2: give the sources / --prune would remove everything; nothing created "
                         "or removed")
def test_index_without_sources(built, tmp_path):
    index_dir, _ = built
    assert_one_line_error(invoke("index", "--index", tmp_path / "new"),
                          r"no index here yet; give the SOURCES")
    assert not (tmp_path / "new").exists()
    assert_one_line_error(invoke("index", "--prune", "--index", index_dir),
                          r"--prune without SOURCES would remove every question")
    assert len(search_ids(index_dir, "visa", 50)) == 30
