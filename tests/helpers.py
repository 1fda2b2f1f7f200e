"""Helpers the test modules share: question collections, tiny models, index commands and
what a run leaves behind. (Fixtures live in conftest.py.)"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from askalike.app.cli import app
from askalike.core.text import Vocabulary
from askalike.indexer.build import IndexOptions
from askalike.indexer.directory import open_index
from askalike.indexer.layout import default_database_url
from askalike.indexer.store import Store

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def invoke(*args: str | Path, **options: object):
    """``askalike ARGS`` in this process (``options``: CliRunner's, e.g. ``input``, ``env``)."""
    return runner.invoke(app, [str(a) for a in args], **options)


SECRET = "s3cr3t-pw"  # a password the tests put in database URLs: never to be printed


def assert_one_line_error(result, pattern: str) -> None:
    """Exit 2 and one ``error:`` line matching ``pattern``: no traceback, no password."""
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]  # a progress bar's end
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(pattern, lines[0]), result.stderr
    assert "Traceback" not in result.output and SECRET not in result.output


def index(source: Path, index_dir: Path, model: Path, *extra: str | Path) -> dict:
    """``askalike index SOURCE --model MODEL --index INDEX_DIR --json EXTRA``'s report."""
    result = invoke("index", source, "--model", model, "--index", index_dir, "--json", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def listing(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and modification time."""
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*"))}


NOBODY = 65534  # the user that tests of access rights run as, when they run as root


def run_cli(*args: str | Path | bytes, as_nobody: bool = False, **options) -> subprocess.CompletedProcess:
    """``python -m askalike.app ARGS`` in a process of its own, its output captured unless ``options``
    redirect it; ``as_nobody``: as uid 65534 where the tests run as root (root may write anywhere)."""
    command = [sys.executable, "-m", "askalike.app", *(a if isinstance(a, bytes) else str(a) for a in args)]
    user = NOBODY if as_nobody and os.geteuid() == 0 else None
    return subprocess.run(command, cwd=ROOT, timeout=120, user=user,
                          **{"capture_output": "stdout" not in options, **options})


_IMPORTS_AFTER = """
import json, sys
from askalike.app.cli import main
watched, sys.argv = json.loads(sys.argv[1]), ["askalike", *sys.argv[2:]]
try:
    main()
except SystemExit as exit:
    assert not exit.code, exit.code
print(json.dumps([name for name in watched if name in sys.modules]), file=sys.stderr)
"""


def imported_by(modules: Sequence[str], *args: str | Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """``askalike ARGS`` in a process of its own (it must succeed), and which of ``modules`` it
    had imported by its end: what a command loads that it should not."""
    command = [sys.executable, "-c", _IMPORTS_AFTER, json.dumps(list(modules)), *map(str, args)]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    return result, json.loads(result.stderr.strip().splitlines()[-1])


@contextmanager
def readable_index(model: Path, count: int) -> Iterator[tuple[Path, Path, Path]]:
    """(index directory, source, model) of an index of ``count`` questions in a fresh directory
    under the system's temporary folder, which any user can reach (a copy of ``model`` with it);
    made writable again and removed afterwards. ``read_only`` takes the write access away."""
    root = Path(tempfile.mkdtemp(prefix="askalike-ro-"))
    try:
        copy = shutil.copytree(model, root / "model")
        source = write_jsonl(root / "q.jsonl", collection(count))
        index(source, root / "index", copy)
        yield root / "index", source, copy
    finally:
        subprocess.run(["chmod", "-R", "u+w", str(root)], check=True)
        shutil.rmtree(root)


def read_only(directory: Path) -> None:
    """Everything under ``directory`` readable by all and writable by none (``chmod -R a+rX,a-w``)."""
    subprocess.run(["chmod", "-R", "a+rX,a-w", str(directory)], check=True)


def search_hits(stdout: str) -> list[dict]:
    """The hits of ``askalike search --json``'s lines (one a search), each with its search's
    ``query`` (or ``like``) and ``mode``, in order."""
    hits = []
    for line in stdout.splitlines():
        payload = json.loads(line)
        asked = {key: payload[key] for key in ("query", "like", "mode") if key in payload}
        hits += [{**asked, **hit} for hit in payload["results"]]
    return hits


def search_ids(index_dir: Path, query: str, k: int = 5, *extra: str | Path) -> list[str]:
    """The ids ``askalike search`` finds, best first."""
    result = invoke("search", query, "--index", index_dir, "-k", str(k), "--json", *extra)
    assert result.exit_code == 0, result.output
    return [hit["id"] for hit in search_hits(result.stdout)]


def own_database(index_dir: Path) -> str:
    """The URL of the index directory's own SQLite database."""
    return default_database_url(index_dir)


def index_command(source: Path, index_dir: Path, model: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "askalike.app", "index", str(source), "--model", str(model), "--index",
            str(index_dir), "--commit-every", "100", "--batch-size", "50", "--json", *extra]


def run_index(*args: str | Path) -> None:
    result = subprocess.run([str(a) for a in args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def stored_count(database: Path) -> int:
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute("SELECT count(*) FROM questions").fetchone()[0]
    except sqlite3.OperationalError:  # not created yet, or busy
        return -1


# Runs ``askalike ARGS`` with Store.write stopping the process (SIGSTOP) once a commit leaves at
# least ROWS questions stored: a kill "mid-embedding" then lands there whatever the machine's speed.
_STOP_AFTER_ROWS = """
import faulthandler, os, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung run's stacks: see ended_or_stacks
# Ctrl-C as a terminal gives it, whatever this process inherited (a shell's background job, as a
# CI runner may start the tests, has SIGINT ignored, and Python then leaves it ignored)
signal.signal(signal.SIGINT, signal.default_int_handler)
from askalike.indexer.store import Store
rows = int(sys.argv.pop(1))
write = Store.write
stopped = []
def write_then_stop(self, *args, **kwargs):
    inserted = write(self, *args, **kwargs)
    if self.count() >= rows and not stopped:  # once: a signal sent while stopped may be handled
        stopped.append(True)  # only after the next chunk's write, which must not stop it again
        os.kill(os.getpid(), signal.SIGSTOP)
    return inserted
Store.write = write_then_stop
from askalike.app.cli import main
sys.argv[0] = "askalike"
main()
"""


def stopping_at_rows(command: list[str], rows: int) -> list[str]:
    """``command`` (an ``index_command``) made to stop itself once ``rows`` questions are stored."""
    assert command[1:3] == ["-m", "askalike.app"], command
    return [command[0], "-c", _STOP_AFTER_ROWS, str(rows), *command[3:]]


def ended_or_stacks(process: subprocess.Popen, hang_s: float = 300) -> str:
    """The stderr of a ``stopping_at_rows`` run once it ends; one that has not ended in ``hang_s``
    is taken as hung: its threads' stacks (faulthandler) are the test's failure message."""
    try:
        return process.communicate(timeout=hang_s)[1]
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)
        process.send_signal(signal.SIGCONT)  # a run stopped (SIGSTOP) writes them once it goes on
        time.sleep(1)  # for the stacks to be written; then it is killed
        process.kill()
        pytest.fail(f"the run did not end in {hang_s} s; its threads:\n{process.communicate()[1]}")


def wait_until_stopped(process: subprocess.Popen, database: Path, rows: int, hang_s: float = 300) -> None:
    """Wait for a ``stopping_at_rows`` run to stop itself, ``rows`` questions or more stored
    (``hang_s``: a run that neither stops nor ends by then is taken as hung, as ``run_index``'s)."""
    given_up = time.monotonic() + hang_s
    while (waited := os.waitpid(process.pid, os.WNOHANG | os.WUNTRACED)) == (0, 0):
        assert time.monotonic() < given_up, f"the index run neither stopped nor ended in {hang_s} s"
        time.sleep(0.01)
    status = waited[1]
    assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP, \
        f"the index run ended ({status}) before {rows} questions were stored"
    assert stored_count(database) >= rows


def kill_when(process: subprocess.Popen, database: Path, rows: int | None, delay: float) -> None:
    """SIGKILL once the store holds ``rows`` questions (the process must run ``stopping_at_rows``
    and stops itself there), or after ``delay`` seconds."""
    if rows is not None:
        wait_until_stopped(process, database, rows)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        return
    started = time.monotonic()
    while process.poll() is None and time.monotonic() - started < delay:
        time.sleep(0.002)
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
    process.wait()


def answering_index_size(index_dir: Path) -> int:
    """Open the index as a search does, check that it finds one of its own vectors, and return
    how many vectors it holds. (The probe comes from the FAISS file, not the store: a kill after
    the prune's commit leaves the store ahead of the file, and a search skips ids it lacks.)"""
    opened = open_index(index_dir)
    try:
        probe = opened.faiss.main.reconstruct(int(opened.faiss.ids()[0]))
        assert opened.faiss.search(probe[None], 1)[1][0][0] >= 0
        return opened.faiss.ntotal
    finally:
        opened.close()


QUIET = IndexOptions(show_progress=False)
TOPICS = ["visa", "car", "pizza", "school", "flight", "salary", "apartment", "doctor"]
ASKS = ["how do i find a good", "where can i get a cheap", "is it hard to get a", "who knows a"]
PLACES = ["in doha", "near the pearl", "for expats", "this weekend"]


def collection(count: int = 60) -> list[dict]:
    """``count`` distinct questions (a case number tells apart the repeats of 128 phrasings)."""
    texts = itertools.islice(itertools.cycle(itertools.product(ASKS, TOPICS, PLACES)), count)
    return [{"id": f"q{i}", "subject": f"{ask} {topic}", "body": f"{ask} {topic} {place}, case {i}?",
             "category": topic} for i, (ask, topic, place) in enumerate(texts)]


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def stored_state(index_dir: Path, database: str) -> dict:
    """Everything a run leaves, keyed by question: fields and exact vector bytes."""
    with Store(database, read_only=True) as store, store.engine.connect() as connection:
        rows = connection.exec_driver_sql(
            "SELECT source, external_id, subject, body, content_hash, vector FROM questions")
        return {(r[0], r[1]): (r[2], r[3], r[4], bytes(r[5])) for r in rows}


def as_first_schema(url: str) -> None:
    """Turn a database of this askalike into one that an askalike of schema 1 wrote."""
    with Store(url) as store, store.engine.begin() as connection:
        connection.exec_driver_sql("DROP INDEX ix_questions_dated")
        for column in ("dated", "category_key", "vector_crc32"):
            connection.exec_driver_sql(f"ALTER TABLE questions DROP COLUMN {column}")
        connection.exec_driver_sql("UPDATE index_settings SET value = '1' WHERE key = 'schema_version'")


def write_bytes(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    return path


TINY_TEXTS = ["how do i renew my visa", "where can i buy a cheap car", "best pizza in doha",
              "visa renewal fees", "cheap flights to london", "good schools for kids"]


def make_tiny_model(directory: Path, seed: int = 0) -> Path:
    """A small untrained DAN saved as a model directory: fast, deterministic, distinct per seed."""
    import torch

    from askalike.core.text import Vocabulary
    from askalike.train.modules import DanModule
    from askalike.train.trained_model import TrainedModel, save_model

    torch.manual_seed(seed)
    vocabulary = Vocabulary.build(TINY_TEXTS * 2, max_size=200, min_count=1, oov_buckets=500,
                                  bigram_buckets=1009)
    save_model(TrainedModel(DanModule(vocabulary, embedding_dim=32, hidden=(48, 32))), directory)
    return directory


TEXTS = ["how do i renew my visa", "where can i buy a cheap car in doha today please", "visa",
         "best pizza", "", "zebra crossing unknown words !!", "?"]
VOCABULARY = Vocabulary.build(TEXTS * 2, max_size=100, min_count=1, oov_buckets=5, bigram_buckets=31)
SMALL = {"dan": {"embedding_dim": 16, "hidden": (24, 12)},
         "cse": {"embedding_dim": 16, "maps": 4},
         "transformer": {"hidden": 16, "layers": 2, "heads": 2, "filter_size": 32}}


def saved_model(directory: Path, kind: str) -> Path:
    """A small untrained model of ``kind`` saved as a model directory (a transformer with its ONNX
    export)."""
    import torch

    from askalike.train.modules import VOCABULARY_MODULES
    from askalike.train.trained_model import TrainedModel, save_model

    torch.manual_seed(0)
    save_model(TrainedModel(VOCABULARY_MODULES[kind](VOCABULARY, **SMALL[kind])), directory)
    return directory


def documented_schema(title: str) -> dict:
    """The JSON Schema titled ``title`` in docs/cli.md."""
    blocks = re.findall(r"```json\n(.*?)```", (ROOT / "docs" / "cli.md").read_text(), re.DOTALL)
    return next(schema for schema in map(json.loads, blocks) if schema["title"] == title)
