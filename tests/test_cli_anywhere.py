"""The command line from any directory: --version, -h, the shipped models by name and the default
index from $ASKALIKE_INDEX."""

from __future__ import annotations

import json

from helpers import ROOT, collection, invoke, write_jsonl

from askalike.core.model_dir import SHIPPED_MODELS_DIR, shipped_model


def test_version_and_h_for_help():
    version = invoke("--version")
    assert version.exit_code == 0 and version.stdout.startswith("askalike ")
    for args in (["-h"], ["index", "-h"], ["eval", "sts", "-h"]):
        result = invoke(*args)
        assert result.exit_code == 0 and "Usage:" in result.stdout, args


def test_shipped_models_by_name_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for spec in ("fast", "models/fast", "./models/fast"):
        assert shipped_model(spec) == str(SHIPPED_MODELS_DIR / "fast")
    assert shipped_model("accurate") == str(ROOT / "models" / "accurate")
    assert shipped_model("elsewhere/fast") == "elsewhere/fast"
    (tmp_path / "fast").mkdir()  # a directory of that name here is the one meant
    assert shipped_model("fast") == "fast"
    monkeypatch.chdir(tmp_path / "fast")
    result = invoke("similar", "how to renew a visa", "visa renewal process", "--model", "fast", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cosine"] > 0.3


def test_askalike_index_names_the_default_index(tmp_path, tiny_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = write_jsonl(tmp_path / "q.jsonl", collection(5))
    env = {"ASKALIKE_INDEX": str(tmp_path / "shared-index")}
    assert invoke("index", source, "--model", tiny_model, "--json", env=env).exit_code == 0
    assert (tmp_path / "shared-index" / "manifest.json").is_file()
    assert not (tmp_path / "askalike-index").exists()
    info = invoke("index-info", "--json", env=env)
    assert info.exit_code == 0 and json.loads(info.stdout)["questions"] == 5
