"""Indexing at scale: a run streamed in chunks that resumes where an interruption left it, the
index type chosen by size, refined approximate indexes that answer like exact search, and the
search settings of approximate indexes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import faiss
import numpy as np
import pytest
from helpers import (
    QUIET,
    ROOT,
    collection,
    documented_schema,
    own_database,
    runner,
    search_hits,
    stored_state,
    write_jsonl,
)

import askalike.indexer.build
from askalike.app.cli import app
from askalike.core import lexical
from askalike.core.datasets import DataError
from askalike.core.lexical import LexicalIndex
from askalike.core.loader import load_encoder
from askalike.indexer import index_type_choice
from askalike.indexer.build import IndexOptions, index_sources, plan_sources
from askalike.indexer.choices import OnError
from askalike.indexer.directory import check_index
from askalike.indexer.index_type_choice import auto_index_type, resolve_index_type
from askalike.indexer.index_types import INDEX_TYPES, Hnsw, IndexBuildError
from askalike.indexer.layout import MANIFEST_FILE
from askalike.indexer.manifest import read_manifest
from askalike.indexer.sources import SourceFile
from askalike.indexer.vector_index import build_index, search_parameters, training_sample, training_size
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.searcher import Searcher, SearchError, SearchFilters, SearchSettings


class Interrupted(Exception):
    pass


class RecordingEncoder:
    """An encoder that records the size of each chunk it embeds, and fails on call ``fail_at``."""

    def __init__(self, encoder, fail_at: int | None = None) -> None:
        self.encoder, self.fail_at, self.chunks = encoder, fail_at, []

    def __getattr__(self, name: str):
        return getattr(self.encoder, name)

    def encode(self, texts, batch_size: int = 256):
        if len(self.chunks) + 1 == self.fail_at:
            raise Interrupted
        self.chunks.append(len(texts))
        return self.encoder.encode(texts, batch_size=batch_size)


def recording(monkeypatch, fail_at: int | None = None) -> list[RecordingEncoder]:
    """Make index runs embed through RecordingEncoders; the list gets each run's."""
    made: list[RecordingEncoder] = []

    def load(spec, threads=None):
        made.append(RecordingEncoder(load_encoder(spec, threads=threads), fail_at))
        return made[-1]

    monkeypatch.setattr(askalike.indexer.build, "load_encoder", load)
    return made


CHUNKS = [40, 40, 40, 10, 40, 40, 40]  # 130 questions of a.jsonl, then 120 of b.jsonl, 40 a chunk


@pytest.mark.parametrize("fail_at", [2, 6])  # in the first source, in the second
def test_an_interrupted_run_resumes_from_its_last_chunk(tmp_path, tiny_model, monkeypatch, fail_at):
    records = collection(250)
    sources = [write_jsonl(tmp_path / "a.jsonl", records[:130]),
               write_jsonl(tmp_path / "b.jsonl", records[130:])]
    options = IndexOptions(commit_every=40, show_progress=False)
    clean = recording(monkeypatch)
    index_sources(tmp_path / "clean", sources, str(tiny_model), options=options)
    assert clean[0].chunks == CHUNKS

    interrupted = recording(monkeypatch, fail_at)
    with pytest.raises(Interrupted):
        index_sources(tmp_path / "index", sources, str(tiny_model), options=options)
    committed = sum(CHUNKS[: fail_at - 1])
    assert len(stored_state(tmp_path / "index", own_database(tmp_path / "index"))) == committed
    assert interrupted[0].chunks == CHUNKS[: fail_at - 1]

    resumed = recording(monkeypatch)
    report = index_sources(tmp_path / "index", sources, None, options=options)
    assert resumed[0].chunks == CHUNKS[fail_at - 1 :]  # the same chunks as the clean run's rest
    assert (report.added, report.unchanged, report.total) == (250 - committed, committed, 250)
    assert stored_state(tmp_path / "index", own_database(tmp_path / "index")) == stored_state(
        tmp_path / "clean", own_database(tmp_path / "clean"))
    assert check_index(tmp_path / "index").ok


