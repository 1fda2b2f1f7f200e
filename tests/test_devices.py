"""--device: the GPU paths computed on the CPU against the paths they stand in for (torch's
encoder against ONNX Runtime's, the exact torch search against FAISS), the export of a model
wherever it trained, and a GPU asked for where there is none. The tests marked ``gpu`` run the
same on a CUDA device where torch sees one (bench/gpu.py runs them on a lent machine)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import ROOT, TEXTS, collection, imported_by, invoke, saved_model, write_jsonl

from askalike.core.devices import Device, DeviceError
from askalike.core.loader import load_encoder
from askalike.core.model_dir import ModelError
from askalike.indexer.build import IndexOptions, index_sources
from askalike.indexer.directory import open_index
from askalike.retrieval.collection_duplicates import duplicate_groups
from askalike.retrieval.judgement import UncalibratedJudge

torch = pytest.importorskip("torch")
from askalike.train.devices import torch_device  # noqa: E402  (after the skip: torch is the training side)
from askalike.train.gpu_search import ExactSearch  # noqa: E402
from askalike.train.onnx_export import export_onnx  # noqa: E402
from askalike.train.torch_encoder import TorchEncoder  # noqa: E402
from askalike.train.trained_model import TrainedModel, load_model, save_model  # noqa: E402

ACCURATE = ROOT / "models" / "accurate"
QUESTIONS = [*TEXTS, "How long does it take to renew a residence permit in Doha?",
             "Where can I buy a reliable used car for a low price? " * 12, "é ü ñ 中文 عربى", "a b c"]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                  reason="torch sees no GPU"))]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1)


def assert_alike_within_rounding(found: np.ndarray) -> None:
    """Two computations of the accurate model's export agree to float rounding, which its rounded
    activations amplify where a value lies at a rounding step: the same torch model in float32
    and float64 differ as much (docs/results.md, cosine 0.9994 mean, 0.998 at worst)."""
    assert found.mean() >= 0.999 and found.min() >= 0.995, found


@pytest.mark.parametrize("device", DEVICES)
def test_the_torch_encoder_computes_what_the_onnx_export_of_the_accurate_model_does(device):
    """Within float rounding, and much closer than the saved weights computed without the
    export's int8 rounding."""
    torch_vectors = TorchEncoder.of_model(ACCURATE, torch.device(device)).encode(QUESTIONS, batch_size=4)
    onnx_vectors = load_encoder(ACCURATE).encode(QUESTIONS)
    found = cosines(torch_vectors, onnx_vectors)
    assert_alike_within_rounding(found)
    plain = cosines(load_model(ACCURATE).encoder.encode(QUESTIONS), onnx_vectors)
    assert np.mean(1 - plain) > 2 * np.mean(1 - found), (plain, found)


@pytest.mark.slow  # two ONNX exports: seconds
@pytest.mark.parametrize("quantized", [True, False])
def test_the_torch_encoder_of_a_project_transformer_matches_its_export(tmp_path, quantized):
    encoder = load_model(saved_model(tmp_path / "base", "transformer")).encoder
    with torch.no_grad():  # an untrained model's layers are copies: make each its own
        for parameter in encoder.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    directory = tmp_path / "model"
    save_model(TrainedModel(encoder), directory)
    if not quantized:
        config = json.loads((directory / "config.json").read_text())
        config["inference"] = export_onnx(encoder, directory, quantize=False)
        (directory / "config.json").write_text(json.dumps(config))
    torch_vectors = TorchEncoder.of_model(directory, torch.device("cpu")).encode(TEXTS)
    assert cosines(torch_vectors, load_encoder(directory).encode(TEXTS)).min() >= 0.9999


def test_an_export_of_an_older_askalike_is_refused_not_mirrored_wrongly(tmp_path):
    """The torch encoder computes what the export computes: an export whose int8 layout this
    askalike does not write (the embedding tables with one scale each, before 2026-11-27)
    cannot be mirrored, so it asks for the export to be written anew."""
    directory = saved_model(tmp_path / "model", "transformer")
    config = json.loads((directory / "config.json").read_text())
    config["inference"]["quantization"] = "int8-weights-fp32-compute"
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelError, match=r"older askalike; run `askalike export .*model`"):
        TorchEncoder.of_model(directory, torch.device("cpu"))


