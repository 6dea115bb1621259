"""Trace and golden content is only ever parsed as JSON; no shell is ever invoked.

A static check over the package's source (AST, not grep, so comments and strings don't count).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "pytest_graphcapture"
SOURCES = sorted(PACKAGE.rglob("*.py"))
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "yaml", "commands"}
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
FORBIDDEN_ATTRIBUTES = {
    ("os", "system"),
    ("os", "popen"),
    ("os", "execv"),
    ("os", "execvp"),
    ("pickle", "load"),
    ("pickle", "loads"),
    ("torch", "load"),
}


def violations(path: Path, root: Path = REPO_ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        where = f"{path.relative_to(root)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where} imports {a.name}" for a in node.names if a.name.split(".")[0] in FORBIDDEN_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in FORBIDDEN_MODULES:
            found.append(f"{where} imports from {node.module}")
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_CALLS:
                found.append(f"{where} calls {func.id}()")
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and (func.value.id, func.attr) in FORBIDDEN_ATTRIBUTES
            ):
                found.append(f"{where} calls {func.value.id}.{func.attr}()")
            for keyword in node.keywords:
                if keyword.arg == "shell" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                ):
                    found.append(f"{where} passes shell=... to a subprocess")
    return found


def test_the_package_has_sources_to_check() -> None:
    assert len(SOURCES) >= 10


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_no_pickle_eval_or_shell(path: Path) -> None:
    assert violations(path) == []


def test_the_checker_catches_what_it_forbids(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import pickle\nimport subprocess\nsubprocess.run('ls', shell=True)\neval('1')\nimport os\nos.system('x')\n"
    )
    found = violations(probe, root=tmp_path)
    assert len(found) == 4, found
