"""A golden records the environment of the last run that wrote or confirmed it (pytester, fake capture).

Otherwise ``--update-golden`` under a new torch leaves the old version in a golden whose
entries did not change, and the next real failure leads with a false "torch X → Y since
the goldens were written".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import ONE_CHECK, fake_project, run

from pytest_graphcapture.tools.cli import main

# The fake capture's summaries record FAKE_TORCH as the torch version, as a live capture records torch.__version__.
TOOLCHAIN = """
_summary_of_the_fake_model = make_summary


def make_summary(bs, runner, platform):
    summary = _summary_of_the_fake_model(bs, runner, platform)
    summary.environment = {"torch_version": os.environ.get("FAKE_TORCH", "2.4.0"), "device_name": "FakeDevice"}
    return summary
"""

GOLDEN = "goldens/cpu/test_model.py/test_decode/Fake_bs_2.json"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    fake_project(pytester, monkeypatch, ONE_CHECK, extra=TOOLCHAIN)
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    assert _torch(pytester.path / GOLDEN) == "2.4.0"
    return pytester


def _torch(path: Path) -> str:
    return json.loads(path.read_text())["environment"]["torch_version"]


def _report(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    out = pytester.path / "report.json"
    result = run(pytester, *args, "--graph-capture-json", str(out))
    return result, json.loads(out.read_text())


def test_update_records_the_new_toolchain_so_a_later_failure_does_not_blame_it(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TORCH", "2.5.0")
    result, data = _report(project, "--update-golden")
    result.assert_outcomes(passed=1)
    assert (
        data["counts"]["cpu"]["updated"] == 3
    )  # the entries are the same; the environment they were confirmed in is not
    assert _torch(project.path / GOLDEN) == "2.5.0"
    before = (project.path / GOLDEN).read_bytes()
    result, data = _report(project, "--update-golden")
    assert data["counts"]["cpu"]["updated"] == 0 and (project.path / GOLDEN).read_bytes() == before

    # The model changes under the same torch: the failure does not lead with a torch change.
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")
    result = run(project)
    result.assert_outcomes(failed=1)
    assert "since the goldens were written" not in result.stdout.str()
    assert "environment differs" not in result.stdout.str()
    # A torch change since the goldens were confirmed still leads the failure.
    monkeypatch.setenv("FAKE_TORCH", "2.6.0")
    result = run(project)
    result.stdout.fnmatch_lines(["torch release changed: torch 2.5.0 → 2.6.0 since the goldens were written (*"])


def test_update_new_never_rewrites_an_existing_golden(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = (project.path / GOLDEN).read_bytes()
    monkeypatch.setenv("FAKE_TORCH", "2.5.0")
    run(project, "--update-golden=new").assert_outcomes(passed=1)
    assert (project.path / GOLDEN).read_bytes() == before


def test_accept_records_the_environment_of_a_harvest_with_the_same_entries(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setenv("FAKE_TORCH", "2.5.0")
    run(project, "--golden-out", "harvest").assert_outcomes(passed=1)
    capsys.readouterr()
    assert main(["accept", str(project.path / "harvest"), "--golden-dir", str(project.path / "goldens")]) == 0
    out = capsys.readouterr().out
    assert "changed   cpu/test_model.py/test_decode/Fake_bs_2.json" in out
    assert "    ~ environment: torch_version 2.4.0 → 2.5.0 (kernels, ops and launches unchanged)" in out
    assert out.rstrip().endswith("0 created, 3 changed, 0 unchanged")
    assert _torch(project.path / GOLDEN) == "2.5.0"
    assert main(["accept", str(project.path / "harvest"), "--golden-dir", str(project.path / "goldens")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("0 created, 0 changed, 3 unchanged")
