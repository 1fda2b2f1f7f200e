"""Reliability: bad input, faults and concurrent use never lose data.

Each test is marked ``reliability`` and becomes a row of docs/reliability.md
(``python -m pytest -m reliability --reliability-report=docs/reliability.md``).
"""

from __future__ import annotations

import json
import os
import random
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers import (
    ROOT,
    answering_index_size,
    collection,
    index_command,
    kill_when,
    run_index,
    runner,
    stored_count,
    stored_state,
    write_jsonl,
)

from askalike.app.cli import app
from askalike.indexer.directory import check_index, open_index

BAD_INPUTS = Path(__file__).parent / "bad_inputs"

# file in tests/bad_inputs -> what the one-line error must say (file and line included)
REFUSED = {
    "truncated.xml": r"truncated\.xml:3: malformed XML: no element found",
    "malformed.xml": r"malformed\.xml:2: malformed XML: mismatched tag",
    "entity_bomb.xml": r"entity_bomb\.xml: refused unsafe XML",
    "external_entity.xml": r"external_entity\.xml: refused unsafe XML",
    "broken_quoting.csv": r"broken_quoting\.csv:3: broken quoting",
    "ragged_row.csv": r"ragged_row\.csv:3: expected 2 fields \(id, subject\), got 3",
    "no_text_columns.csv": r"no_text_columns\.csv:1: .*none of the text columns",
    "empty.csv": r"empty\.csv:1: empty file",
    "empty_question.csv": r"empty_question\.csv:3: question '2' is empty",
    "whitespace_question.jsonl": r"whitespace_question\.jsonl:4: question 'blank' is empty",
    "not_an_object.jsonl": r"not_an_object\.jsonl:4: expected a JSON object, got list",
    "invalid_json.jsonl": r"invalid_json\.jsonl:4: invalid JSON",
    "missing_id.jsonl": r"missing_id\.jsonl:4: missing or empty 'id'",
    "invalid_utf8.jsonl": r"invalid_utf8\.jsonl:4: not valid UTF-8 at byte 27",
    "mixed_encodings.csv": r"mixed_encodings\.csv:3: not valid UTF-8",
    "utf16.txt": r"utf16\.txt:1: UTF-16 text; askalike reads UTF-8",
    "duplicate_ids.jsonl": r"duplicate_ids\.jsonl:4: duplicate id 'g1' \(first at line 2\)",
    "normalised_id_collision.jsonl": r"normalised_id_collision\.jsonl:2: duplicate id 'café'",
    "truncated.jsonl.gz": r"truncated\.jsonl\.gz:\d+: cannot read \(Compressed file ended",
    "duplicate_column.csv": r"duplicate_column\.csv:1: column 'category' appears twice in the header "
                            r"\(columns 4 and 5\)",
    "duplicate_id_column.csv": r"duplicate_id_column\.csv:1: column 'id' appears twice",
    "duplicate_key.jsonl": r"duplicate_key\.jsonl:2: key 'id' appears twice in one object",
    "boolean_id.jsonl": r"boolean_id\.jsonl:2: 'id' is a boolean; expected a string or an integer",
    "float_id.jsonl": r"float_id\.jsonl:1: 'id' is a decimal number; expected a string or an integer",
    "list_body.jsonl": r"list_body\.jsonl:2: 'body' is an array; expected a string",
}


@pytest.fixture
def base_index(tmp_path, tiny_model) -> tuple[Path, str, dict]:
    """An index of 200 questions and everything it stores."""
    index_dir = tmp_path / "index"
    source = write_jsonl(tmp_path / "good.jsonl", collection(200))
    result = runner.invoke(app, ["index", str(source), "--model", str(tiny_model), "--index",
                                 str(index_dir), "--json"])
    assert result.exit_code == 0, result.output
    database = f"sqlite:///{index_dir / 'askalike.sqlite3'}"
    return index_dir, database, stored_state(index_dir, database)


