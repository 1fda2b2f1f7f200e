"""Fuzzing every reader with mutated files (in other encodings too), and every command's text
options with random text, undecodable bytes and control characters: the only outcomes allowed
are a clean result or a user-facing error (UserError; at the command line, exit 2 and one
``error:`` line), never another exception, and never a raw control character on the terminal.
Bounded to run in seconds."""

from __future__ import annotations

import contextlib
import gzip
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from helpers import collection, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from askalike.core.cqa_questions import read_cqa_collection, read_cqa_jsonl, read_cqa_threads, read_cqa_xml
from askalike.core.errors import UserError
from askalike.indexer.layout import MANIFEST_FILE
from askalike.indexer.manifest import load_faiss, read_manifest
from askalike.indexer.sources import OnError, SourceFile
from askalike.retrieval.cqa_runs import read_cqa_run

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# bytes that matter to some format: quotes, separators, line ends, NUL, invalid UTF-8, markup
TOKENS = [b'"', b",", b"\t", b"\n", b"\r", b"\x00", b"\xff", b"\xc3", b"<", b">", b"&", b"{", b"}",
          b"[", b"]", b"\\", b"NaN", b"<!ENTITY e 'x'>", b"&e;", b"[" * 3000, b"\xef\xbb\xbf"]

_edit = st.tuples(st.sampled_from(["flip", "delete", "insert", "truncate", "repeat"]),
                  st.floats(0, 1), st.one_of(st.sampled_from(TOKENS), st.binary(min_size=1, max_size=6)))
# a file as another program may have saved it; gzip seeds stay as they are
ENCODINGS = ["utf-8", "utf-8", "utf-8-sig", "utf-16", "utf-16-be", "utf-32", "latin-1", "cp1252"]


def _reencoded(seed: bytes, encoding: str) -> bytes:
    try:
        return seed.decode("utf-8").encode(encoding, errors="replace")
    except UnicodeDecodeError:  # a binary seed
        return seed


def _apply(seed: bytes, encoding: str, edits: Iterable[tuple[str, float, bytes]]) -> bytes:
    data = bytearray(_reencoded(seed, encoding))
    for kind, where, payload in edits:
        at = int(where * len(data))
        if kind == "flip" and data:
            data[min(at, len(data) - 1)] ^= payload[0] or 0xFF
        elif kind == "delete":
            del data[at : at + len(payload) * 8]
        elif kind == "insert":
            data[at:at] = payload
        elif kind == "truncate":
            del data[at:]
        elif kind == "repeat":
            data[at:at] = data[at : at + 64] * 3
    return bytes(data)


def mutated(seed: bytes) -> st.SearchStrategy[bytes]:
    return st.builds(lambda encoding, edits: _apply(seed, encoding, edits), st.sampled_from(ENCODINGS),
                     st.lists(_edit, min_size=1, max_size=4))


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


QUESTIONS = collection(6)
JSONL = _jsonl([{**QUESTIONS[0], "tags": ["a", {"b": 1.5}], "date": "2015-01-02"}, *QUESTIONS[1:]])
CSV = ("id,subject,body,category\n" + "".join(f'{q["id"]},"{q["subject"]}","{q["body"]}",{q["category"]}\n'
                                             for q in QUESTIONS)).encode()