def test_a_source_changed_between_the_two_passes_is_refused(tmp_path):
    path = write_jsonl(tmp_path / "q.jsonl", collection(5))
    source = SourceFile(path, OnError.stop)
    assert len(list(source.check([]))) == 5
    write_jsonl(path, collection(6))
    with pytest.raises(DataError, match=r"q\.jsonl: changed while it was being indexed"):
        list(source.questions())


def test_auto_type_thresholds():
    assert auto_index_type(index_type_choice.AUTO_FLAT_MAX)[0] == "flat"
    assert auto_index_type(index_type_choice.AUTO_FLAT_MAX + 1)[0] == "hnsw"
    assert auto_index_type(index_type_choice.AUTO_HNSW_MAX)[0] == "hnsw"
    assert auto_index_type(index_type_choice.AUTO_HNSW_MAX + 1)[0] == "ivfpq"
    assert resolve_index_type(None, "ivf", 10**7) == ("ivf", "the index's own type")
    assert resolve_index_type("hnsw", "flat", 10) == ("hnsw", "given by --index-type")
    assert resolve_index_type("auto", "flat", index_type_choice.AUTO_HNSW_MAX + 1)[0] == "ivfpq"
    with pytest.raises(IndexBuildError, match=r"unknown index type 'annoy' \(known: auto, flat"):
        resolve_index_type("annoy", None, 10)


@pytest.fixture
def small_thresholds(monkeypatch):
    monkeypatch.setattr(index_type_choice, "AUTO_FLAT_MAX", 30)
    monkeypatch.setattr(index_type_choice, "AUTO_HNSW_MAX", 60)


def test_auto_picks_by_size_and_an_index_keeps_its_type(tmp_path, tiny_model, small_thresholds):
    records = collection(700)
    source = write_jsonl(tmp_path / "q.jsonl", records[:25])
    first = index_sources(tmp_path / "index", [source], str(tiny_model), options=QUIET)
    assert first.index_type == "flat" and first.index_type_reason.startswith("auto: ")

    write_jsonl(source, records[:50])
    assert plan_sources(tmp_path / "index", [source]).index_type == "flat"
    grown = index_sources(tmp_path / "index", [source], None, options=QUIET)
    assert (grown.index_type, grown.index_type_reason) == ("flat", "the index's own type")
    assert not grown.faiss_rebuilt

    auto = IndexOptions(index_type="auto", show_progress=False)
    assert plan_sources(tmp_path / "index", [source], options=auto).index_type == "hnsw"
    again = index_sources(tmp_path / "index", [source], None, options=auto)
    assert again.index_type == "hnsw" and again.faiss_rebuilt
    assert read_manifest(tmp_path / "index").index_type == "hnsw"

    large = write_jsonl(tmp_path / "large.jsonl", records)
    report = index_sources(tmp_path / "large", [large], str(tiny_model), options=QUIET)
    assert report.index_type == "ivfpq" and "over hnsw's 60" in report.index_type_reason
    assert report.parameters["refine"] == "SQfp16" and report.parameters["k_factor"] >= 1
    assert isinstance(faiss.downcast_index(_faiss(tmp_path / "large").index), faiss.IndexRefine)
    assert check_index(tmp_path / "large").ok


def _faiss(index_dir: Path) -> faiss.Index:
    with Searcher(index_dir) as searcher:
        return searcher.index.faiss.main


def _clustered(count: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((count // 100, dim))
    vectors = (centers[rng.integers(0, len(centers), count)]
               + 0.6 * rng.standard_normal((count, dim))).astype(np.float32)
    faiss.normalize_L2(vectors)
    return vectors


def _recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact, strict=True)]))


