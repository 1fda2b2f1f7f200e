"""What `askalike index` stores and how later runs treat it: text kept as given, ids made from
text, the index type asked for, directories that hold no index, sources with one file name."""

from __future__ import annotations

import json

import pytest
from helpers import assert_one_line_error, collection, index, invoke, write_jsonl

from askalike.indexer.directory import check_index
from askalike.indexer.store import Store


def _stored(index_dir, source) -> dict:
    with Store(f"sqlite:///{index_dir / 'askalike.sqlite3'}", read_only=True) as store:
        return store.questions_of(str(source.resolve()))


@pytest.mark.reliability("control characters in a question (ESC, BEL, C1 CSI, a bidi override) and "
                         "a NUL, indexed, then `show`, `search` (table) and `search --json`",
                         "the text is stored as given (but NUL, which no database keeps as text); "
                         "the table and `show` show it escaped (`\\x1b`), JSON as `\\u001b`")
def test_control_characters_are_stored_as_given_and_shown_escaped(tmp_path, tiny_model):
    subject = "visa \x1b[2J renewal\x07 \u009b1m \u202eevil"
    source = write_jsonl(tmp_path / "q.jsonl", [{"id": "c1", "subject": subject, "body": "a\x00b"},
                                                *collection(5)])
    index(source, tmp_path / "index", tiny_model)
    stored = _stored(tmp_path / "index", source)["c1"]
    assert (stored.subject, stored.body) == (subject, "ab")
    for args in (("show", "c1"), ("search", "visa renewal", "--mode", "dense")):
        shown = invoke(*args, "--index", tmp_path / "index", env={"COLUMNS": "200"})
        assert shown.exit_code == 0, shown.output
        assert "\x1b" not in shown.stdout and "\u009b" not in shown.stdout and "\u202e" not in shown.stdout
        assert "\\x1b[2J" in shown.stdout
    printed = invoke("search", "visa renewal", "--index", tmp_path / "index", "--json", "--mode", "dense")
    assert "\\u001b" in printed.stdout and "\\u009b" in printed.stdout and "\\u202e" in printed.stdout
    hit = next(h for h in json.loads(printed.stdout)["results"] if h["id"] == "c1")
    assert hit["subject"] == subject


@pytest.mark.reliability("a lone surrogate (`\\ud800`, half a UTF-16 pair) in a JSON Lines row, "
                         "indexed", "exit 2 naming the file and line; nothing stored; no traceback")
def test_a_lone_surrogate_is_a_bad_row(tmp_path, tiny_model):
    index(write_jsonl(tmp_path / "good.jsonl", collection(5)), tmp_path / "index", tiny_model)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "ok", "subject": "fine"}\n{"id": "s", "subject": "half \\ud800 a pair"}\n')
    result = invoke("index", bad, "--index", tmp_path / "index")
    assert_one_line_error(result, r"bad\.jsonl:2: the string 'half \\ud800 a pair' holds \\ud800, half "
                                  r"of a UTF-16 pair")
    assert check_index(tmp_path / "index").ok and _stored(tmp_path / "index", bad) == {}


@pytest.mark.reliability("two sources with one file name in different folders (`a/c200.csv`, "
                         "`b/c200.csv`), indexed in one run, then `index-info`, `search` and `show`",
                         "each named by its folder and file name (`a/c200.csv (20), b/c200.csv (20)`), "
                         "never twice `c200.csv`; `--source a/c200.csv` picks that one")