TSV = ("id\ttitle\tbody\n" + "".join(f'{q["id"]}\t{q["subject"]}\t{q["body"]}\n' for q in QUESTIONS)).encode()
TXT = "".join(q["body"] + "\n" for q in QUESTIONS).encode()
CQA_XML = b"""<?xml version="1.0" encoding="utf-8"?>
<xml version="1.0">
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>Good bank</OrgQSubject><OrgQBody>Which bank?</OrgQBody>
<Thread THREAD_SEQUENCE="Q1_R1"><RelQuestion RELQ_ID="Q1_R1" RELQ_RANKING_ORDER="1" RELQ_CATEGORY="Advice"
 RELQ_DATE="2013-05-02 19:43:00" RELQ_USERNAME="u" RELQ_RELEVANCE2ORGQ="PerfectMatch">
<RelQSubject>Bank</RelQSubject><RelQBody>Best bank in Doha?</RelQBody></RelQuestion>
<RelComment RELC_ID="Q1_R1_C1" RELC_DATE="2013-05-02" RELC_USERNAME="v" RELC_RELEVANCE2RELQ="Good">
<RelCText>QNB</RelCText></RelComment></Thread></OrgQuestion>
<OrgQuestion ORGQ_ID="Q1"><OrgQSubject>Good bank</OrgQSubject><OrgQBody>Which bank?</OrgQBody>
<Thread THREAD_SEQUENCE="Q1_R2"><RelQuestion RELQ_ID="Q1_R2" RELQ_RANKING_ORDER="2"
 RELQ_RELEVANCE2ORGQ="Irrelevant"><RelQSubject>Cars</RelQSubject><RelQBody>Cheap car?</RelQBody>
</RelQuestion></Thread></OrgQuestion>
</xml>
"""
CQA_JSONL = _jsonl([{"orgq_id": "Q1", "orgq_subject": "bank", "orgq_body": "which bank",
                     "relq_id": f"Q1_R{i}", "relq_subject": "s", "relq_body": "b", "relq_ranking_order": i,
                     "relq_relevance2orgq": "PerfectMatch", "relq_comments_unverified": ["c"]}
                    for i in (1, 2)])
CQA_RUN = b"Q1\tQ1_R1\t1\t0.9\ttrue\nQ1\tQ1_R2\t2\t0.25\tfalse\nQ2 Q2_R3 3 0.1 true\n"


def _outcome(read: Callable[[], object]) -> None:
    """A clean result or a UserError; anything else fails the test with its traceback."""
    with contextlib.suppress(UserError):
        read()


def _write(directory: Path, name: str, data: bytes) -> Path:
    path = directory / name
    path.write_bytes(data)
    return path


SOURCE_SEEDS = {"q.jsonl": JSONL, "q.csv": CSV, "q.tsv": TSV, "q.txt": TXT, "q.xml": CQA_XML}


@pytest.mark.reliability("fuzzed source files (hypothesis: flipped, deleted, inserted, truncated "
                         "and repeated bytes) of each format: {name}",
                         "a clean result or a one-line user error, never another exception")
@pytest.mark.parametrize("name", [*SOURCE_SEEDS, "q.jsonl.gz", "q.csv.gz"])
def test_source_readers_survive_mutation(tmp_path, name):
    seed = SOURCE_SEEDS.get(name) or gzip.compress(SOURCE_SEEDS[name.removesuffix(".gz")], mtime=0)

    @FUZZ
    @given(data=mutated(seed), skip=st.booleans())
    def read(data: bytes, skip: bool) -> None:
        path = _write(tmp_path, name, data)
        _outcome(lambda: list(SourceFile(path, OnError.skip if skip else OnError.stop).check([])))

    read()


@pytest.mark.reliability("fuzzed gzip content: a valid .gz of a mutated JSON Lines file",
                         "a clean result or a one-line user error, never another exception")
def test_gzipped_sources_survive_mutated_content(tmp_path):
    @FUZZ
    @given(data=mutated(JSONL))
    def read(data: bytes) -> None:
        path = _write(tmp_path, "q.jsonl.gz", gzip.compress(data, mtime=0))
        _outcome(lambda: list(SourceFile(path, OnError.skip).check([])))

    read()


CQA_READERS = {
    "read_cqa_xml": (read_cqa_xml, "cqa.xml", CQA_XML),
    "read_cqa_collection": (read_cqa_collection, "cqa.xml", CQA_XML),
    "read_cqa_threads": (read_cqa_threads, "cqa.xml", CQA_XML),
    "read_cqa_jsonl": (read_cqa_jsonl, "cqa.jsonl", CQA_JSONL),
    "read_cqa_run": (read_cqa_run, "run.relevancy", CQA_RUN),
}