def assert_unchanged(index_dir: Path, database: str, before: dict) -> None:
    assert stored_state(index_dir, database) == before
    report = check_index(index_dir)
    assert report.ok, report.problems


def test_every_bad_input_file_has_an_expectation():
    assert {p.name for p in BAD_INPUTS.iterdir()} == set(REFUSED) | {"bom.csv", "control_characters.jsonl"}


@pytest.mark.reliability("bad input `tests/bad_inputs/{name}`",
                         "exit 2, one line naming file, line and problem; nothing written")
@pytest.mark.parametrize("name", sorted(REFUSED))
def test_bad_input_is_refused_and_the_index_kept(base_index, name):
    index_dir, database, before = base_index
    result = runner.invoke(app, ["index", str(BAD_INPUTS / name), "--index", str(index_dir)])
    assert result.exit_code == 2, result.output
    assert re.search(REFUSED[name], result.stderr.replace("\n", "")), result.stderr
    assert "Traceback" not in result.output
    assert_unchanged(index_dir, database, before)


@pytest.mark.reliability("UTF-8 byte order mark; control characters (NUL, BEL, ESC); a 1 MB question",
                         "indexed: the mark dropped, the text stored as given but NUL (which no "
                         "database keeps), shown escaped; the big question whole")
def test_awkward_but_valid_input_is_indexed(base_index, tmp_path):
    index_dir, database, before = base_index
    big = write_jsonl(tmp_path / "big.jsonl", [{"id": "big", "subject": "huge", "body": "word " * 200_000}])
    sources = [BAD_INPUTS / "bom.csv", BAD_INPUTS / "control_characters.jsonl", big]
    result = runner.invoke(app, ["index", *map(str, sources), "--index", str(index_dir), "--json"])
    assert result.exit_code == 0, result.output
    after = stored_state(index_dir, database)
    assert after.items() >= before.items()
    added = {external_id: fields for (_, external_id), fields in after.items() - before.items()}
    assert added["1"][0] == "with a byte order mark"
    assert added["bell"][:2] == ("ring\x07 the bell\x1b[31m", "tab\tkept")
    assert added["big"][1].split() == ["word"] * 200_000
    assert check_index(index_dir).ok


# ------------------------------------------------------------------ kill -9 during --prune

PRUNE_QUESTIONS = 6000


