"""Graph-memory budgets and capture costs in the reports, as users run them (pytester).

The fake capture's graph pool grows by ``FAKE_POOL_MIB * bs`` MiB reserved per key
(absent when ``FAKE_POOL_MIB`` is unset, as on CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, fake_project, run

from pytest_graphcapture.errors import GoldenError, UsageError
from pytest_graphcapture.golden.gate import CheckOptions
from pytest_graphcapture.golden.store import checked_golden_dict, current_schema_version

MIB = 1 << 20

CONFTEST = (
    FAKE_CONFTEST
    + """
from pytest_graphcapture.result import KeyMetrics

PLATFORM = "cuda-sm90"
BATCH_SIZES = "1,4"


@pytest.fixture
def fake_capture(_plain_capture):
    def capture(**kwargs):
        result = _plain_capture(**kwargs)
        pool = os.environ.get("FAKE_POOL_MIB")
        for kr in result:
            bs = kr.key.batch_size
            kr.metrics = KeyMetrics(warmup_seconds=0.25, capture_seconds=0.05, replay_seconds=0.0004)
            if pool:
                kr.metrics.memory_reserved = int(float(pool) * bs * (1 << 20))
                kr.metrics.memory_allocated = kr.metrics.memory_reserved // 2
        return result
    return capture
"""
).replace("def fake_capture():", "def _plain_capture():")

TESTS = """
def test_decode(fake_capture, golden):
    golden.check(fake_capture())


def test_option(fake_capture, golden):
    golden.check(fake_capture(), max_graph_memory={4: 4 * (1 << 20)})


def test_tight(fake_capture, golden):
    golden.check(fake_capture(), max_graph_memory=4 * (1 << 20), memory_tolerance=0.0)
"""

GOLDEN_OF_BS4 = Path("goldens/cuda-sm90/test_model.py/test_decode/Fake_bs_4.json")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    fake_project(pytester, monkeypatch, TESTS, conftest=CONFTEST)
    run(pytester, "--update-golden").assert_outcomes(passed=3)
    return pytester


def test_an_option_budget_within_its_tolerance_passes_and_beyond_it_fails_with_the_numbers(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_POOL_MIB", "1.05")  # bs=4: 4.2 MiB, within 10 % of 4 MiB; over it with no tolerance
    result = run(project, "-k", "option or tight")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*does not match its goldens for bs=4 (over graph-memory budget)*",
            "*bs=4: the capture reserved 4.2 MiB of graph memory > budget 4.0 MiB + 0% "
            "(golden.check(max_graph_memory=...))*",
            "*graph-memory budget exceeded for bs=4: shrink the graph pool, or raise the budget*",
        ]
    )
    monkeypatch.setenv("FAKE_POOL_MIB", "2")
    run(project, "-k", "option").assert_outcomes(failed=1)


def test_a_golden_budget_is_checked_kept_by_update_and_never_checked_without_memory_figures(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = project.path / GOLDEN_OF_BS4
    data = json.loads(path.read_text())
    data["graph_memory_budget"] = 8 * MIB
    path.write_text(json.dumps(data, indent=2) + "\n")
    run(project, "-k", "decode").assert_outcomes(passed=1)  # no memory measured (CPU): not compared
    monkeypatch.setenv("FAKE_POOL_MIB", "3")  # bs=4: 12 MiB > 8.8 MiB
    result = run(project, "-k", "decode")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*bs=4: the capture reserved 12.0 MiB of graph memory > budget 8.0 MiB + 10%*"])
    assert "accept them with" not in result.stdout.str()  # a budget is not a golden to accept
    run(project, "-k", "decode", "--update-golden").assert_outcomes(failed=1)  # updating cannot fix a budget
    assert json.loads(path.read_text())["graph_memory_budget"] == 8 * MIB


def test_capture_costs_reach_the_markdown_and_json_reports(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_POOL_MIB", "1")
    run(project, "-k", "decode", "--graph-capture-report=r.md", "--graph-capture-json=r.json").assert_outcomes(passed=1)
    markdown = (project.path / "r.md").read_text()
    assert "### Capture costs" in markdown
    assert "| `test_model.py::test_decode` | bs=4 | 0.250 s | 0.050 s | 0.400 ms | 4.0 MiB | 2.0 MiB |" in markdown
    records = json.loads((project.path / "r.json").read_text())["records"]
    bs4 = next(r for r in records if r["key"] == "bs=4")
    assert bs4["metrics"]["memory_reserved"] == 4 * MIB and bs4["metrics"]["warmup_seconds"] == 0.25


def test_bad_budget_values_name_the_argument_or_the_file() -> None:
    with pytest.raises(UsageError, match=r"memory_tolerance=-1"):
        CheckOptions(memory_tolerance=-1)
    with pytest.raises(GoldenError, match="'graph_memory_budget' must be a non-negative integer"):
        checked_golden_dict({"schema_version": current_schema_version(), "graph_memory_budget": "8 GiB"}, "g.json")