@pytest.mark.reliability("fuzzed SemEval CQA files for `{reader}`",
                         "a clean result or a one-line user error, never another exception")
@pytest.mark.parametrize("reader", sorted(CQA_READERS))
def test_cqa_readers_survive_mutation(tmp_path, reader):
    function, name, seed = CQA_READERS[reader]

    @FUZZ
    @given(data=mutated(seed))
    def read(data: bytes) -> None:
        path = _write(tmp_path, name, data)
        _outcome(lambda: list(function(path)))

    read()


def _manifest_seed() -> bytes:
    return json.dumps({
        "encoder": {"model": "/models/tiny", "fingerprint": "6b5b78841a74be47", "dim": 32},
        "database": "", "index_type": "hnsw",
        "parameters": {"links": 32, "ef_construction": 80, "ef_search": 128, "chosen_for": 5},
        "count": 5, "generation": 1, "faiss_file": "vectors-00000001.faiss",
        "faiss_sha256": "0" * 64, "faiss_bytes": 4, "updated_at": "2026-01-01T00:00:00+00:00",
        "format": 1}, indent=2).encode()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12)


def _open_manifest(directory: Path) -> None:
    manifest = read_manifest(directory)
    if manifest is not None:
        load_faiss(directory, manifest)


@pytest.mark.reliability("fuzzed index manifests: mutated bytes, and each field replaced by "
                         "arbitrary JSON", "a clean result or a one-line user error, never "
                         "another exception (the FAISS file it names is then checked too)")
def test_the_manifest_loader_survives_mutation(tmp_path):
    (tmp_path / "vectors-00000001.faiss").write_bytes(b"FAKE")
    seed = _manifest_seed()
    fields = sorted(json.loads(seed))

    @FUZZ
    @given(data=mutated(seed))
    def mutated_bytes(data: bytes) -> None:
        _write(tmp_path, MANIFEST_FILE, data)
        _outcome(lambda: _open_manifest(tmp_path))

    @FUZZ
    @given(field=st.sampled_from(fields), value=json_values)
    def replaced_field(field: str, value: object) -> None:
        _write(tmp_path, MANIFEST_FILE, json.dumps({**json.loads(seed), field: value}).encode())
        _outcome(lambda: _open_manifest(tmp_path))

    mutated_bytes()
    replaced_field()


# ------------------------------------------------------------------ every command's text options

# text as it reaches a command: any character (controls included), bytes that were not UTF-8
# (kept by Python as lone surrogates), other encodings' bytes read as Latin-1, terminal control
# sequences, Rich markup, quoting and URL delimiters
HOSTILE = ["\x1b[2J", "\x1b]0;title\x07", "\u009b1m", "\u202e", "[/x]", "[bold]", "\x00", "\r", "'", '"',
           "%", "@", ":", "?", "&", "=", "-", "--", "../", "visa", "cheap car", "2024-03-15", "q1"]
_text_piece = st.one_of(
    st.text(max_size=12),
    st.binary(max_size=8).map(lambda data: data.decode("utf-8", errors="surrogateescape")),
    st.text(max_size=8).map(lambda text: text.encode("utf-8").decode("latin-1")),
    st.sampled_from(HOSTILE))
hostile_text = st.lists(_text_piece, max_size=4).map("".join)
argument = hostile_text.map(lambda text: text.replace("\x00", ""))  # argv cannot hold a NUL
# C0 and C1 controls but newline: what a terminal would act on (the tab is harmless)
_RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def fuzz_index(tmp_path_factory, tiny_model) -> Path:
    directory = tmp_path_factory.mktemp("fuzz")
    source = directory / "q.jsonl"
    source.write_bytes(_jsonl(collection(30)))
    assert invoke("index", source, "--model", tiny_model, "--index", directory / "index").exit_code == 0
    return directory / "index"


