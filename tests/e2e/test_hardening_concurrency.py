"""`pytest -n 4 --update-golden` over 8 tests sharing one golden tree, repeated.

Every golden must be valid JSON with its own key's content after each run, and the
merged session report must count every check exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("xdist", reason="pytest-xdist is needed for the concurrency runs (pip install pytest-xdist)")

from helpers import run, use_this_checkout  # noqa: E402

# FakeRunner (and torch) is imported where it is used: the xdist controller, which loads this
# conftest too but captures nothing, does not import torch (1.5 s of CPU a run).
CONFTEST = """
import os
import pytest

@pytest.fixture
def decode_runner():
    from pytest_graphcapture.testing import FakeRunner

    return FakeRunner([1, 2, 3], hidden=int(os.environ.get("CONC_HIDDEN", "8")))
"""

TESTS = """
import pytest

@pytest.mark.parametrize("shard", range(8))
def test_shard(shard, graph_capture, golden, decode_runner):
    decode_runner.runner_name = f"Shard{shard}"
    golden.check(graph_capture(decode_runner))
"""


def run_with_report(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    report = pytester.path / "report.json"
    result = run(
        pytester, "-n", "4", "--graph-capture-json", str(report), *args, subprocess=True, timeout=600, warm=True
    )
    return result, json.loads(report.read_text())


def check_tree(root: Path, hidden: int) -> None:
    files = sorted((root / "goldens").rglob("*.json"))
    assert len(files) == 24, [f.name for f in files]
    leftovers = [p for p in (root / "goldens").rglob("*") if p.is_file() and not p.name.endswith(".json")]
    assert leftovers == [], "no temp files may remain"
    for path in files:
        data = json.loads(path.read_text())  # valid JSON, else this raises
        shard = path.parent.name.split("[")[-1].rstrip("]")
        assert data["key"]["runner"] == path.name.split("_bs_")[0]
        assert data["key"]["batch_size"] == int(path.stem.split("_bs_")[1])
        mm = [op for op in data["ops"] if op["name"] == "aten::mm"]
        assert mm and mm[0]["input_dims"] == [[data["key"]["batch_size"], hidden], [hidden, hidden]], (path, shard)


@pytest.mark.slow
def test_parallel_updates_over_a_shared_golden_tree_repeated(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_this_checkout(monkeypatch)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_shards=TESTS)

    first, report = run_with_report(pytester, "--update-golden")
    first.assert_outcomes(passed=8)
    assert report["totals"]["checked"] == 24 and report["totals"]["created"] == 24
    check_tree(pytester.path, 8)
    before = {p: p.read_bytes() for p in (pytester.path / "goldens").rglob("*.json")}

    again, report = run_with_report(pytester, "--update-golden")
    again.assert_outcomes(passed=8)
    assert report["totals"]["passed"] == 24 and report["totals"]["created"] == report["totals"]["updated"] == 0
    assert {p: p.read_bytes() for p in before} == before, "an unchanged model rewrites nothing"

    monkeypatch.setenv("CONC_HIDDEN", "16")
    changed, report = run_with_report(pytester, "--update-golden")
    changed.assert_outcomes(passed=8)
    assert report["totals"]["updated"] == 24
    check_tree(pytester.path, 16)
