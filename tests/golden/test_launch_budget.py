"""Launch budgets: a golden's ``launch_budget`` field or ``golden.check(max_launches=...)`` caps launches per key.

A capture recording more launches than its budget fails with the numbers, without timing anything.
The fake capture's launch count per batch size is 100 + bs, plus ``FAKE_EXTRA_LAUNCHES``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, fake_project, run

from pytest_graphcapture.errors import GoldenError, UsageError
from pytest_graphcapture.golden import expect as store
from pytest_graphcapture.golden.store import checked_golden_dict
from pytest_graphcapture.keys import CaptureKey

# The shared fake capture with this module's model: 100 + bs (+ FAKE_EXTRA_LAUNCHES) launches per key.
CONFTEST = (
    FAKE_CONFTEST
    + """
PLATFORM = "cuda-sm90"
BATCH_SIZES = "1,4,8"


def make_summary(bs, runner, platform):
    total = 100 + bs + int(os.environ.get("FAKE_EXTRA_LAUNCHES", "0"))
    return Summary(key=CaptureKey(runner, bs), platform=platform,
                   kernels=[{"name": "gemm_kernel", "kind": "kernel", "count": total}],
                   ops=[{"name": "aten::mm", "input_dims": [[bs, 8], [8, 8]],
                         "input_types": ["float", "float"], "count": 1}],
                   launches={"total": total, "by_api": {"cudaLaunchKernel": total}})
"""
)

TESTS = """
def test_decode(fake_capture, golden):
    golden.check(fake_capture())


def test_option_int(fake_capture, golden):
    golden.check(fake_capture(), max_launches=105)


def test_option_per_bs(fake_capture, golden):
    golden.check(fake_capture(), max_launches={1: 101, 8: 120})
"""

GOLDEN_OF_BS8 = Path("goldens/cuda-sm90/test_model.py/test_decode/Fake_bs_8.json")


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return fake_project(pytester, monkeypatch, TESTS, conftest=CONFTEST)


def set_budget(path: Path, budget: object) -> None:
    data = json.loads(path.read_text())
    data["launch_budget"] = budget
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def test_golden_budget_fails_with_the_numbers_and_survives_update(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    golden = project.path / GOLDEN_OF_BS8
    set_budget(golden, 110)  # bs=8 records 108 launches
    run(project, "test_model.py::test_decode").assert_outcomes(passed=1)

    monkeypatch.setenv("FAKE_EXTRA_LAUNCHES", "4")  # 112 launches at bs=8: over budget, and the golden differs
    result = run(project, "test_model.py::test_decode")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*does not match its goldens for bs=1, bs=4, bs=8 (over launch budget)*",
            f"bs=8: 112 kernel launches > budget 110 (launch_budget in {GOLDEN_OF_BS8.as_posix()})",
            "launch budget exceeded for bs=8: cut the launches, or raise the budget*",
        ]
    )
    assert "bs=4: 108 kernel launches" not in result.stdout.str()  # bs=4 has no budget

    # --update-golden rewrites the summary but keeps the budget, and still fails the over-budget key.
    update = run(project, "test_model.py::test_decode", "--update-golden")
    update.assert_outcomes(failed=1)
    update.stdout.fnmatch_lines(["bs=8: 112 kernel launches > budget 110 *"])
    # The report counts what was written: three goldens changed on disk, three updated.
    update.stdout.fnmatch_lines(["cuda-sm90: 3 checked, 0 passed, 0 failed, 0 created, 3 updated, *"])
    data = json.loads(golden.read_text())
    assert data["launch_budget"] == 110 and data["launches"]["total"] == 112

    set_budget(golden, 112)  # raising the budget by hand (a reviewed change) makes it green again
    run(project, "test_model.py::test_decode").assert_outcomes(passed=1)
    run(project, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    assert json.loads(golden.read_text())["launch_budget"] == 112


def test_budget_only_failure_when_the_summary_matches(project: pytest.Pytester) -> None:
    run(project, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    set_budget(project.path / GOLDEN_OF_BS8, 100)
    result = run(project, "test_model.py::test_decode", "--graph-capture-json", "report.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*does not match its goldens for bs=8 (over launch budget) *", "bs=8: 108 kernel launches > budget 100 *"]
    )
    text = result.stdout.str()
    assert "kernels:" not in text  # no content diff, only the budget line
    assert "accept them with" not in text  # --update-golden cannot fix a budget
    records = json.loads((project.path / "report.json").read_text())["records"]
    assert {r["key"]: r["outcome"] for r in records} == {"bs=1": "passed", "bs=4": "passed", "bs=8": "failed"}


def test_check_option_budgets(project: pytest.Pytester) -> None:
    run(project, "--update-golden").assert_outcomes(passed=2, failed=1)  # goldens written; budgets still apply
    result = run(project, "test_model.py::test_option_int", "test_model.py::test_option_per_bs")
    result.assert_outcomes(failed=1, passed=1)  # per bs: bs=1 101 <= 101, bs=8 108 <= 120, bs=4 unbudgeted
    text = result.stdout.str()
    assert "bs=8: 108 kernel launches > budget 105 (golden.check(max_launches=...))" in text
    assert "bs=1: 101 kernel launches" not in text and "bs=4: 104 kernel launches" not in text
    assert "accept them with" not in text  # a budget-only failure: --update-golden would not fix it
    result = run(project, "test_model.py::test_option_per_bs", "-k", "per_bs")
    result.assert_outcomes(passed=1)


def test_golden_out_files_carry_the_budget(project: pytest.Pytester) -> None:
    run(project, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    set_budget(project.path / GOLDEN_OF_BS8, 500)
    run(project, "test_model.py::test_decode", "--golden-out", "out").assert_outcomes(passed=1)
    obtained = project.path / "out" / GOLDEN_OF_BS8.relative_to("goldens")
    assert json.loads(obtained.read_text())["launch_budget"] == 500


def test_bad_budget_in_golden_is_a_named_error(project: pytest.Pytester) -> None:
    run(project, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    set_budget(project.path / GOLDEN_OF_BS8, -3)
    result = run(project, "test_model.py::test_decode")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*Fake_bs_8.json: 'launch_budget' must be a non-negative integer*got -3"])


def test_budget_helpers() -> None:
    key = CaptureKey("R", 8)
    assert store.budget_from_option(None, key) is None
    assert store.budget_from_option(7, key) == 7
    assert store.budget_from_option({8: 3, 1: 9}, key) == 3
    assert store.budget_from_option({1: 9}, key) is None
    for bad in (-1, "10", 2.5, True, {0: 3}, {8: -2}, {"8": 3}):
        with pytest.raises(UsageError, match="max_launches"):
            store.budget_from_option(bad, key)
    assert store.launch_budget_violations(key, 212, [(200, "x"), (None, "y"), (300, "z")]) == [
        "bs=8: 212 kernel launches > budget 200 (x)"
    ]
    assert store.launch_budget_violations(key, 200, [(200, "x")]) == []
    with pytest.raises(GoldenError, match="launch_budget"):
        checked_golden_dict({"schema_version": 1, "launch_budget": True}, "g.json")