def _answered_or_refused(result) -> None:
    """Exit 0, or exit 2 with one ``error:`` line; no traceback, no raw control character."""
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert not _RAW_CONTROL.search(result.stdout + result.stderr), repr(result.output)


def _option(name: str, value: str | None) -> list[str]:
    return [] if value is None else [f"{name}={value}"]


maybe = st.none() | argument  # an option left out, or given


@pytest.mark.reliability("random text, undecodable bytes and control characters in every text "
                         "option of `search` (the query, --source, --category, --since, --until, "
                         "--db) and in queries piped in",
                         "results as JSON lines for the query given, or exit 2 with one line; "
                         "no raw control character printed")
@pytest.mark.slow
def test_search_text_options_survive_fuzzing(fuzz_index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative --db names nothing outside

    @FUZZ
    @given(query=argument, source=maybe, category=maybe, since=maybe, until=maybe, database=maybe,
           as_json=st.booleans())
    def search(query, source, category, since, until, database, as_json) -> None:
        options = [*_option("--source", source), *_option("--category", category),
                   *_option("--since", since), *_option("--until", until), *_option("--db", database)]
        result = invoke("search", "--index", fuzz_index, *options, *(["--json"] if as_json else []),
                        "--", query)
        _answered_or_refused(result)
        if result.exit_code == 0 and as_json and query != "-":
            assert all(json.loads(line)["query"] == query for line in result.stdout.splitlines())

    @FUZZ
    @given(data=st.binary(max_size=64) | hostile_text.map(lambda t: t.encode("utf-8", "surrogateescape")))
    def piped(data: bytes) -> None:
        _answered_or_refused(invoke("search", "--index", fuzz_index, "--json", input=data))

    search()
    piped()


@pytest.mark.reliability("random text, undecodable bytes and control characters as the texts of "
                         "`similar`, the ids and --source of `delete`, --db of `index-info` and "
                         "`check`, --index-type and --model of `index`, and the file names of "
                         "`score` and `rerank`", "a correct answer, or exit 2 with one line; no "
                         "raw control character printed; nothing deleted or changed")
@pytest.mark.slow
def test_other_commands_text_options_survive_fuzzing(fuzz_index, tiny_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative --db, --out and file names name nothing outside
    stored = {f"q{i}" for i in range(30)}
    state = (fuzz_index / "manifest.json").read_bytes()

    @given(first=argument, second=argument, ids=st.lists(argument, min_size=1, max_size=3),
           source=maybe, database=maybe, index_type=maybe, model=maybe,
           names=st.tuples(argument, argument))
    def commands(first, second, ids, source, database, index_type, model, names) -> None:
        similar = invoke("similar", "--model", tiny_model, "--json", "--", first, second)
        _answered_or_refused(similar)
        if similar.exit_code == 0:
            assert -1 <= json.loads(similar.stdout)["cosine"] <= 1
        deleted = invoke("delete", "--index", fuzz_index, *_option("--source", source), "--",
                         *[i for i in ids if i not in stored] or ["no-such-id"])
        _answered_or_refused(deleted)
        assert deleted.exit_code == 2  # no stored id was named
        for command in ("index-info", "check"):
            _answered_or_refused(invoke(command, "--index", fuzz_index, *_option("--db", database)))
        _answered_or_refused(invoke("index", "--index", fuzz_index, *_option("--index-type", index_type),
                                    *_option("--model", model), "--dry-run"))
        _answered_or_refused(invoke("score", "--", *names))
        _answered_or_refused(invoke("rerank", "--out", "run.pred", "--model", tiny_model, "--", names[0]))

    settings(FUZZ, max_examples=30)(commands)()  # seven commands an example
    assert (fuzz_index / "manifest.json").read_bytes() == state