@pytest.fixture(scope="module")
def prune_setup(tmp_path_factory, tiny_model):
    """A source of 6,000 questions later cut to its first 3,000, and the state a clean prune
    leaves. Every run reads the one source path, so that stored states compare."""
    directory = tmp_path_factory.mktemp("prune")
    records = collection(PRUNE_QUESTIONS)
    source = directory / "questions.jsonl"
    clean = directory / "clean"
    run_index(*index_command(write_jsonl(source, records), clean, tiny_model))
    write_jsonl(source, records[: PRUNE_QUESTIONS // 2])
    started = time.monotonic()
    run_index(*index_command(source, clean, tiny_model, "--prune"))
    duration = time.monotonic() - started
    expected = stored_state(clean, f"sqlite:///{clean / 'askalike.sqlite3'}")
    return source, records, expected, duration


@pytest.mark.reliability("kill -9 during `askalike index --prune` (at {fraction:.0%} of a clean run's time)",
                         "the store holds all questions or exactly the pruned set, never a part; "
                         "the previous index still answers; a re-run ends as a clean run")
@pytest.mark.parametrize("fraction", [0.3, 0.55, 0.7, 0.85, 0.95])
@pytest.mark.slow
def test_kill_9_during_prune(prune_setup, tiny_model, fraction):
    source, records, expected, duration = prune_setup
    index_dir = source.parent / f"killed-{fraction}"
    database = index_dir / "askalike.sqlite3"
    run_index(*index_command(write_jsonl(source, records), index_dir, tiny_model))
    write_jsonl(source, records[: PRUNE_QUESTIONS // 2])
    process = subprocess.Popen(index_command(source, index_dir, tiny_model, "--prune"), cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kill_when(process, database, None, duration * fraction)

    with sqlite3.connect(database) as connection:
        count = connection.execute("SELECT count(*) FROM questions").fetchone()[0]
    assert count in (PRUNE_QUESTIONS, PRUNE_QUESTIONS // 2)  # one transaction: all or nothing
    answering_index_size(index_dir)
    run_index(*index_command(source, index_dir, tiny_model, "--prune"))
    assert stored_state(index_dir, f"sqlite:///{database}") == expected
    assert check_index(index_dir).ok


# ------------------------------------------------------------------ full disk

def _file_size_limit(limit: int):
    """For the child: files may not grow past ``limit`` bytes, as on a full disk (EFBIG instead
    of a signal, like ENOSPC)."""
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def _full_disk_run(index_dir: Path, source: Path, model: Path, limit: int, *extra: str):
    return subprocess.run(index_command(source, index_dir, model, *extra), cwd=ROOT,
                          capture_output=True, text=True, timeout=300, preexec_fn=_file_size_limit(limit))


@pytest.mark.reliability("disk full while the database is written (SQLite, files capped by RLIMIT_FSIZE)",
                         "exit 2 naming the database error; committed batches kept, the previous "
                         "index answers; a re-run with space ends as a clean run")
@pytest.mark.slow
def test_full_disk_during_the_database_write(tmp_path, tiny_model):
    records = collection(3000)
    half = write_jsonl(tmp_path / "half.jsonl", records[:1500])
    everything = write_jsonl(tmp_path / "all.jsonl", records)
    clean, index_dir = tmp_path / "clean", tmp_path / "index"
    for directory in (clean, index_dir):
        run_index(*index_command(half, directory, tiny_model))
    run_index(*index_command(everything, clean, tiny_model))
    database = index_dir / "askalike.sqlite3"
    result = _full_disk_run(index_dir, everything, tiny_model, database.stat().st_size + 64_000)
    assert result.returncode == 2, result.stderr
    assert "error:" in result.stderr and "rolled back" in result.stderr
    assert "Traceback" not in result.stderr
    opened = open_index(index_dir)
    assert opened.faiss.ntotal == 1500
    opened.close()
    run_index(*index_command(everything, index_dir, tiny_model))
    assert stored_state(index_dir, f"sqlite:///{database}") == stored_state(
        clean, f"sqlite:///{clean / 'askalike.sqlite3'}")
    assert check_index(index_dir).ok


@pytest.mark.reliability("disk full while the FAISS file is written (PostgreSQL store; index files "
                         "capped by RLIMIT_FSIZE)",
                         "exit 2 naming the file; no partial file left; the previous index and "
                         "manifest answer; `check --repair` or a re-run completes it")
@pytest.mark.slow
def test_full_disk_during_the_faiss_write(tmp_path, tiny_model, postgres_url):
    index_dir, source = tmp_path / "index", tmp_path / "questions.jsonl"
    records = collection(3000)
    write_jsonl(source, records[:1500])
    run_index(*index_command(source, index_dir, tiny_model, "--db", postgres_url))
    (faiss_file,) = index_dir.glob("vectors-*.faiss")
    manifest = (index_dir / "manifest.json").read_text()
    everything = write_jsonl(source, records)
    result = _full_disk_run(index_dir, everything, tiny_model, faiss_file.stat().st_size + 1000,
                            "--db", postgres_url, "--index-type", "hnsw")
    assert result.returncode == 2, result.stderr
    assert ".faiss" in result.stderr and "Traceback" not in result.stderr
    assert (index_dir / "manifest.json").read_text() == manifest
    assert [p.name for p in index_dir.glob("*.faiss*")] == [faiss_file.name]
    assert not list(index_dir.glob(".*.tmp"))
    opened = open_index(index_dir, postgres_url)
    assert opened.faiss.ntotal == 1500
    opened.close()
    report = check_index(index_dir, postgres_url)
    assert not report.ok and report.repair  # the store is ahead of the index, and it says how to fix it
    run_index(*index_command(everything, index_dir, tiny_model, "--db", postgres_url, "--index-type", "hnsw"))
    final = check_index(index_dir, postgres_url)
    assert final.ok and final.vectors == 3000


# ------------------------------------------------------------------ damaged index files

@pytest.mark.reliability("index file {damage} before a search",
                         "the search refuses with the file, the cause and the repair command; "
                         "`check --repair` rebuilds it from the database")
@pytest.mark.parametrize("damage", ["truncated", "one byte flipped", "deleted"])
def test_damaged_index_file_on_open(base_index, damage):
    index_dir, database, before = base_index
    (faiss_file,) = index_dir.glob("vectors-*.faiss")
    content = faiss_file.read_bytes()
    if damage == "truncated":
        faiss_file.write_bytes(content[: len(content) // 2])
    elif damage == "one byte flipped":
        middle = len(content) // 2
        faiss_file.write_bytes(content[:middle] + bytes([content[middle] ^ 0xFF]) + content[middle + 1 :])
    else:
        faiss_file.unlink()
    result = runner.invoke(app, ["search", "visa", "--index", str(index_dir)])
    assert result.exit_code == 2
    message = result.stderr.replace("\n", "")
    assert faiss_file.name in message and f"askalike check --repair --index {index_dir}" in message
    assert runner.invoke(app, ["check", "--index", str(index_dir), "--repair"]).exit_code == 0
    assert_unchanged(index_dir, database, before)
    assert runner.invoke(app, ["search", "visa", "--index", str(index_dir)]).exit_code == 0


# ------------------------------------------------------------------ locks

def _hold_write_lock(database: Path, holding: threading.Event, release: threading.Event) -> None:
    """Hold SQLite's write lock, as another program would, from ``holding`` until ``release``."""
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute("BEGIN IMMEDIATE")
    holding.set()
    release.wait()
    connection.execute("ROLLBACK")
    connection.close()


@contextmanager
def write_lock_held(database: Path) -> Iterator[threading.Event]:
    """The database's write lock, held by another connection until the block ends or the yielded
    event is set: no wall-clock assumption about how long a subprocess takes to start."""
    holding, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(database, holding, release))
    holder.start()
    holding.wait()
    try:
        yield release
    finally:
        release.set()
        holder.join()


@pytest.mark.reliability("the database locked by another writer for longer than the bound "
                         "(ASKALIKE_DB_TIMEOUT=1)",
                         "retries for 1 s, then exit 2 saying another program holds the lock; "
                         "nothing written")
@pytest.mark.slow
def test_database_locked_past_the_bound(base_index, tmp_path, tiny_model):
    index_dir, database, before = base_index
    source = write_jsonl(tmp_path / "more.jsonl", collection(300)[200:])
    with write_lock_held(index_dir / "askalike.sqlite3"):  # held until the command has given up
        result = subprocess.run(index_command(source, index_dir, tiny_model), cwd=ROOT,
                                capture_output=True, text=True, timeout=600,
                                env={**os.environ, "ASKALIKE_DB_TIMEOUT": "1"})
    assert result.returncode == 2, result.stderr
    assert "another program holds a write lock" in result.stderr and "gave up after 1 s" in result.stderr
    assert_unchanged(index_dir, database, before)


@pytest.mark.reliability("the database locked by another writer for less than the bound",
                         "waits for the lock, then indexes as usual")
@pytest.mark.slow
def test_database_locked_within_the_bound(base_index, tmp_path, tiny_model):
    index_dir, database, before = base_index
    source = write_jsonl(tmp_path / "more.jsonl", collection(300)[200:])
    with write_lock_held(index_dir / "askalike.sqlite3") as release:
        threading.Timer(1.5, release.set).start()
        result = subprocess.run(index_command(source, index_dir, tiny_model), cwd=ROOT,
                                capture_output=True, text=True, timeout=600,
                                env={**os.environ, "ASKALIKE_DB_TIMEOUT": "300"})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 100
    assert stored_state(index_dir, database).items() >= before.items()
    assert check_index(index_dir).ok


WAIT_THEN_RUN = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from askalike.app.cli import main  # the slow imports happen before the signal
    go = Path(sys.argv[1])
    while not go.exists():
        time.sleep(0.005)
    sys.argv = ["askalike", *sys.argv[2:]]
    main()
""")


@pytest.mark.reliability("two `askalike index` runs on one directory at once",
                         "the second is refused at once, naming the running one; the first "
                         "finishes as if alone")
@pytest.mark.slow
def test_two_index_runs_never_interleave(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection(20_000))
    index_dir, go = tmp_path / "index", tmp_path / "go"
    command = index_command(source, index_dir, tiny_model)
    second = subprocess.Popen([sys.executable, "-c", WAIT_THEN_RUN, str(go), *command[3:]], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    database = index_dir / "askalike.sqlite3"
    while time.monotonic() < deadline and first.poll() is None and stored_count(database) < 100:
        time.sleep(0.005)
    go.touch()  # the first run is mid-way: it has committed questions and holds the lock
    assert second.wait(timeout=120) == 2
    assert first.poll() is None  # the refusal came while the first was still running
    assert first.wait(timeout=300) == 0, first.stderr.read()
    assert f"is being written by askalike pid {first.pid}" in second.stderr.read().replace("\n", "")
    assert json.loads(first.stdout.read())["added"] == 20_000
    report = check_index(index_dir)
    assert report.ok and report.vectors == 20_000


# ------------------------------------------------------------------ searches during an index run

SEARCH_LOOP = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    from askalike.retrieval.searcher import Searcher
    index_dir, stop, seen = Path(sys.argv[1]), Path(sys.argv[2]), set()
    searches = 0
    while not stop.exists() or searches < 5:
        with Searcher(index_dir) as searcher:  # opened afresh, like one CLI call
            results = searcher.search("how do i find a good visa", k=10)
            assert len(results) == 10 and all(r.subject for r in results), results
            seen.add(searcher.index.faiss.ntotal)
        searches += 1
    print(json.dumps({"searches": searches, "sizes": sorted(seen)}))
""")


@pytest.mark.reliability("3 processes searching (opening the index afresh each time) while an "
                         "index run adds 1,500 questions to 1,500",
                         "every search answers from the old or the new index, never a broken one")
@pytest.mark.slow
def test_searches_during_an_index_run(tmp_path, tiny_model):
    records = collection(3000)
    index_dir = tmp_path / "index"
    source = tmp_path / "questions.jsonl"  # one source, grown from 1,500 to 3,000 questions
    run_index(*index_command(write_jsonl(source, records[:1500]), index_dir, tiny_model))
    stop = tmp_path / "stop"
    searchers = [subprocess.Popen([sys.executable, "-c", SEARCH_LOOP, str(index_dir), str(stop)], cwd=ROOT,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(3)]
    time.sleep(random.uniform(1.0, 2.0))  # the searchers are running
    run_index(*index_command(write_jsonl(source, records), index_dir, tiny_model))
    time.sleep(1.0)
    stop.touch()
    reports = []
    for searcher in searchers:
        out, err = searcher.communicate(timeout=120)
        assert searcher.returncode == 0, err
        reports.append(json.loads(out))
    assert all(set(report["sizes"]) <= {1500, 3000} for report in reports)
    assert any(3000 in report["sizes"] for report in reports)  # the new index was picked up
    assert check_index(index_dir).ok