def test_sources_of_one_file_name_are_told_apart(tmp_path, tiny_model):
    rows = collection(40)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
    first = write_jsonl(tmp_path / "a" / "c200.jsonl", rows[:20])
    second = write_jsonl(tmp_path / "b" / "c200.jsonl", rows[20:])
    ran = invoke("index", first, second, "--model", tiny_model, "--index", tmp_path / "index")
    assert ran.exit_code == 0, ran.output
    assert "from a/c200.jsonl (20), b/c200.jsonl (20)" in ran.stdout
    info = invoke("index-info", "--index", tmp_path / "index")
    assert "2 sources: a/c200.jsonl (20), b/c200.jsonl (20)" in info.stdout
    table = invoke("search", "visa", "--index", tmp_path / "index", "--source", "b/c200.jsonl", "-k", "3",
                   env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "b/c200.jsonl" in table.stdout and "a/c200.jsonl" not in table.stdout
    shown = invoke("show", "q1", "--index", tmp_path / "index")
    assert "source a/c200.jsonl" in shown.stdout


def _interrupted_first_run(tmp_path, tiny_model, monkeypatch, *options: str):
    """A first run that stored its questions and was stopped before it wrote the FAISS file and
    the manifest (as Ctrl-C or kill -9 there leaves it)."""
    import askalike.indexer.build

    source = write_jsonl(tmp_path / "q.jsonl", collection(30))

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(askalike.indexer.build, "sync_vector_index", interrupted)
        result = invoke("index", source, "--model", tiny_model, "--index", tmp_path / "index", *options)
    assert result.exit_code != 0 and not (tmp_path / "index" / "manifest.json").exists()
    return source


@pytest.mark.reliability("a first `index --index-type hnsw` run interrupted after its commits, "
                         "before the FAISS file and the manifest; then the run again without "
                         "--index-type, or `check --repair`",
                         "the index built is hnsw, as the uninterrupted run builds it (never flat)")
@pytest.mark.parametrize("finish", ["index", "check --repair"])
def test_an_interrupted_run_keeps_the_index_type_asked_for(tmp_path, tiny_model, monkeypatch, finish):
    source = _interrupted_first_run(tmp_path, tiny_model, monkeypatch, "--index-type", "hnsw")
    if finish == "index":
        report = index(source, tmp_path / "index", tiny_model)
        assert report["index_type"] == "hnsw" and "interrupted" in report["index_type_reason"]
    else:
        assert invoke("check", "--repair", "--index", tmp_path / "index").exit_code == 0
    info = json.loads(invoke("index-info", "--index", tmp_path / "index", "--json").stdout)
    assert info["index_type"] == "hnsw" and info["questions"] == 30
    again = index(source, tmp_path / "index", tiny_model)
    assert again["index_type"] == "hnsw" and again["index_type_reason"] == "the index's own type"


def _made_ids(tmp_path, rows, name="q.csv") -> list[str]:
    """The ids `index` makes for the rows (subject, body) of a CSV without an id column, in order."""
    path = tmp_path / name
    path.write_text("subject,body\n" + "".join(f"{s},{b}\n" for s, b in rows))
    from askalike.indexer.choices import OnError
    from askalike.indexer.sources import SourceFile

    return [q.external_id for q in SourceFile(path, OnError.stop).check([])]


@pytest.mark.reliability("a CSV without ids holding the subject `renew visa` with the body `how long`, "
                         "and `renew` with `visa how long` (one text, cut in two places), indexed in "
                         "one order and then the other",
                         "two ids (subject and body are hashed apart); each question keeps its id "
                         "whatever the order of the rows")
def test_made_ids_tell_where_subject_and_body_are_cut(tmp_path):
    rows = [("renew visa", "how long"), ("renew", "visa how long"), ("cheap cars", "where")]
    forward = _made_ids(tmp_path, rows)
    backward = _made_ids(tmp_path, rows[::-1], "reversed.csv")
    assert len(set(forward)) == 3 and forward == backward[::-1]


@pytest.mark.reliability("an index built by an older askalike from a CSV without ids (its ids made "
                         "from subject and body joined), indexed again by this one, then with --prune",
                         "each stored question takes its new id, vector kept: nothing added twice, "
                         "nothing embedded again, nothing pruned; the run says so")
def test_ids_made_the_former_way_are_renewed_not_added_again(tmp_path, tiny_model):
    import sqlite3

    from askalike.indexer.sources import former_made_id

    rows = [(f"question {n}", f"body {n}") for n in range(12)] + [("same", "text"), ("same", "text")]
    source = tmp_path / "q.csv"
    source.write_text("subject,body,category\n"
                      + "".join(f"{s},{b},c{n % 2}\n" for n, (s, b) in enumerate(rows)))
    index(source, tmp_path / "index", tiny_model)
    database = tmp_path / "index" / "askalike.sqlite3"
    seen: dict[str, int] = {}
    with sqlite3.connect(database) as connection:  # the ids an older askalike made
        stored = connection.execute("SELECT id, subject, body, vector FROM questions ORDER BY id").fetchall()
        for row_id, subject, body, _ in stored:
            connection.execute("UPDATE questions SET external_id = ? WHERE id = ?",
                               (former_made_id(subject, body, seen), row_id))
    planned = json.loads(invoke("index", source, "--index", tmp_path / "index", "--dry-run", "--json").stdout)
    assert (planned["renamed"], planned["added"]) == (14, 0)
    report = json.loads(invoke("index", source, "--index", tmp_path / "index", "--json").stdout)
    assert (report["renamed"], report["added"], report["reembedded"], report["total"]) == (14, 0, 0, 14)
    assert any("take the ids made now" in warning for warning in report["warnings"])
    with sqlite3.connect(database) as connection:
        after = connection.execute("SELECT id, external_id, vector FROM questions ORDER BY id").fetchall()
    assert [external_id for _, external_id, _ in after] == _made_ids(tmp_path, rows, "again.csv")
    assert [(row_id, vector) for row_id, _, vector in after] == [(row[0], row[3]) for row in stored]
    pruned = index(source, tmp_path / "index", tiny_model, "--prune")
    assert (pruned["removed"], pruned["renamed"], pruned["unchanged"]) == (0, 0, 14)
    assert check_index(tmp_path / "index").ok


@pytest.mark.reliability("`--index` naming a directory of other files (`/etc`, a folder holding a "
                         "notes file): `search`, `check`, `index-info`, `index` and `index --dry-run`",
                         "exit 2: not an askalike index (never \"run check --repair\", never an index "
                         "written among the files); the directory is left as it was")
def test_a_directory_of_other_files_is_no_index(tmp_path, tiny_model):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "notes.txt").write_text("not an index\n")
    source = write_jsonl(tmp_path / "q.jsonl", collection(5))
    for directory in (plain, "/etc"):
        for args in (("search", "visa"), ("check",), ("index-info",)):
            assert_one_line_error(invoke(*args, "--index", directory), r"not an askalike index")
    for args in (("index", source, "--model", tiny_model), ("index", source, "--dry-run")):
        assert_one_line_error(invoke(*args, "--index", plain), r"plain: not an askalike index")
    assert [p.name for p in plain.iterdir()] == ["notes.txt"]
