"""Fuzzing every reader with mutated files: the only outcomes allowed are a clean result or a
user-facing error (UserError), never another exception. Bounded to run in seconds."""

from __future__ import annotations

import contextlib
import gzip
import json
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from helpers import collection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.cqa_questions import read_cqa_collection, read_cqa_jsonl, read_cqa_threads, read_cqa_xml
from core.errors import UserError
from indexer.layout import MANIFEST_FILE
from indexer.manifest import load_faiss, read_manifest
from indexer.sources import OnError, SourceFile
from retrieval.cqa_runs import read_cqa_run

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
# bytes that matter to some format: quotes, separators, line ends, NUL, invalid UTF-8, markup
TOKENS = [b'"', b",", b"\t", b"\n", b"\r", b"\x00", b"\xff", b"\xc3", b"<", b">", b"&", b"{", b"}",
          b"[", b"]", b"\\", b"NaN", b"<!ENTITY e 'x'>", b"&e;", b"[" * 3000, b"\xef\xbb\xbf"]

_edit = st.tuples(st.sampled_from(["flip", "delete", "insert", "truncate", "repeat"]),
                  st.floats(0, 1), st.one_of(st.sampled_from(TOKENS), st.binary(min_size=1, max_size=6)))


def _apply(seed: bytes, edits: Iterable[tuple[str, float, bytes]]) -> bytes:
    data = bytearray(seed)
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
    return st.lists(_edit, min_size=1, max_size=4).map(lambda edits: _apply(seed, edits))


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
