"""`askalike check` against a database changed behind askalike's back, each row still passing
its checksum: another question's vector, a subject edited without being embedded again, and
(`--deep`) a vector that is simply not its text's. `check --repair` embeds exactly those again
from their stored text, never building the FAISS file from them."""

from __future__ import annotations

import json
import sqlite3
import zlib

import numpy as np
import pytest
from helpers import collection, index, invoke, write_jsonl

from askalike.core.loader import load_encoder
from askalike.core.text import join_subject_body


def _row(connection, external_id):
    return connection.execute("SELECT id, subject, body, vector FROM questions WHERE external_id = ?",
                              (external_id,)).fetchone()


def _give_vector(database, external_id, blob) -> None:
    """Set a question's stored vector, checksum and all, as a program writing the database would."""
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE questions SET vector = ?, vector_crc32 = ? WHERE external_id = ?",
                            (blob, zlib.crc32(blob), external_id))


def _check(index_dir, *options):
    result = invoke("check", "--index", index_dir, "--json", *options)
    return result.exit_code, json.loads(result.stdout)


def _fresh(model, database, external_id) -> np.ndarray:
    with sqlite3.connect(database) as connection:
        _, subject, body, _ = _row(connection, external_id)
    return load_encoder(str(model)).encode([join_subject_body(subject, body)])[0]


def _stored(database, external_id) -> np.ndarray:
    with sqlite3.connect(database) as connection:
        return np.frombuffer(_row(connection, external_id)[3], dtype="<f4")


@pytest.mark.reliability("another question's vector written into a row (its checksum recomputed), "
                         "and a subject edited in the database without embedding it again; then "
                         "`check` and `check --repair`",
                         "check exits 1 naming both questions (the vector differs from the FAISS "
                         "file's copy; the text from its content hash); the repair embeds just those "
                         "two again from their text, and check is clean")
def test_a_vector_that_is_not_its_questions_is_found_and_embedded_again(tmp_path, tiny_model):
    index(write_jsonl(tmp_path / "q.jsonl", collection(40)), tmp_path / "index", tiny_model)
    database = tmp_path / "index" / "askalike.sqlite3"
    with sqlite3.connect(database) as connection:
        other = _row(connection, "q2")[3]
        connection.execute("UPDATE questions SET subject = 'edited in place' WHERE external_id = 'q7'")
    _give_vector(database, "q1", other)
    status, report = _check(tmp_path / "index")
    assert status == 1 and not report["damaged"]
    assert [line.split(" of ")[0] for line in report["mismatched"]] == ["'q1'", "'q7'"]
    assert "FAISS file's copy" in report["mismatched"][0] and "content hash" in report["mismatched"][1]
    status, repaired = _check(tmp_path / "index", "--repair")
    assert status == 0 and repaired["ok"] and repaired["reembedded"] == 2, repaired
    for external_id in ("q1", "q7"):
        assert float(_stored(database, external_id) @ _fresh(tiny_model, database, external_id)) > 0.9999


@pytest.mark.reliability("another question's vector written into a row of an `ivf` index (whose FAISS "
                         "file keeps no float32 copy to compare), then `check`, `check --deep` and "
                         "`check --repair --deep`",
                         "check cannot see it; --deep embeds a sample again and names it (cosine "
                         "under 0.99); the repair embeds it again")
def test_deep_finds_a_vector_that_is_not_its_texts(tmp_path, tiny_model):
    index(write_jsonl(tmp_path / "q.jsonl", collection(60)), tmp_path / "index", tiny_model,
          "--index-type", "ivf")
    database = tmp_path / "index" / "askalike.sqlite3"
    with sqlite3.connect(database) as connection:
        _give_vector(database, "q3", _row(connection, "q40")[3])
    assert _check(tmp_path / "index")[0] == 0  # nothing to compare it with
    status, deep = _check(tmp_path / "index", "--deep")
    assert status == 1 and deep["deep_checked"] == 60
    assert len(deep["mismatched"]) == 1 and deep["mismatched"][0].startswith("'q3' of ")
    status, repaired = _check(tmp_path / "index", "--repair", "--deep")
    assert status == 0 and repaired["reembedded"] == 1 and repaired["mismatched"] == []
