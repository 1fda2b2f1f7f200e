"""Trust: no answer is silently wrong, and every bad input or fault gets a one-line error.

Each test is marked ``reliability`` and becomes a row of docs/reliability.md; each asserts that
what was stored before is still there afterwards.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    SECRET,
    assert_one_line_error,
    collection,
    index,
    invoke,
    listing,
    own_database,
    read_only,
    readable_index,
    run_cli,
    search_hits,
    search_ids,
    stored_state,
    write_jsonl,
)

from askalike.indexer.directory import check_index, open_index
from askalike.indexer.manifest import read_manifest
from askalike.indexer.store import Store

# ------------------------------------------------------------------ silently wrong answers

@pytest.mark.reliability("an add-only `askalike index` run on an index whose FAISS file was "
                         "damaged on disk (same size, one byte changed)",
                         "the damaged file is detected by its sha256 and rebuilt from the database, "
                         "never extended; every indexed vector equals its stored vector")
def test_add_only_run_never_extends_a_damaged_faiss_file(built, tmp_path, tiny_model):
    index_dir, _ = built
    (faiss_file,) = index_dir.glob("vectors-*.faiss")
    damaged = bytearray(faiss_file.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # inside the vectors: FAISS still reads the file
    faiss_file.write_bytes(bytes(damaged))
    more = write_jsonl(tmp_path / "more.jsonl", [dict(r, id=f"m{r['id']}") for r in collection(20)])
    report = index(more, index_dir, tiny_model)
    assert report["added"] == 20 and report["faiss_rebuilt"]
    opened = open_index(index_dir)
    try:
        with opened.store as store:
            for ids, vectors in store.vectors(opened.manifest.encoder.dim):
                indexed = np.stack([opened.faiss.main.reconstruct(int(i)) for i in ids])
                np.testing.assert_array_equal(indexed, vectors)
    finally:
        opened.close()
    assert check_index(index_dir).ok


@pytest.mark.reliability("an index directory moved (or copied) elsewhere, with a new-style and "
                         "with an old manifest naming its database by absolute path",
                         "the moved index answers as before; the old directory is not recreated")
@pytest.mark.parametrize("manifest_style", ["relative", "absolute (older askalike)"])
def test_a_moved_index_directory_answers(built, tmp_path, manifest_style):
    index_dir, _ = built
    expected = search_ids(index_dir, "cheap car", 5)
    if manifest_style != "relative":
        manifest = json.loads((index_dir / "manifest.json").read_text())
        manifest["database"] = own_database(index_dir)
        (index_dir / "manifest.json").write_text(json.dumps(manifest))
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(index_dir, moved)
    assert search_ids(moved, "cheap car", 5) == expected
    assert check_index(moved).ok
    assert not index_dir.exists()


@pytest.mark.reliability("the same model weights reached through another path (a copy of the "
                         "model directory) for a second index run",
                         "accepted as the same encoder; `check` reports the index consistent")
def test_same_weights_through_another_path_are_one_encoder(built, tmp_path, tiny_model):
    index_dir, _ = built
    copy = shutil.copytree(tiny_model, tmp_path / "copy-of-model")
    more = write_jsonl(tmp_path / "more.jsonl", [dict(r, id=f"m{r['id']}") for r in collection(5)])
    index(more, index_dir, copy)
    report = check_index(index_dir)
    assert report.ok, report.problems
    assert search_ids(index_dir, "cheap car", 3)


@pytest.mark.reliability("the index's SQLite file deleted, then a search",
                         "exit 2 naming the missing database; nothing is created")
def test_a_deleted_database_is_an_error(built):
    index_dir, _ = built
    (index_dir / "askalike.sqlite3").unlink()
    before = listing(index_dir)
    assert_one_line_error(invoke("search", "visa", "--index", index_dir),
                          r"askalike\.sqlite3: the database file is missing")
    assert listing(index_dir) == before


@pytest.mark.reliability("an interrupted `--prune` (its delete committed, the FAISS file not yet "
                         "rewritten: 190 of 200 indexed ids gone), then a search for k=8",
                         "k hits, all of stored questions")
def test_searches_after_an_interrupted_prune_still_give_k_hits(built):
    index_dir, _ = built
    with Store(own_database(index_dir)) as store:
        store.delete(store.ids()[:190])
    hits = search_ids(index_dir, "how do i find a good visa", 8)
    assert len(hits) == 8
    assert set(hits) <= {f"q{i}" for i in range(190, 200)}


@pytest.mark.reliability("two index directories given one database (`--db`, SQLite and PostgreSQL)",
                         "the second is refused with exit 2 before it stores anything; the first "
                         "index is unchanged")
def test_two_index_directories_cannot_share_a_database(tmp_path, tiny_model, database_url):
    first, second = tmp_path / "first", tmp_path / "second"
    source = write_jsonl(tmp_path / "questions.jsonl", collection(50))
    other = write_jsonl(tmp_path / "other.jsonl", [dict(r, id=f"o{r['id']}") for r in collection(9)])
    index(source, first, tiny_model, "--db", database_url)
    before = stored_state(first, database_url)
    result = invoke("index", other, "--model", tiny_model, "--index", second, "--db", database_url)
    assert_one_line_error(result, r"holds the questions of another index directory")
    assert stored_state(first, database_url) == before
    assert check_index(first, database_url).ok
    assert not (second / "manifest.json").exists()


@pytest.mark.reliability("`askalike search` with an empty or blank query",
                         "exit 2: the query is empty")
@pytest.mark.parametrize("query", ["", "   "])
def test_an_empty_query_is_refused(built, query):
    index_dir, _ = built
    assert_one_line_error(invoke("search", query, "--index", index_dir), r"query 1 is empty")


@pytest.mark.reliability("`askalike index` run again without `--index-type` on an hnsw index",
                         "the index keeps its type")
def test_a_rerun_keeps_the_index_type(tmp_path, tiny_model):
    index_dir = tmp_path / "index"
    records = collection(60)
    source = write_jsonl(tmp_path / "questions.jsonl", records[:50])
    assert index(source, index_dir, tiny_model, "--index-type", "hnsw")["index_type"] == "hnsw"
    write_jsonl(source, [{**r, "body": r["body"] + " again"} for r in records])  # a full rebuild
    assert index(source, index_dir, tiny_model)["index_type"] == "hnsw"
    assert read_manifest(index_dir).index_type == "hnsw"
    assert index(source, index_dir, tiny_model, "--index-type", "flat")["index_type"] == "flat"


def _run_file(path: Path, lines: list[tuple[str, str, int, float, bool]]) -> Path:
    path.write_text("".join(f"{q}\t{r}\t{rank}\t{score}\t{str(label).lower()}\n"
                            for q, r, rank, score, label in lines))
    return path


@pytest.mark.reliability("`askalike score` with the gold and prediction files swapped",
                         "exit 2: the files look swapped (not a MAP of 1.0)")
def test_swapped_score_files_are_refused(tmp_path):
    gold = _run_file(tmp_path / "gold.relevancy", [
        ("Q1", "Q1_R3", 3, 1 / 3, False), ("Q1", "Q1_R7", 7, 1 / 7, True),
        ("Q2", "Q2_R1", 1, 1.0, True), ("Q2", "Q2_R4", 4, 0.25, False)])
    predictions = _run_file(tmp_path / "system.pred", [  # a ranking-only system: every label true
        ("Q1", "Q1_R3", 1, 0.9, True), ("Q1", "Q1_R7", 2, 0.2, True),
        ("Q2", "Q2_R1", 2, 0.1, True), ("Q2", "Q2_R4", 1, 0.8, True)])
    scored = invoke("score", gold, predictions, "--json")
    assert scored.exit_code == 0 and json.loads(scored.stdout)["map"] == 0.5
    assert_one_line_error(invoke("score", predictions, gold), r"look swapped.*gold file first")


@pytest.mark.reliability("a training config with a bad value: {case}",
                         "exit 2 naming the config file, section and key; nothing trained")
@pytest.mark.parametrize(("case", "config", "message"), [
    ("zero steps", "[training]\nsteps = 0", r"steps = 0 must be positive"),
    ("negative steps", "[training]\nsteps = -5", r"steps = -5 must be positive"),
    ("steps as text", "[training]\nsteps = 'ten'", r"steps = 'ten' must be int"),
    ("a share above 1", "[training]\nnli_ratio = 1.5", r"nli_ratio = 1.5 must be between 0 and 1"),
    ("a section that is not a table", "training = 3", r"\[training\]: expected a table"),
    ("a flag as a number", "[training]\nhalf_precision = 1", r"half_precision = 1 must be bool"),
    ("not TOML", "[training\nsteps = 1", r"cfg\.toml: "),
])
def test_bad_training_config_is_refused(tmp_path, case, config, message):
    path = tmp_path / "cfg.toml"
    path.write_text(f'name = "trust"\n{config}\n')
    assert_one_line_error(invoke("train", path, "--run-dir", tmp_path / "run"), message)
    assert not (tmp_path / "run").exists()


@pytest.mark.reliability("a CSV source with a 1,000,000-character field",
                         "indexed whole (not misreported as broken quoting)")
def test_a_long_csv_field_is_read_whole(tmp_path, tiny_model):
    source = tmp_path / "long.csv"
    source.write_text("id,subject,body\n1,long one," + "x" * 1_000_000 + "\n2,short,text\n")
    assert index(source, tmp_path / "index", tiny_model)["added"] == 2
    state = stored_state(tmp_path / "index", own_database(tmp_path / "index"))
    assert len(state[(str(source), "1")][1]) == 1_000_000


# ------------------------------------------------------------------ one-line errors, not tracebacks

def _damaged_gzip(path: Path) -> Path:
    """A .gz whose deflate stream is broken (zlib fails, not the gzip header or CRC check)."""
    original = gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in collection(300)))
    for offset in range(20, len(original) - 16):
        data = original[:offset] + b"\xff" * 8 + original[offset + 8 :]
        try:
            gzip.decompress(data)
        except zlib.error:
            path.write_bytes(data)
            return path
        except (OSError, EOFError):
            continue
    raise AssertionError("no damage breaks the deflate stream")


@pytest.mark.reliability("bad input for `askalike index`: {case}",
                         "exit 2, one line naming the file (and line) and problem; the index kept")
@pytest.mark.parametrize(("case", "make", "message"), [
    ("a damaged .gz (corrupt deflate stream)", lambda d: _damaged_gzip(d / "q.jsonl.gz"),
     r"q\.jsonl\.gz:\d+: cannot read"),
    ("deeply nested JSON", lambda d: write_text(d / "deep.jsonl", '{"id": "1", "subject": "s", "x": '
                                                + "[" * 100_000 + "]" * 100_000 + "}\n"),
     r"deep\.jsonl:1: JSON nested too deeply"),
    ("metadata nested 40 levels", lambda d: write_jsonl(d / "nest.jsonl", [
        {"id": "1", "subject": "s", "x": json.loads("[" * 40 + "]" * 40)}]),
     r"nest\.jsonl:1: question '1': metadata\.x.* nested deeper than 32 levels"),
    ("the same source named twice", lambda d: (write_jsonl(d / "q.jsonl", collection(3)),
                                               d / "." / "q.jsonl"),
     r"q\.jsonl: the same file as"),
])
def test_bad_source_is_one_line_error(built, tmp_path, case, make, message):
    index_dir, _ = built
    before = stored_state(index_dir, own_database(index_dir))
    made = make(tmp_path)
    sources = list(made) if isinstance(made, tuple) else [made]
    assert_one_line_error(invoke("index", *sources, "--index", index_dir), message)
    assert stored_state(index_dir, own_database(index_dir)) == before


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.reliability("`--db` {case}",
                         "exit 2, one line; the password is never printed")
@pytest.mark.parametrize(("case", "url", "message"), [
    ("that does not parse", f"user:{SECRET}@host/db", r"not a database URL: user:\*\*\*@host/db"),
    ("with a port that is not a number", f"postgresql+psycopg://u:{SECRET}@localhost:port/db",
     r"not a database URL: postgresql\+psycopg://u:\*\*\*@localhost:port/db"),
    ("with a port out of range", f"postgresql+psycopg://u:{SECRET}@127.0.0.1:99999/db",
     r"cannot open the database postgresql\+psycopg://u:\*\*\*@127\.0\.0\.1:99999/db"),
    ("of an unknown database kind", f"nosuchdb://u:{SECRET}@host/db", r"nosuchdb://u:\*\*\*@host/db"),
])
def test_bad_database_url_is_one_line_error(built, case, url, message):
    index_dir, source = built
    for command in (["search", "visa"], ["index", source], ["check"], ["index-info"]):
        assert_one_line_error(invoke(*command, "--index", index_dir, "--db", url), message)


@pytest.mark.reliability("the index's SQLite file replaced by garbage, then search, check and index",
                         "exit 2: cannot open the database (not a database)")
def test_a_malformed_sqlite_file_is_one_line_error(built, tiny_model):
    index_dir, source = built
    (index_dir / "askalike.sqlite3").write_bytes(b"this is not a database " * 200)
    for command in (["search", "visa"], ["check"], ["index", source, "--model", tiny_model]):
        assert_one_line_error(invoke(*command, "--index", index_dir),
                              r"cannot open the database .*: file is not a database")


@pytest.mark.reliability("`--index` naming a file, for search, index, check and check --repair",
                         "exit 2: not an index directory; the file is untouched")
def test_index_option_naming_a_file(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection(3))
    content = source.read_bytes()
    for command in (["search", "visa"], ["index", source, "--model", tiny_model], ["check"],
                    ["check", "--repair"], ["index-info"]):
        assert_one_line_error(invoke(*command, "--index", source),
                              r"q\.jsonl: (no index here|not a directory|no index to repair)")
    assert source.read_bytes() == content


@pytest.mark.reliability("`--out` naming a directory (rerank, eval cqa)",
                         "exit 2 before any work: it is a directory")
def test_out_naming_a_directory(tmp_path, tiny_model):
    out = tmp_path / "a-directory"
    out.mkdir()
    assert_one_line_error(invoke("rerank", tmp_path / "input.xml", "--out", out, "--model", tiny_model),
                          r"a-directory: is a directory")
    assert_one_line_error(invoke("eval", "cqa", "--split", "dev2016", "--system", "ir", "--out", out,
                                 "--data-dir", tmp_path), r"a-directory: is a directory")
    assert list(out.iterdir()) == []


def _corrupt_structure_keeping_the_checksum(index_dir: Path) -> None:
    """A FAISS file FAISS cannot parse, with a manifest whose size and sha256 match it."""
    (faiss_file,) = index_dir.glob("vectors-*.faiss")
    corrupt = b"NOPE" + faiss_file.read_bytes()[4:]
    faiss_file.write_bytes(corrupt)
    manifest = json.loads((index_dir / "manifest.json").read_text())
    manifest["faiss_sha256"] = hashlib.sha256(corrupt).hexdigest()
    (index_dir / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.reliability("a FAISS file whose structure is corrupt while its checksum matches the "
                         "manifest (both rewritten), then search, check and `check --repair`",
                         "exit 2: the file is unreadable, rebuild with `check --repair`; the repair "
                         "restores it")
def test_a_structurally_corrupt_faiss_file(built):
    index_dir, _ = built
    _corrupt_structure_keeping_the_checksum(index_dir)
    assert_one_line_error(invoke("search", "visa", "--index", index_dir),
                          r"vectors-\d+\.faiss: unreadable .*check --repair")
    assert invoke("check", "--index", index_dir).exit_code == 1
    assert invoke("check", "--repair", "--index", index_dir).exit_code == 0
    assert len(search_ids(index_dir, "visa", 4)) == 4


@pytest.mark.reliability("an add-only `askalike index` run on a FAISS file whose structure is "
                         "corrupt while its checksum matches the manifest",
                         "the file is rebuilt from the database (no FAISS RuntimeError); every "
                         "question is searchable")
def test_an_add_only_run_rebuilds_a_structurally_corrupt_faiss_file(built, tmp_path, tiny_model):
    index_dir, _ = built
    _corrupt_structure_keeping_the_checksum(index_dir)
    more = write_jsonl(tmp_path / "more.jsonl", [dict(r, id=f"m{r['id']}") for r in collection(10)])
    report = index(more, index_dir, tiny_model)
    assert report["faiss_rebuilt"] and report["total"] == 210
    assert check_index(index_dir).ok


@pytest.mark.reliability("`askalike check --repair` on an empty directory",
                         "exit 2: no index to repair; nothing created")
def test_repair_of_an_empty_directory_is_refused(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_one_line_error(invoke("check", "--repair", "--index", empty), r"no index to repair")
    assert list(empty.iterdir()) == []


@pytest.mark.reliability("values a database may refuse, on SQLite and PostgreSQL: {case}",
                         "a clean one-line refusal naming file, line and field, or the value "
                         "stored cleaned; never a database crash")
@pytest.mark.parametrize(("case", "record", "message"), [
    ("a NUL character in an id", {"id": "a\x00b", "subject": "s"}, r"id 'a\\x00b' contains control"),
    ("a 600-character id", {"id": "x" * 600, "subject": "s"},
     r"id 'x+'\.\.\. has 600 characters, at most 512"),
    ("a NaN metadata value", {"id": "n", "subject": "s", "score": float("nan")},
     r"question 'n': metadata\.score is nan"),
    ("an infinite metadata value", {"id": "n", "subject": "s", "score": float("inf")},
     r"question 'n': metadata\.score is inf"),
    ("a NUL character in metadata", {"id": "ok", "subject": "s", "note": "a\x00b", "n\x00": 1}, None),
])
def test_values_a_database_refuses(tmp_path, tiny_model, database_url, case, record, message):
    index_dir = tmp_path / "index"
    source = write_jsonl(tmp_path / "good.jsonl", collection(5))
    index(source, index_dir, tiny_model, "--db", database_url)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(record) + "\n")  # json.dumps writes NaN and Infinity, as Python reads
    result = invoke("index", bad, "--model", tiny_model, "--index", index_dir, "--db", database_url)
    if message is None:
        assert result.exit_code == 0, result.output
        with Store(database_url, read_only=True) as store:
            (stored,) = store.questions_of(str(bad)).values()
        assert stored.metadata == {"note": "ab", "n": 1}
    else:
        assert_one_line_error(result, rf"bad\.jsonl:1: {message}")
    assert check_index(index_dir, database_url).ok


@pytest.mark.reliability("a source path longer than the store keeps (over 1,024 characters), on "
                         "SQLite and PostgreSQL", "exit 2 naming the path's length; nothing stored")
def test_a_very_long_source_path(tmp_path, tiny_model, database_url):
    directory = tmp_path
    while len(str(directory)) <= 1024:
        directory = directory / ("d" * 200)
    directory.mkdir(parents=True)
    source = write_jsonl(directory / "q.jsonl", collection(3))
    result = invoke("index", source, "--model", tiny_model, "--index", tmp_path / "index", "--db",
                    database_url)
    assert_one_line_error(result, r"the absolute path has \d+ characters, the index keeps at most 1024")


@pytest.mark.reliability("`search -k 70000` on PostgreSQL (more ids than a statement may bind)",
                         "every stored question comes back, best first")
def test_a_huge_k_on_postgresql(tmp_path, tiny_model, postgres_url):
    index_dir = tmp_path / "index"
    index(write_jsonl(tmp_path / "q.jsonl", collection(120)), index_dir, tiny_model, "--db", postgres_url)
    assert len(search_ids(index_dir, "visa", 70_000, "--db", postgres_url)) == 120
    with Store(postgres_url, read_only=True) as store:
        assert len(store.fetch(list(range(70_000)))) == 120  # 70,000 ids in one call


# ------------------------------------------------------------------ leftovers and access

@pytest.mark.reliability("temporaries a killed index run left (`.vectors-*.tmp`, `.manifest.json.*.tmp`)",
                         "removed by the next index run")
def test_leftover_temporaries_are_removed(built, tmp_path, tiny_model):
    index_dir, source = built
    leftovers = [index_dir / ".vectors-00000009.faiss.4242.tmp", index_dir / ".manifest.json.4242.tmp"]
    for leftover in leftovers:
        leftover.write_bytes(b"partial")
    index(source, index_dir, tiny_model)
    assert not any(p.exists() for p in leftovers)
    assert not list(index_dir.glob(".*.tmp"))


@pytest.mark.reliability("a search by a user with read-only access to the index directory "
                         "(`chmod -R a-w`, searched as uid 65534)",
                         "it answers; no file in the directory is created or changed")
def test_a_read_only_index_can_be_searched(tiny_model):
    with readable_index(tiny_model, 50) as (index_dir, _, _):
        expected = search_ids(index_dir, "cheap car", 3)
        read_only(index_dir.parent)
        before = listing(index_dir)
        result = run_cli("search", "cheap car", "--index", index_dir, "-k", "3", "--json", text=True,
                         as_nobody=True, env={**os.environ, "HOME": str(index_dir.parent)})
        assert result.returncode == 0, result.stderr
        assert [hit["id"] for hit in search_hits(result.stdout)] == expected
        assert listing(index_dir) == before


@pytest.mark.reliability("search, check and index-info opened on an index (as its owner)",
                         "they create and change no file (the database is opened read-only)")
def test_reading_an_index_writes_nothing(built):
    index_dir, _ = built
    before = listing(index_dir)
    assert search_ids(index_dir, "visa", 3)
    assert invoke("check", "--index", index_dir).exit_code == 0
    assert invoke("index-info", "--index", index_dir).exit_code == 0
    assert listing(index_dir) == before
    opened = open_index(index_dir)
    assert len(opened.faiss.ids()) == 200
    opened.close()