@pytest.mark.parametrize("index_type", ["hnsw", "ivfpq"])
def test_approximate_indexes_answer_like_exact_search(index_type):
    count, dim = 4000, 32
    vectors = _clustered(count, dim, seed=1)
    queries = _clustered(100, dim, seed=2)
    ids = np.arange(count, dtype=np.int64) * 3 + 5  # row ids need not be positions

    def chunks():
        return ((ids[i : i + 1000], vectors[i : i + 1000]) for i in range(0, count, 1000))

    parameters = INDEX_TYPES[index_type].parameters(count, dim)
    size = training_size(parameters)
    index = build_index(index_type, parameters, dim, chunks(),
                        training_sample(chunks(), count, size) if size else None)
    exact = faiss.IndexFlatIP(dim)
    exact.add(vectors)
    assert _recall(index.search(queries, 10)[1], ids[exact.search(queries, 10)[1]]) >= 0.9

    allowed = ids[ids % 2 == 1]  # every other question passes a filter
    exact_allowed = faiss.IndexFlatIP(dim)
    exact_allowed.add(vectors[ids % 2 == 1])
    found = index.search(queries, 10, params=search_parameters(index, allowed, {}))[1]
    assert np.isin(found, allowed).all()
    assert _recall(found, allowed[exact_allowed.search(queries, 10)[1]]) >= 0.9


def test_a_training_sample_is_reproducible_and_read_in_chunks():
    vectors = np.arange(200, dtype=np.float32).reshape(100, 2)
    chunks = [(np.arange(i, i + 30), vectors[i : i + 30]) for i in range(0, 100, 30)]
    sample = training_sample(iter(chunks), 100, 20)
    assert sample.shape == (20, 2) and len(np.unique(sample[:, 0])) == 20
    np.testing.assert_array_equal(sample, training_sample(iter(chunks), 100, 20))
    assert np.isin(sample, vectors).all()
    np.testing.assert_array_equal(training_sample(iter(chunks), 100, 100), vectors)


@pytest.fixture(scope="module")
def indexes(tmp_path_factory, tiny_model) -> dict[str, Path]:
    """The same 700 questions as a flat, an hnsw and an ivfpq index."""
    directory = tmp_path_factory.mktemp("types")
    source = write_jsonl(directory / "q.jsonl", collection(700))
    built = {}
    for index_type in ("flat", "hnsw", "ivfpq"):
        built[index_type] = directory / index_type
        index_sources(built[index_type], [source], str(tiny_model),
                      options=IndexOptions(index_type=index_type, show_progress=False))
    return built


@pytest.mark.parametrize(("index_type", "settings", "message"), [
    ("flat", SearchSettings(ef_search=10), r"--ef-search does not apply to this flat index \(it has no"),
    ("hnsw", SearchSettings(probes=3), r"--nprobe does not apply to this hnsw index \(its settings: --ef-se"),
    ("ivfpq", SearchSettings(ef_search=3), r"its settings: --nprobe, --k-factor"),
    ("ivfpq", SearchSettings(probes=10_000), r"--nprobe 10000: the index has \d+ lists"),
    ("ivfpq", SearchSettings(k_factor=0), r"--k-factor 0: must be at least 1"),
])
def test_search_settings_that_do_not_fit_the_index_are_refused(indexes, index_type, settings, message):
    with pytest.raises(SearchError, match=message):
        Searcher(indexes[index_type], settings=settings)


def test_search_settings_are_recorded_and_can_be_overridden(indexes):
    manifest = read_manifest(indexes["hnsw"])
    assert manifest.parameters["ef_search"] == Hnsw.ef_search(700)
    with Searcher(indexes["hnsw"], settings=SearchSettings(ef_search=7)) as searcher:
        assert faiss.downcast_index(searcher.index.faiss.main.index).hnsw.efSearch == 7
    with Searcher(indexes["ivfpq"], settings=SearchSettings(probes=2, k_factor=3)) as searcher:
        assert faiss.extract_index_ivf(searcher.index.faiss.main).nprobe == 2
        assert faiss.downcast_index(searcher.index.faiss.main.index).k_factor == 3
    with Searcher(indexes["ivfpq"]) as searcher:  # without settings: the recorded ones
        assert faiss.downcast_index(searcher.index.faiss.main.index).k_factor == (
            read_manifest(indexes["ivfpq"]).parameters["k_factor"])


