"""A golden changes on disk only when what it gates changed; it records the environment that produced its
content (pytester, fake capture).

Otherwise every developer whose torch build differs from the one that wrote the goldens
turns ``--update-golden`` into a pull request that rewrites every golden for its header.
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
    if str(bs) in os.environ.get("FAKE_CHANGE_BS", "").split(","):  # a real change at these sizes only
        summary.ops.append({"name": "aten::gelu", "input_dims": [[bs, 256]], "input_types": ["float"], "count": 1})
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


def _goldens(pytester: pytest.Pytester) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((pytester.path / GOLDEN).parent.glob("*.json"))}


def test_another_torch_build_rewrites_no_golden_and_a_real_change_exactly_the_changed_keys(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The goldens name another torch build than this run's (as a colleague's CUDA wheel would write them).
    for path in (project.path / GOLDEN).parent.glob("*.json"):
        text = path.read_text()
        assert text.count('"torch_version": "2.4.0"') == 1
        path.write_text(text.replace('"torch_version": "2.4.0"', '"torch_version": "2.4.0+cu128"'))
    before = _goldens(project)
    result, data = _report(project, "--update-golden")
    result.assert_outcomes(passed=1)
    assert data["counts"]["cpu"]["updated"] == 0 and _goldens(project) == before  # not one byte rewritten
    # Under another torch release too: the content is the same, so is every file.
    monkeypatch.setenv("FAKE_TORCH", "2.5.0")
    result, data = _report(project, "--update-golden")
    assert data["counts"]["cpu"]["updated"] == 0 and _goldens(project) == before

    # A real change at bs=2 and bs=4: exactly those files are rewritten, with the environment that produced them.
    monkeypatch.setenv("FAKE_CHANGE_BS", "2,4")
    result, data = _report(project, "--update-golden")
    assert data["counts"]["cpu"]["updated"] == 2
    after = _goldens(project)
    assert sorted(name for name in after if after[name] != before[name]) == ["Fake_bs_2.json", "Fake_bs_4.json"]
    assert _torch(project.path / GOLDEN) == "2.5.0"
    assert json.loads(after["Fake_bs_1.json"])["environment"]["torch_version"] == "2.4.0+cu128"


def test_the_environment_that_wrote_the_content_leads_a_later_failure(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_TORCH", "2.5.0")
    run(project, "--update-golden").assert_outcomes(passed=1)  # same content: the goldens keep torch 2.4.0
    assert _torch(project.path / GOLDEN) == "2.4.0"
    # The model changes under torch 2.5.0: the failure leads with the release that changed since the content.
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")
    result = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["torch release changed: torch 2.4.0 → 2.5.0 since the goldens were written (*"])
    # Accepted under 2.5.0, the new content records 2.5.0; a later change under it blames no torch.
    run(project, "--update-golden").assert_outcomes(passed=1)
    assert _torch(project.path / GOLDEN) == "2.5.0"
    monkeypatch.setenv("FAKE_CHANGE_BS", "2")
    result = run(project)
    result.assert_outcomes(failed=1)
    assert "since the goldens were written" not in result.stdout.str()


def test_update_new_never_rewrites_an_existing_golden(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = (project.path / GOLDEN).read_bytes()
    monkeypatch.setenv("FAKE_TORCH", "2.5.0")
    run(project, "--update-golden=new").assert_outcomes(passed=1)
    assert (project.path / GOLDEN).read_bytes() == before


def test_accept_leaves_a_golden_whose_content_is_the_same(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    before = (project.path / GOLDEN).read_bytes()
    monkeypatch.setenv("FAKE_TORCH", "2.5.0")
    run(project, "--golden-out", "harvest").assert_outcomes(passed=1)
    capsys.readouterr()
    assert main(["accept", str(project.path / "harvest"), "--golden-dir", str(project.path / "goldens")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("0 created, 0 changed, 3 unchanged")
    assert (project.path / GOLDEN).read_bytes() == before
