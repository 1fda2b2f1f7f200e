"""``--engine ray``: the same vectors, answers and resumes as the in-process engine, on a local Ray
instance (one for the module); and one-line errors, losing nothing, when Ray is missing or its
cluster cannot be reached."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import QUIET, ROOT, collection, own_database, runner, stored_state, write_jsonl

from askalike.app.cli import app
from askalike.core.loader import load_encoder
from askalike.core.model_dir import weights_fingerprint
from askalike.indexer import ray_engine
from askalike.indexer.build import IndexOptions, index_sources
from askalike.indexer.choices import Engine
from askalike.indexer.directory import check_index
from askalike.indexer.ray_engine import EngineError, RayEngine
from askalike.indexer.store import Store
from askalike.retrieval.searcher import Searcher

RAY_MISSING = importlib.util.find_spec("ray") is None
needs_ray = pytest.mark.skipif(RAY_MISSING, reason="the Ray engine needs Ray: pip install -e '.[ray]'")

OPTIONS = IndexOptions(commit_every=40, batch_size=16, show_progress=False)
RAY = IndexOptions(commit_every=40, batch_size=16, show_progress=False, engine=Engine.ray)
QUERIES = ["cheap car in doha", "visa for expats", "a good school near the pearl"]


def on_local_ray(test):
    """Needs Ray, and the module's local Ray instance: 10 to 15 s to start it and its workers."""
    return pytest.mark.slow(needs_ray(test))


@pytest.fixture(scope="module")
def local_ray():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> list[Path]:
    """300 questions in two sources: chunks of 40 and a shorter last one in each."""
    folder, records = tmp_path_factory.mktemp("sources"), collection(300)
    return [write_jsonl(folder / "a.jsonl", records[:170]), write_jsonl(folder / "b.jsonl", records[170:])]


@pytest.fixture(scope="module")
def in_process(tmp_path_factory, sources, tiny_model) -> Path:
    """The reference: the sources indexed by the in-process engine."""
    index_dir = tmp_path_factory.mktemp("in-process") / "index"
    index_sources(index_dir, sources, str(tiny_model), options=OPTIONS)
    return index_dir


def _answers(index_dir: Path) -> list[list[tuple[str, float]]]:
    with Searcher(index_dir) as searcher:
        return [[(hit.external_id, hit.cosine) for hit in hits]
                for hits in searcher.search_many(QUERIES, k=10)]


@on_local_ray
def test_chunks_come_back_in_order_and_bit_identical(local_ray, tiny_model):
    """Each chunk is one encode call, as in process: a long first chunk does not let the short
    ones after it come back first, and padding is per chunk as in process."""
    texts = [record["body"] for record in collection(400)]
    chunks = [texts[:300], texts[300:301], texts[301:303], texts[303:350], texts[350:]]
    encoder = load_encoder(tiny_model)
    engine = RayEngine(str(tiny_model), weights_fingerprint(tiny_model), batch_size=16)
    got = list(engine.embed(iter(chunks)))
    assert len(got) == len(chunks)
    for chunk, vectors in zip(chunks, got, strict=True):
        assert np.array_equal(vectors, encoder.encode(chunk, batch_size=16))


@on_local_ray
def test_the_ray_engine_stores_and_answers_as_in_process(local_ray, tmp_path, sources, tiny_model,
                                                         in_process, monkeypatch):
    monkeypatch.setattr(ray_engine, "WINDOW_TEXTS", 100)  # several Ray pipelines in one run
    report = index_sources(tmp_path / "index", sources, str(tiny_model), options=RAY)
    assert (report.added, report.total) == (300, 300)
    assert stored_state(tmp_path / "index", own_database(tmp_path / "index")) == stored_state(in_process,
                                                                                      own_database(in_process))
    assert _answers(tmp_path / "index") == _answers(in_process)
    assert check_index(tmp_path / "index").ok


class Interrupted(Exception):
    pass


@on_local_ray
def test_an_interrupted_ray_run_resumes_to_the_in_process_state(local_ray, tmp_path, sources, tiny_model,
                                                                in_process, monkeypatch):
    write, calls = Store.write, []

    def failing_write(store, *args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise Interrupted
        return write(store, *args, **kwargs)

    monkeypatch.setattr(Store, "write", failing_write)
    with pytest.raises(Interrupted):
        index_sources(tmp_path / "index", sources, str(tiny_model), options=RAY)
    assert len(stored_state(tmp_path / "index", own_database(tmp_path / "index"))) == 3 * 40
    monkeypatch.setattr(Store, "write", write)
    report = index_sources(tmp_path / "index", sources, None, options=RAY)
    assert (report.added, report.unchanged, report.total) == (180, 120, 300)
    assert stored_state(tmp_path / "index", own_database(tmp_path / "index")) == stored_state(in_process,
                                                                                      own_database(in_process))
    monkeypatch.setattr(ray_engine, "ray", None)  # nothing left to embed: Ray is not needed
    assert index_sources(tmp_path / "index", sources, None, options=RAY).unchanged == 300


@on_local_ray
def test_a_node_without_the_model_is_a_one_line_error(local_ray, tmp_path):
    engine = RayEngine(str(tmp_path / "not-here"), "0" * 16, batch_size=16)
    with pytest.raises(EngineError, match=r"a Ray task cannot embed on .*not-here: no weights"):
        list(engine.embed(iter([["a question?"]])))


def test_without_ray_the_engine_says_how_to_install_it_and_changes_nothing(tmp_path, sources, tiny_model,
                                                                           monkeypatch):
    monkeypatch.setattr(ray_engine, "ray", None)
    index_dir = tmp_path / "index"
    index_sources(index_dir, sources[:1], str(tiny_model), options=QUIET)
    before = stored_state(index_dir, own_database(index_dir))
    result = runner.invoke(app, ["index", *map(str, sources), "--index", str(index_dir),
                                      "--engine", "ray", "--json"])
    assert result.exit_code == 2
    assert "pip install 'askalike[ray]'" in result.output
    assert stored_state(index_dir, own_database(index_dir)) == before


@on_local_ray
def test_the_command_starts_a_local_ray_of_its_own_and_stays_quiet(tmp_path, sources, tiny_model, in_process):
    """As a user runs it: no cluster given, in a fresh process; stdout holds the JSON alone, and
    Ray adds nothing to stderr."""
    env = {name: value for name, value in os.environ.items() if name != "RAY_ADDRESS"}
    result = subprocess.run([sys.executable, "-m", "askalike.app", "index", *map(str, sources), "--model",
                             str(tiny_model), "--index", str(tmp_path / "index"), "--engine", "ray",
                             "--commit-every", "40", "--batch-size", "16", "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["added"] == 300 and result.stderr == ""
    assert stored_state(tmp_path / "index", own_database(tmp_path / "index")) == stored_state(in_process,
                                                                                      own_database(in_process))


@needs_ray
def test_an_unreachable_cluster_is_a_one_line_error(tmp_path, sources, tiny_model):
    """In a fresh process, as a user runs it (this module's Ray is already connected)."""
    result = subprocess.run([sys.executable, "-m", "askalike.app", "index", str(sources[0]), "--model",
                             str(tiny_model), "--index", str(tmp_path / "index"), "--engine", "ray",
                             "--ray-address", "127.0.0.1:1", "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "index").exists()  # a failed first run leaves no index directory