@pytest.mark.slow  # an ONNX export: seconds
def test_the_export_traces_a_cpu_copy_and_leaves_the_model_as_it_was(tmp_path):
    encoder = load_model(saved_model(tmp_path / "base", "transformer")).encoder.train()
    before = {name: value.clone() for name, value in encoder.state_dict().items()}
    export_onnx(encoder, tmp_path, weight_dtype="float16")
    assert encoder.training
    assert all(torch.equal(before[name], value) for name, value in encoder.state_dict().items())
    assert load_encoder(saved_model(tmp_path / "again", "transformer")).dim == encoder.dim


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no GPU")
@pytest.mark.slow
def test_a_model_on_the_gpu_is_saved_and_answers_on_the_cpu(tmp_path):
    encoder = load_model(saved_model(tmp_path / "base", "transformer")).encoder
    with torch.no_grad():  # an untrained model's layers are copies: make each its own
        for parameter in encoder.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    encoder.to("cuda")
    save_model(TrainedModel(encoder), tmp_path / "saved")
    texts = [text for text in TEXTS if text]
    found = cosines(load_encoder(tmp_path / "saved").encode(texts), encoder.encode(texts))
    assert found.min() > 0.98, found


@pytest.mark.parametrize("device", DEVICES)
def test_exact_search_finds_what_a_flat_faiss_index_finds(device):
    import faiss

    generator = np.random.default_rng(7)
    vectors = generator.standard_normal((3000, 24)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    ids = np.arange(3000, dtype=np.int64) * 3 + 5
    flat = faiss.IndexIDMap2(faiss.IndexFlatIP(24))
    flat.add_with_ids(vectors, ids)
    queries = vectors[:700]
    expected_scores, expected_ids = flat.search(queries, 11)
    chunks = [(ids[:1000], vectors[:1000]), (ids[1000:], vectors[1000:])]
    scores, found = ExactSearch.of_chunks(chunks, torch.device(device)).search(queries, 11)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)
    assert (found == expected_ids).mean() > 0.999  # ties aside
    few_scores, few = ExactSearch(ids[:3], vectors[:3], torch.device(device)).search(queries[:2], 5)
    assert (few[:, 3:] == -1).all() and np.isneginf(few_scores[:, 3:]).all()


def test_duplicates_groups_the_same_with_the_exact_torch_search(tmp_path, tiny_model):
    records = collection(120) + [{"id": f"copy{i}", "subject": record["subject"], "body": record["body"]}
                                 for i, record in enumerate(collection(120)[:30])]
    index_sources(tmp_path / "index", [write_jsonl(tmp_path / "q.jsonl", records)], str(tiny_model),
                  options=IndexOptions(show_progress=False))
    index = open_index(tmp_path / "index")
    try:
        stored = ExactSearch.of_chunks(index.store.vectors(index.manifest.encoder.dim), torch.device("cpu"))
        judge = UncalibratedJudge()
        expected = [group.as_json(1) for group in duplicate_groups(index, judge, 0.9)]
        found = [group.as_json(1) for group in duplicate_groups(index, judge, 0.9, search=stored)]
        assert found == expected
        assert len(expected) >= 10
    finally:
        index.close()


def test_an_index_run_on_the_torch_encoder_stores_what_the_onnx_run_stores(tmp_path):
    source = write_jsonl(tmp_path / "q.jsonl", collection(40))
    stored = {}
    for name, loader in (("onnx", None),
                         ("torch", lambda spec: TorchEncoder.of_model(spec, torch.device("cpu")))):
        index_sources(tmp_path / name, [source], str(ACCURATE),
                      options=IndexOptions(show_progress=False, encoder_loader=loader))
        index = open_index(tmp_path / name)
        try:
            stored[name] = next(index.store.vectors(index.manifest.encoder.dim))[1]
            assert index.manifest.encoder.model == str(ACCURATE.resolve())
        finally:
            index.close()
    assert_alike_within_rounding(cosines(stored["onnx"], stored["torch"]))


def test_a_gpu_asked_for_where_torch_sees_none_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceError, match="--device cuda: torch sees no GPU"):
        torch_device(Device.cuda)
    assert torch_device(Device.auto).type == "cpu" and torch_device(Device.cpu).type == "cpu"
    source = write_jsonl(tmp_path / "q.jsonl", collection(5))
    result = invoke("index", source, "--index", tmp_path / "index", "--device", "cuda")
    assert result.exit_code == 2 and "--device cuda: torch sees no GPU" in result.output
    assert not (tmp_path / "index").exists()


def test_auto_on_a_machine_without_a_gpu_driver_never_imports_torch(tmp_path):
    from askalike.core.devices import NVIDIA_DRIVER

    if NVIDIA_DRIVER.exists():
        pytest.skip("an NVIDIA driver is loaded here: auto may use the GPU")
    source = write_jsonl(tmp_path / "q.jsonl", collection(5))
    result, loaded = imported_by(["torch"], "index", source, "--index", tmp_path / "index", "--json")
    assert json.loads(result.stdout)["added"] == 5
    assert loaded == []
