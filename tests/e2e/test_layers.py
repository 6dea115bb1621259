"""The package's layers point one way, and no module imports itself back through a cycle.

plugin → tools → engine and golden → summary → the shared modules (errors, keys,
naming, _io).  summary/, golden/ and the shared modules import neither torch nor
pytest; engine/ does not import pytest.  Every import is read, lazy ones inside
functions included, for layers and for cycles alike: an import put inside a function
hides a circle from import time, not from the design, so two modules (in one folder
or in two) that import each other, however late, are a cycle.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_graphcapture"
SHARED = {"errors", "keys", "naming", "_io"}
#: Which layers a layer may import (itself included).
ALLOWED = {
    "shared": {"shared"},
    "summary": {"shared", "summary"},
    "result": {"shared", "summary", "result"},  # the one result type: summaries inside, read by golden and engine
    "golden": {"shared", "summary", "result", "golden"},
    "engine": {"shared", "summary", "result", "engine"},
    "tools": {"shared", "summary", "result", "golden", "engine", "tools"},
    "plugin": {"shared", "summary", "result", "golden", "engine", "tools", "plugin", "testing", "contract"},
    "testing": {"shared", "summary", "result", "engine", "testing"},
    "contract": {"shared", "summary", "result", "engine", "testing", "contract"},
    "top": {"shared", "summary", "result", "golden", "engine", "tools", "plugin", "testing", "contract", "top"},
}
FORBIDDEN_EXTERNAL = {
    "shared": {"torch", "pytest"},
    "summary": {"torch", "pytest"},
    "result": {"torch", "pytest"},
    "golden": {"torch", "pytest"},
    "engine": {"pytest"},
}


def layer(module: str) -> str:
    parts = module.split(".")[1:]
    if not parts or parts[0] in ("__init__", "__main__"):
        return "top"
    if parts[0] in SHARED:
        return "shared"
    return parts[0]


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports(root: Path) -> dict[str, list[tuple[str, int, bool]]]:
    """``{module: [(imported module, line, at module level)]}`` for every module of the package at ``root``."""
    found: dict[str, list[tuple[str, int, bool]]] = {}
    for path in sorted(root.rglob("*.py")):
        name = module_name(root, path)
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = {id(node) for node in tree.body}
        entries = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                entries += [(alias.name, node.lineno, id(node) in top_level) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                # Each name may be a submodule (``from . import x``) or a name in ``target``: the
                # check keeps the longest prefix that is a module.
                entries += [(f"{target}.{alias.name}", node.lineno, id(node) in top_level) for alias in node.names]
        found[name] = entries
    return found


def violations(root: Path) -> list[str]:
    """Every import that reaches the wrong way, and every import cycle between modules, as readable lines."""
    graph = imports(root)
    pkg = root.name
    problems = []
    edges: dict[str, set[str]] = {m: set() for m in graph}
    for module, entries in graph.items():
        own = layer(module)
        for target, line, _eager in entries:
            if target == pkg or target.startswith(pkg + "."):
                while target not in graph and "." in target:
                    target = target.rsplit(".", 1)[0]
                if layer(target) not in ALLOWED[own]:
                    problems.append(f"{module}:{line} ({own}) imports {target} ({layer(target)})")
                if target in graph and target != module:
                    edges[module].add(target)
            elif target.split(".")[0] in FORBIDDEN_EXTERNAL.get(own, set()):
                problems.append(f"{module}:{line} ({own}) imports {target}")
    # Cycles: depth-first search over every edge (a package's __init__ importing its own
    # submodules is how a package is built, not a cycle).
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges[node]):
            if node.startswith(nxt + ".") or nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :] + [nxt]
                problems.append("import cycle: " + " -> ".join(cycle))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return problems


def test_the_package_imports_only_downwards_and_without_cycles() -> None:
    assert violations(PACKAGE) == []


def test_the_check_catches_a_layer_reaching_the_wrong_way_and_a_cycle(tmp_path: Path) -> None:
    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    model = copy / "summary" / "model.py"
    model.write_text("import torch\n" + model.read_text(encoding="utf-8"), encoding="utf-8")
    store = copy / "golden" / "store.py"
    store.write_text("from ..plugin import settings\n" + store.read_text(encoding="utf-8"), encoding="utf-8")
    capture = copy / "engine" / "capture.py"
    capture.write_text("import pytest\n" + capture.read_text(encoding="utf-8"), encoding="utf-8")
    keys = copy / "keys.py"
    keys.write_text("from . import naming\n" + keys.read_text(encoding="utf-8"), encoding="utf-8")
    # inside one folder: a lazy import back (model imports normalize), and two modules importing each other
    normalize = copy / "summary" / "normalize.py"
    normalize.write_text(normalize.read_text(encoding="utf-8") + "\n\ndef f():\n    from .model import Summary\n")
    (copy / "golden" / "zz_one.py").write_text("from . import zz_two\n", encoding="utf-8")
    (copy / "golden" / "zz_two.py").write_text("from .zz_one import x\n", encoding="utf-8")
    found = violations(copy)
    assert "pytest_graphcapture.summary.model:1 (summary) imports torch" in found
    assert "pytest_graphcapture.golden.store:1 (golden) imports pytest_graphcapture.plugin.settings (plugin)" in found
    assert "pytest_graphcapture.engine.capture:1 (engine) imports pytest" in found
    cycles = [p for p in found if p.startswith("import cycle:")]
    assert any("pytest_graphcapture.keys" in p for p in cycles), found
    assert any("summary.normalize -> pytest_graphcapture.summary.model" in p for p in cycles), found
    assert any("golden.zz_one -> pytest_graphcapture.golden.zz_two" in p for p in cycles), found