@pytest.mark.parametrize("index_type", ["hnsw", "ivfpq"])
def test_filtered_search_and_more_like_this_on_approximate_indexes(indexes, index_type):
    with Searcher(indexes["flat"]) as exact, Searcher(indexes[index_type]) as searcher:
        filters = SearchFilters(categories=("visa",))
        results = searcher.search("cheap visa for expats", k=5, filters=filters, mode=SearchMode.dense)
        assert len(results) == 5 and {r.metadata["category"] for r in results} == {"visa"}
        expected = exact.search("cheap visa for expats", k=5, filters=filters, mode=SearchMode.dense)
        assert len({r.external_id for r in results} & {r.external_id for r in expected}) >= 4
        target = results[0].row_id
        similar = searcher.more_like(target, k=5)
        assert len(similar) == 5 and target not in {r.row_id for r in similar}


class FakeGpuIndex:
    """Stands in for FAISS's copy of an index on the GPUs, counting the searches it answers."""

    def __init__(self, index: faiss.Index) -> None:
        self.index, self.searches = faiss.clone_index(index), 0

    def search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        self.searches += 1
        return self.index.search(vectors, k)


def test_a_flat_index_is_searched_on_the_gpus_where_faiss_has_them(indexes, monkeypatch):
    query, visa = "cheap visa for expats", SearchFilters(categories=("visa",))

    def answers(searcher: Searcher, filters: SearchFilters | None = None) -> list[tuple[str, float]]:
        return [(r.external_id, r.cosine) for r in searcher.search(query, 5, filters, SearchMode.dense)]

    with Searcher(indexes["flat"]) as searcher:  # CPU FAISS: the CPU index, as before
        assert (searcher.gpu_faiss is None) == (faiss.get_num_gpus() == 0)
        expected, expected_visa = answers(searcher), answers(searcher, visa)
    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1)
    monkeypatch.setattr(faiss, "index_cpu_to_all_gpus", FakeGpuIndex)
    with Searcher(indexes["flat"]) as searcher, Searcher(indexes["hnsw"]) as hnsw:
        assert hnsw.gpu_faiss is None  # no GPU form
        assert answers(searcher) == expected and searcher.gpu_faiss.main.searches == 1
        assert answers(searcher, visa) == expected_visa  # a filter: on the CPU index
        assert searcher.gpu_faiss.main.searches == 1


def test_an_ivfpq_index_without_refinement_is_rebuilt_with_it(tmp_path, tiny_model):
    source = write_jsonl(tmp_path / "q.jsonl", collection(700))
    options = IndexOptions(index_type="ivfpq", show_progress=False)
    index_sources(tmp_path / "index", [source], str(tiny_model), options=options)
    path = tmp_path / "index" / MANIFEST_FILE
    older = json.loads(path.read_text())  # as an older askalike wrote it
    del older["parameters"]["refine"], older["parameters"]["k_factor"]
    path.write_text(json.dumps(older))
    report = index_sources(tmp_path / "index", [source], None, options=QUIET)
    assert report.faiss_rebuilt and report.added == 0 and report.parameters["k_factor"] >= 1
    assert check_index(tmp_path / "index").ok


def test_search_options_on_the_command_line(indexes):
    bad = runner.invoke(app, ["search", "visa", "--index", str(indexes["flat"]), "--nprobe", "0"])
    assert bad.exit_code == 2 and "--nprobe" in bad.output
    wrong = runner.invoke(app, ["search", "visa", "--index", str(indexes["flat"]), "--ef-search", "64"])
    assert wrong.exit_code == 2
    assert wrong.stderr.startswith("error: --ef-search does not apply to this flat index")
    good = runner.invoke(app, ["search", "visa", "--index", str(indexes["ivfpq"]), "--nprobe", "4",
                               "--k-factor", "8", "-k", "3", "--json", "--mode", "dense"])
    assert good.exit_code == 0 and len(search_hits(good.stdout)) == 3


