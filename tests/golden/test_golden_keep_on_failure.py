"""``--update-golden`` never deletes, and a run never calls unused, the goldens of a test that did not pass.

A test that raised inside ``golden.check`` (a buggy hook, an unreadable golden, a
golden link leading elsewhere, Ctrl-C) may not have checked all of its keys, so the
goldens in its folder are kept and not listed as unused; an interrupted session
deletes nothing.  Each case is run in-process and under ``-n 2``.
"""

from __future__ import annotations

import pytest
from helpers import FAKE_CONFTEST, PLUGIN, QUIET, TEST_DECODE, isolated_checkout, run

FAULTS = """

def pytest_graphcapture_postprocess_summary(config, summary):
    fault = os.environ.get("FAKE_FAULT")
    if fault == "hook":
        summary["kernels"].remove({"name": "no such kernel"})
    elif fault == "interrupt":
        raise KeyboardInterrupt
"""
FOLDER = "cpu/test_model.py/test_decode"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """Goldens for bs=1,2,4,8 of two tests; the capture now has 1,2,4, so bs=8 is a deletion candidate."""
    isolated_checkout(monkeypatch)
    pytester.makeconftest(FAKE_CONFTEST + FAULTS)
    pytester.makepyfile(test_model=TEST_DECODE)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4,8")
    run(pytester, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4")
    return pytester


def _goldens(project: pytest.Pytester) -> dict[str, bytes]:
    base = project.path / "goldens"
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*.json")) if not p.is_symlink()}


def _assert_kept(project: pytest.Pytester, before: dict[str, bytes], result: pytest.RunResult) -> None:
    after = _goldens(project)
    kept = {rel: data for rel, data in before.items() if rel.startswith(FOLDER)}
    assert {rel: after.get(rel) for rel in kept} == kept, result.stdout.str()
    assert f"deleted: goldens/{FOLDER}" not in result.stdout.str()
    assert f"unused: goldens/{FOLDER}" not in result.stdout.str()


def _break_bs1_golden(project: pytest.Pytester, how: str) -> None:
    path = project.path / "goldens" / FOLDER / "Fake_bs_1.json"
    path.unlink()
    if how == "deep":
        path.write_text("[" * 1000 + "]" * 1000, encoding="utf-8")
    elif how == "self-link":
        path.symlink_to(path.name)
    elif how == "outside-link":
        outside = project.path / "elsewhere.json"
        outside.write_text("{}", encoding="utf-8")
        path.symlink_to(outside)


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["in-process", "xdist"])
@pytest.mark.parametrize("update", [True, False], ids=["update", "check"])
def test_a_raising_postprocess_hook_keeps_the_tests_goldens(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, update: bool, xdist: tuple
) -> None:
    before = _goldens(project)
    monkeypatch.setenv("FAKE_FAULT", "hook")
    result = run(project, *xdist, *(["--update-golden"] if update else []))
    result.assert_outcomes(failed=2)
    _assert_kept(project, before, result)
    assert _goldens(project) == before


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["in-process", "xdist"])
@pytest.mark.parametrize("how", ["deep", "self-link", "outside-link"])
def test_an_unreadable_golden_keeps_the_other_goldens_of_its_test(
    project: pytest.Pytester, how: str, xdist: tuple
) -> None:
    _break_bs1_golden(project, how)
    before = {rel: data for rel, data in _goldens(project).items() if not rel.endswith("Fake_bs_1.json")}
    result = run(project, *xdist, "test_model.py::test_decode")
    result.assert_outcomes(failed=1)
    assert "RecursionError" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    _assert_kept(project, before, result)
    if how != "deep":  # an invalid golden is what --update-golden rewrites; links are refused
        result = run(project, *xdist, "test_model.py::test_decode", "--update-golden")
        result.assert_outcomes(failed=1)
        _assert_kept(project, before, result)


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["in-process", "xdist"])
def test_an_interrupted_session_deletes_nothing(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: tuple
) -> None:
    before = _goldens(project)
    monkeypatch.setenv("FAKE_FAULT", "interrupt")
    # In a subprocess: an in-process run would hand the KeyboardInterrupt to this session.
    result = project.runpytest_subprocess(*PLUGIN, *QUIET, "-p", "no:cacheprovider", *xdist, "--update-golden")
    assert result.ret == pytest.ExitCode.INTERRUPTED or "KeyboardInterrupt" in result.stdout.str()
    assert _goldens(project) == before
    assert "deleted: goldens/" not in result.stdout.str()


def test_a_passing_update_still_removes_the_dropped_size(project: pytest.Pytester) -> None:
    """The protection is per test: the same tree, with no fault, loses exactly the bs=8 goldens."""
    before = _goldens(project)
    result = run(project, "--update-golden")
    result.assert_outcomes(passed=2)
    gone = sorted(set(before) - set(_goldens(project)))
    assert gone == [f"cpu/test_model.py/{t}/Fake_bs_8.json" for t in ("test_decode", "test_other")]
