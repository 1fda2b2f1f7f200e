"""What `askalike index` stores and how later runs treat it: text kept as given, ids made from
text, the index type asked for, directories that hold no index, sources with one file name."""

from __future__ import annotations

import json

import pytest
from helpers import assert_one_line_error, collection, index, invoke, write_jsonl

from indexer.directory import check_index
from indexer.store import Store


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
    import indexer.build

    source = write_jsonl(tmp_path / "q.jsonl", collection(30))

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(indexer.build, "sync_vector_index", interrupted)
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