def test_the_lexical_index_is_built_in_parts(monkeypatch):
    documents = {i: f"question {i} about visa number {i % 7}" for i in range(50)}
    whole = LexicalIndex.build(documents.items())
    monkeypatch.setattr(lexical, "_POSTINGS_PER_PART", 8)
    parts = LexicalIndex.build(documents.items())
    assert parts.terms == whole.terms
    for query in ("visa", "number 3", "question 12"):
        np.testing.assert_array_equal(parts.scores(query), whole.scores(query))
    with pytest.raises(ValueError, match="added twice"):
        whole.updated([(1, "a"), (1, "b")], ())


def test_a_new_index_type_is_one_class(tmp_path, tiny_model, monkeypatch):
    """Adding an index type built from FAISS's parts (here IVF over 8-bit scalar-quantised
    vectors) is a subclass in indexer/index_types.py, listed in its registry: the run builds it
    and searches read its lists with their own nprobe."""
    from askalike.indexer.index_types import Ivf

    class IvfSq8(Ivf):
        name = "ivfsq8"
        summary = "ivf over 8-bit scalar-quantised vectors"

        def factory_key(self, parameters):
            return f"IDMap2,IVF{parameters['lists']},SQ8"

    monkeypatch.setitem(INDEX_TYPES, "ivfsq8", IvfSq8())
    source = write_jsonl(tmp_path / "q.jsonl", collection(400))
    report = index_sources(tmp_path / "index", [source], str(tiny_model),
                           options=IndexOptions(index_type="ivfsq8", show_progress=False))
    assert (report.index_type, report.total) == ("ivfsq8", 400)
    with Searcher(tmp_path / "index", settings=SearchSettings(probes=report.parameters["lists"])) as searcher:
        assert len(searcher.search("visa fees", 5, mode=SearchMode.dense)) == 5
    stored = faiss.read_index(str(tmp_path / "index" / read_manifest(tmp_path / "index").faiss_file))
    assert faiss.extract_index_ivf(stored).nprobe == report.parameters["probes"]


def test_the_index_type_help_comes_from_the_registry():
    shown = " ".join(runner.invoke(app, ["index", "--help"], terminal_width=400).output.split())
    assert all(f"{kind.name} ({kind.summary})" in shown for kind in INDEX_TYPES.values()), shown


def test_the_index_types_table_of_docs_search_md_is_the_registry_s():
    """docs/search.md lists the types as ``index_types_table()`` renders the registry, and
    docs/cli.md's schema of ``index --json`` names the registry's types."""
    from askalike.indexer.index_type_choice import index_types_table

    assert documented_schema("index --json")["properties"]["index_type"]["enum"] == list(INDEX_TYPES)

    page = (ROOT / "docs" / "search.md").read_text()
    inside = page.split("<!-- index-types -->\n", 1)[1].split("<!-- /index-types -->", 1)[0]
    documented = textwrap.dedent(inside).strip()  # indented: the table stays in its list item
    assert documented == index_types_table(), (
        "docs/search.md's index types differ from the registry; put this between its "
        f"<!-- index-types --> markers (indented by 2):\n{index_types_table()}")


def test_each_type_s_summary_says_the_parameters_its_code_chooses():
    """The summaries are prose beside the code that chooses: they must say its numbers."""
    from askalike.indexer.index_types import Ivf

    hnsw = INDEX_TYPES["hnsw"]
    assert (f"M = {Hnsw.LINKS}, efSearch {Hnsw.ef_search(1)} to {Hnsw.ef_search(10**9)}"
            in hnsw.summary)
    assert Ivf.probes(10_000) == 300 and Ivf.probes(4) == 4 and Ivf.probes(20) == 14
    assert "nprobe 3 sqrt(lists), at least 8" in INDEX_TYPES["ivf"].summary
    assert Ivf().parameters(1_000_000, 384)["lists"] == 4 * 1000
    assert "about 4 sqrt(n) lists" in INDEX_TYPES["ivf"].summary
