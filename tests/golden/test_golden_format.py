"""Goldens made for review: one line per entry, older goldens read and rewritten, one-op change = one-line diff."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import FAKE_CONFTEST, ONE_CHECK, REPO_ROOT, fake_project, run

from pytest_graphcapture.golden import store


@pytest.fixture
def gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return fake_project(pytester, monkeypatch, ONE_CHECK)


def _entries(data: dict) -> int:
    """Kernel, op and launch entries (a graph of a key in the older layout holds its own)."""
    own = len(data["kernels"]) + len(data["ops"]) + len(data["launches"]["by_api"])
    return own + sum(_entries(graph) for graph in data.get("graphs", []) if "kernels" in graph)


def test_example_goldens_meet_the_line_budget() -> None:
    """≤ 1.2 lines per kernel/op/launch entry plus ≤ 20 header lines (10 more per graph), for every golden shipped."""
    files = sorted((REPO_ROOT / "examples" / "goldens").rglob("*.json"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
        lines = len(text.splitlines())
        header = 20 + 10 * len(data.get("graphs", []))
        assert lines <= 1.2 * _entries(data) + header, f"{path}: {lines} lines for {_entries(data)} entries"
        assert text == store.dumps(data), f"{path} is not in the current layout (run pytest examples --update-golden)"


def test_older_indented_goldens_still_pass_and_update_rewrites_them(gate: pytest.Pytester) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=1)
    paths = sorted((gate.path / "goldens").rglob("*.json"))
    new_texts = {p: p.read_text() for p in paths}
    for path in paths:  # the layout written before goldens were made for review
        path.write_text(json.dumps(json.loads(new_texts[path]), sort_keys=True, indent=2) + "\n")
    old_texts = {p: p.read_text() for p in paths}
    run(gate).assert_outcomes(passed=1)
    assert {p: p.read_text() for p in paths} == old_texts  # a check never writes
    result = run(gate, "--update-golden")
    result.assert_outcomes(passed=1)
    assert {p: p.read_text() for p in paths} == new_texts
    again = run(gate, "--update-golden")
    again.assert_outcomes(passed=1)
    again.stdout.fnmatch_lines(["*0 created, 0 updated, 0 deleted*"])


def test_one_op_change_is_a_one_line_git_diff(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=1)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=gate.path, check=True)
    subprocess.run([*git, "add", "goldens"], cwd=gate.path, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "goldens"], cwd=gate.path, check=True)
    # One more aten::add at every batch size: one op entry's count changes per golden.
    gate.makeconftest(
        FAKE_CONFTEST
        + """
_make = make_summary
def make_summary(bs, runner, platform):
    s = _make(bs, runner, platform)
    for op in s.ops:
        if op["name"] == "aten::add":
            op["count"] += 1
    return s
"""
    )
    run(gate, "--update-golden").assert_outcomes(passed=1)
    diff = subprocess.run(
        ["git", "diff", "--numstat", "--", "goldens"], cwd=gate.path, check=True, capture_output=True, text=True
    ).stdout.splitlines()
    assert len(diff) == 3 and all(line.startswith("1\t1\t") for line in diff), diff
    patch = subprocess.run(["git", "diff", "-U0"], cwd=gate.path, check=True, capture_output=True, text=True).stdout
    changed = [line for line in patch.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert all('"name": "aten::add"' in line for line in changed) and len(changed) == 6
