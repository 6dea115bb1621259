"""The package's layers point one way, no module imports itself back, and no module takes another's private names.

plugin → tools → engine and golden → result → summary → the shared modules (errors, keys, naming, _io).
Lazy imports inside functions count too: they hide a circle from import time, not from the design.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "pytest_graphcapture"
SHARED = {"errors", "keys", "naming", "_io"}
#: Which layers a layer may import (itself included).
ALLOWED = {
    "shared": {"shared"},
    "summary": {"shared", "summary"},
    "result": {"shared", "summary", "result"},
    "golden": {"shared", "summary", "result", "golden"},
    "engine": {"shared", "summary", "result", "engine"},
    "tools": {"shared", "summary", "result", "golden", "engine", "tools"},
    "plugin": {"shared", "summary", "result", "golden", "engine", "tools", "plugin", "testing"},
    "testing": {"shared", "summary", "result", "engine", "testing"},
    "top": {"shared", "summary", "result", "golden", "engine", "tools", "plugin", "testing", "top"},
}
FORBIDDEN_EXTERNAL = {
    "shared": {"torch", "pytest"},
    "summary": {"torch", "pytest"},
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
        if own not in ALLOWED:
            problems.append(f"{module}: its layer {own!r} is not in ALLOWED (add it, saying what it may import)")
            continue
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


# --------------------------------------------------------------------------- private names stay home

_PRIVATE = re.compile(r"^_[A-Za-z]")


def _resolve(graph: dict, dotted: str) -> str:
    """The longest prefix of ``dotted`` that is a module of the package (``""`` when none)."""
    while dotted not in graph and "." in dotted:
        dotted = dotted.rsplit(".", 1)[0]
    return dotted if dotted in graph else ""


def _private_module_outside(graph: dict, importer: str, target: str) -> bool:
    """A module with a private component, imported from outside the package that holds it (``_io`` is the package's)."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if _PRIVATE.match(part) and not (importer + ".").startswith(".".join(parts[:i]) + "."):
            return True
    return False


def private_imports(root: Path) -> list[str]:
    """``file:line name`` for every private name one module of the package takes from another.

    ``from X import _name`` (multi-line imports too) and ``X._name`` on a module bound by ``import``
    or ``from P import X``; a private module counts when imported from outside its own package.
    """
    graph = imports(root)
    problems = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(root, path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        rel = path.relative_to(root.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bound: dict[str, str] = {}  # local name -> package module
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if _resolve(graph, alias.name):
                        bound[alias.asname or alias.name.split(".")[0]] = (
                            alias.name if alias.asname else alias.name.split(".")[0]
                        )
                        if _private_module_outside(graph, module, alias.name):
                            problems.append(f"{rel}:{node.lineno} {alias.name}")
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    target = ".".join(base[: len(base) - (node.level - 1)] + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not _resolve(graph, target):
                    continue
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    if full in graph:  # a module: private only when outside its package
                        bound[alias.asname or alias.name] = full
                        if _private_module_outside(graph, module, full):
                            problems.append(f"{rel}:{node.lineno} {full}")
                    elif _private_module_outside(graph, module, target):
                        problems.append(f"{rel}:{node.lineno} {target}")
                    elif _PRIVATE.match(alias.name):
                        problems.append(f"{rel}:{node.lineno} {target}.{alias.name}")
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _PRIVATE.match(node.attr)):
                continue
            chain, base = [], node.value
            while isinstance(base, ast.Attribute):
                chain.insert(0, base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in bound:
                owner = ".".join([bound[base.id], *chain])
                if owner in graph and owner != module:
                    problems.append(f"{rel}:{node.lineno} {owner}.{node.attr}")
    return sorted(set(problems), key=lambda p: (p.split(":")[0], int(p.split(":")[1].split()[0]), p))


def test_no_module_imports_another_modules_private_names() -> None:
    assert private_imports(PACKAGE) == []


def test_the_private_name_check_finds_every_spelling(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for name in ("__init__.py", "sub/__init__.py", "_io.py", "sub/_inner.py"):
        (pkg / name).write_text("_hidden = 1\npublic = 2\n", encoding="utf-8")
    (pkg / "a.py").write_text("from .sub._inner import public\n", encoding="utf-8")  # another package's private module
    (pkg / "sub" / "b.py").write_text(
        "from ._inner import public\n"  # its own package's private module: allowed
        "from .._io import public as p\n"  # the top package's _io, from inside it: allowed
        "from pkg._io import (\n    public,\n    _hidden,\n)\n"
        "from .. import _io\n"
        "import pkg.sub._inner as inner\n"
        "def f():\n    return _io._hidden, inner._hidden, _io.public\n",
        encoding="utf-8",
    )
    (pkg / "c.py").write_text("_own = 1\nprint(_own)\nimport os\nos._exit\n", encoding="utf-8")
    assert private_imports(pkg) == [
        "pkg/a.py:1 pkg.sub._inner",
        "pkg/sub/b.py:3 pkg._io._hidden",
        "pkg/sub/b.py:10 pkg._io._hidden",
        "pkg/sub/b.py:10 pkg.sub._inner._hidden",
    ]
