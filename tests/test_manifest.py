"""An index directory's manifest (``indexer.manifest``) and layout (``indexer.layout``): the
manifest is type-checked and names only files inside the directory, the files it names are
verified on every open, replacing it drops the files it no longer names, the database it names
survives a move of the directory, and one writer holds the lock."""

from __future__ import annotations

import json
import os
from dataclasses import replace

import faiss
import numpy as np
import pytest

from askalike.core.files import known_sha256, remember_sha256
from askalike.core.model_dir import EncoderIdentity
from askalike.indexer.layout import (
    MANIFEST_FILE,
    OWN_DATABASE,
    IndexDirectoryError,
    database_entry,
    database_url_of_entry,
    default_database_url,
    ensure_index_id,
    faiss_file_name,
    index_lock,
)
from askalike.indexer.manifest import Manifest, load_faiss, read_manifest, write_manifest
from askalike.indexer.vector_index import build_index, write_index

DIM = 4


def _manifest_with_index(index_dir, generation: int = 1) -> Manifest:
    vectors = np.eye(DIM, dtype=np.float32)
    index = build_index("flat", {}, DIM, iter([(np.arange(DIM, dtype=np.int64), vectors)]))
    name = faiss_file_name(generation)
    digest = write_index(index, index_dir / name)
    return Manifest(encoder=EncoderIdentity("m", "f", DIM), database=OWN_DATABASE, index_type="flat",
                    parameters={}, count=DIM, generation=generation, faiss_file=name,
                    faiss_sha256=digest, faiss_bytes=(index_dir / name).stat().st_size)


def test_a_manifest_round_trips_and_is_type_checked(tmp_path):
    manifest = _manifest_with_index(tmp_path)
    write_manifest(tmp_path, manifest)
    assert read_manifest(tmp_path) == manifest
    values = json.loads((tmp_path / MANIFEST_FILE).read_text())
    for key, bad in (("count", True), ("generation", "1"), ("faiss_file", "../outside.faiss")):
        (tmp_path / MANIFEST_FILE).write_text(json.dumps({**values, key: bad}))
        with pytest.raises(IndexDirectoryError, match="check --repair"):
            read_manifest(tmp_path)
    (tmp_path / MANIFEST_FILE).write_text(json.dumps({**values, "format": 99}))
    with pytest.raises(IndexDirectoryError, match="manifest format 99"):
        read_manifest(tmp_path)


def test_the_faiss_file_is_verified_on_every_open(tmp_path):
    manifest = _manifest_with_index(tmp_path)
    assert load_faiss(tmp_path, manifest).ntotal == DIM
    path = tmp_path / manifest.faiss_file
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(IndexDirectoryError, match="checksum"):
        load_faiss(tmp_path, manifest)
    path.write_bytes(bytes(data[:-1]))
    with pytest.raises(IndexDirectoryError, match="truncated"):
        load_faiss(tmp_path, manifest)


def test_a_file_removed_while_it_is_verified_is_missing(tmp_path, monkeypatch):
    """A writer may remove an earlier generation's file after a reader saw it and before the
    reader hashes it: that is the file missing (which ``open_index`` answers by reading the new
    manifest), not an error of another kind."""
    from askalike.indexer import manifest as manifest_module

    manifest = _manifest_with_index(tmp_path)

    def removed_first(path):
        path.unlink()
        return known_sha256(path)

    monkeypatch.setattr(manifest_module, "known_sha256", removed_first)
    with pytest.raises(IndexDirectoryError, match="missing"):
        load_faiss(tmp_path, manifest)


def test_replacing_the_manifest_drops_the_files_it_no_longer_names(tmp_path):
    first = _manifest_with_index(tmp_path, generation=1)
    write_manifest(tmp_path, first)
    second = _manifest_with_index(tmp_path, generation=2)
    write_manifest(tmp_path, second)
    assert not (tmp_path / first.faiss_file).exists()
    assert (tmp_path / second.faiss_file).exists()
    assert isinstance(load_faiss(tmp_path, replace(second)).main, faiss.Index)


def test_the_database_a_manifest_names(tmp_path):
    own = default_database_url(tmp_path)
    assert database_entry(tmp_path, own, own) == OWN_DATABASE
    assert database_url_of_entry(tmp_path, OWN_DATABASE, "ENV") == own
    assert database_url_of_entry(tmp_path, None, "ENV") == own
    server = "postgresql+psycopg://bob@db/askalike"
    assert database_entry(tmp_path, server, server) == server
    assert database_url_of_entry(tmp_path, server, "ENV") == server
    with pytest.raises(IndexDirectoryError, match=r"password by --db or \$ENV"):
        database_url_of_entry(tmp_path, "postgresql+psycopg://bob:***@db/askalike", "ENV")
    # an older manifest's absolute URL of a directory since moved: this directory's own file
    (tmp_path / "askalike.sqlite3").touch()
    assert database_url_of_entry(tmp_path, "sqlite:////gone/askalike.sqlite3", "ENV") == own


def test_one_writer_holds_the_lock_and_the_id_is_made_once(tmp_path):
    with (index_lock(tmp_path), pytest.raises(IndexDirectoryError, match="one writer at a time"),
          index_lock(tmp_path)):
        pass
    with index_lock(tmp_path):  # released
        pass
    assert ensure_index_id(tmp_path) == ensure_index_id(tmp_path)


def test_a_file_this_process_wrote_is_verified_without_reading_it_again(tmp_path, monkeypatch):
    """A server opens the file it has just written after each write: its checksum is the one
    computed while writing, for as long as the file is the same, unchanged file."""
    manifest = _manifest_with_index(tmp_path)
    path = tmp_path / manifest.faiss_file
    reads = []
    monkeypatch.setattr("askalike.core.files.file_sha256", lambda p: reads.append(p) or "read")
    assert load_faiss(tmp_path, manifest).ntotal == DIM and reads == []
    replaced = path.with_name("copy")
    replaced.write_bytes(path.read_bytes())
    replaced.replace(path)  # the same bytes, but another file
    assert known_sha256(path) == "read" and reads == [path]
    remember_sha256(path, manifest.faiss_sha256)
    before = path.stat()
    path.write_bytes(path.read_bytes())  # changed in place: a later modification time
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert known_sha256(path) == "read"
