"""The layering, read from the source: ``core`` at the bottom, ``train`` and ``indexer`` beside each
other above it, ``retrieval`` above ``indexer``, ``app`` on top; no package imports one above or
beside it, no module-level import circle, and no module that answers queries reaches torch.
(The runtime check, that a search and ``similar`` load neither torch nor other heavy modules,
is ``test_inference.py``'s.)"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from helpers import ROOT

PACKAGES = ("core", "train", "indexer", "retrieval", "app")
# what each package may import, itself included
ALLOWED = {
    "core": {"core"},
    "train": {"core", "train"},
    "indexer": {"core", "indexer"},
    "retrieval": {"core", "indexer", "retrieval"},
    "app": set(PACKAGES),
}
TRAINING_ONLY = {"torch", "transformers", "onnxscript", "safetensors.torch"}
# the command modules that only train (the others answer queries, or evaluate exported encoders)
TRAINING_COMMANDS = {"app.train_command"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module, module: str, top_level_only: bool) -> Iterator[str]:
    """The modules ``tree`` imports (with ``from X import name``, also ``X.name``, which may be a
    submodule); ``top_level_only``: only the imports that run when the module is imported."""
    nodes = tree.body if top_level_only else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package of this module
                package = module.rsplit(".", node.level)[0]
                base = f"{package}.{base}" if base else package
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def _source_modules() -> dict[str, ast.Module]:
    return {_module_name(path): ast.parse(path.read_text(encoding="utf-8"))
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))}


MODULES = _source_modules()


def _graph(top_level_only: bool) -> dict[str, set[str]]:
    """Module -> the project modules and third-party top-level modules it imports."""
    graph = {}
    for module, tree in MODULES.items():
        targets = set()
        for name in _imports(tree, module, top_level_only):
            if name.split(".")[0] in PACKAGES:
                if name in MODULES:
                    targets.add(name)
            else:
                targets.add(name)
        graph[module] = targets - {module}
    return graph


def test_no_package_imports_a_package_above_or_beside_it():
    wrong = [f"{module} imports {target}" for module, targets in _graph(top_level_only=False).items()
             for target in targets if target.split(".")[0] in PACKAGES
             and target.split(".")[0] not in ALLOWED[module.split(".")[0]]]
    assert not wrong, wrong


def test_module_level_imports_have_no_circle():
    graph = {module: {t for t in targets if t in MODULES}
             for module, targets in _graph(top_level_only=True).items()}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("import circle: " + " -> ".join([*path[path.index(module):], module]))
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


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


def test_no_query_module_reaches_torch():
    graph = _graph(top_level_only=True)
    query_modules = [m for m in MODULES if not m.startswith("train") and m not in TRAINING_COMMANDS]
    assert "retrieval.searcher" in query_modules and "core.loader" in query_modules
    found = []
    for module in query_modules:
        reached = _reached(module, graph)
        found += [f"{module} reaches {name} (imported by {reached[name]})" for name in reached
                  if name.split(".")[0] in TRAINING_ONLY or name in TRAINING_ONLY]
    assert not found, found


def test_torch_is_imported_inside_a_function_only_by_commands_that_train_or_export():
    """Below ``app`` nothing imports torch even lazily; commands may, in the body that trains."""
    graph = _graph(top_level_only=False)
    lazy = [module for module, targets in graph.items() if not module.startswith(("train", "app"))
            and any(t.split(".")[0] in TRAINING_ONLY or t.startswith("train") for t in targets)]
    assert not lazy, lazy


def test_the_graph_sees_imports_of_every_kind():
    tree = ast.parse("import torch\nfrom core import files\nfrom .x import y\ndef f():\n    import scipy\n")
    assert set(_imports(tree, "train.pkg.mod", top_level_only=True)) == {
        "torch", "core", "core.files", "train.pkg.x", "train.pkg.x.y"}
    assert "scipy" in set(_imports(tree, "train.pkg.mod", top_level_only=False))
