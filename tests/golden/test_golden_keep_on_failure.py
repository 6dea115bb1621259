"""``--update-golden`` never deletes, and a run never calls unused, the goldens of a test that did not pass.

A test that raised inside ``golden.check`` (a buggy hook, an unreadable golden, a
golden link leading elsewhere, Ctrl-C) may not have checked all of its keys, so the
goldens in its folder are kept and not listed as unused; an interrupted session
deletes nothing.  Each case is run in-process; under ``-n 2`` the faults are the tests
of one project (one module each, beside a passing one), checked and then updated in
one session each, and an interrupted session is a run of its own.
"""

from __future__ import annotations

import pytest
from helpers import ONE_CHECK, TEST_DECODE, fake_project, run

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
    fake_project(pytester, monkeypatch, extra=FAULTS)
    pytester.makepyfile(test_model=TEST_DECODE)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4,8")
    run(pytester, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4")
    return pytester


def _goldens(project: pytest.Pytester) -> dict[str, bytes]:
    base = project.path / "goldens"
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*.json")) if not p.is_symlink()}


def _assert_kept(
    project: pytest.Pytester, before: dict[str, bytes], result: pytest.RunResult, folder: str = FOLDER
) -> None:
    after = _goldens(project)
    kept = {rel: data for rel, data in before.items() if rel.startswith(folder)}
    assert kept and {rel: after.get(rel) for rel in kept} == kept, result.stdout.str()
    assert f"deleted: goldens/{folder}" not in result.stdout.str()
    assert f"unused: goldens/{folder}" not in result.stdout.str()


def _break_bs1_golden(project: pytest.Pytester, how: str, folder: str = FOLDER) -> None:
    path = project.path / "goldens" / folder / "Fake_bs_1.json"
    path.unlink()
    if how == "deep":
        path.write_text("[" * 1000 + "]" * 1000, encoding="utf-8")
    elif how == "self-link":
        path.symlink_to(path.name)
    elif how == "outside-link":
        outside = project.path / "elsewhere.json"
        outside.write_text("{}", encoding="utf-8")
        path.symlink_to(outside)


@pytest.mark.parametrize("update", [True, False], ids=["update", "check"])
def test_a_raising_postprocess_hook_keeps_the_tests_goldens(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, update: bool
) -> None:
    before = _goldens(project)
    monkeypatch.setenv("FAKE_FAULT", "hook")
    result = run(project, *(["--update-golden"] if update else []))
    result.assert_outcomes(failed=2)
    _assert_kept(project, before, result)
    assert _goldens(project) == before


@pytest.mark.parametrize("how", ["deep", "self-link", "outside-link"])
def test_an_unreadable_golden_keeps_the_other_goldens_of_its_test(project: pytest.Pytester, how: str) -> None:
    _break_bs1_golden(project, how)
    before = {rel: data for rel, data in _goldens(project).items() if not rel.endswith("Fake_bs_1.json")}
    result = run(project, "test_model.py::test_decode")
    result.assert_outcomes(failed=1)
    assert "RecursionError" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    _assert_kept(project, before, result)
    if how != "deep":  # an invalid golden is what --update-golden rewrites; links are refused
        result = run(project, "test_model.py::test_decode", "--update-golden")
        result.assert_outcomes(failed=1)
        _assert_kept(project, before, result)


@pytest.mark.parametrize("xdist", [(), ("-n", "2")], ids=["in-process", "xdist"])
def test_an_interrupted_session_deletes_nothing(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, xdist: tuple
) -> None:
    before = _goldens(project)
    monkeypatch.setenv("FAKE_FAULT", "interrupt")
    # In a subprocess (warm: nothing here is about how it starts): an in-process run would hand the
    # KeyboardInterrupt to this session.
    result = run(project, *xdist, "--update-golden", subprocess=True, warm=True)
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


#: The faults above as the tests of one project, a module each, the module name saying which.
FAULTY_MODULES = {
    "test_hook": "hook",  # its two tests raise in the postprocess hook
    "test_deep": "deep",  # bs=1 golden: nested past the parser's depth
    "test_self_link": "self-link",
    "test_outside_link": "outside-link",
}
HOOK_FIXTURE = """
import pytest


@pytest.fixture(autouse=True)
def _fault(monkeypatch):
    monkeypatch.setenv("FAKE_FAULT", "hook")
"""


def test_under_xdist_each_failing_tests_goldens_are_kept(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The in-process cases above, together under ``-n 2``: a check, then an update, each one xdist session.

    ``test_model.py`` fails the check (bs=8 is no longer captured) and passes the update, which deletes its
    dropped bs=8 goldens and nothing of the failing tests'.
    """
    fake_project(pytester, monkeypatch, extra=FAULTS)
    pytester.makepyfile(test_hook=TEST_DECODE, **{name: ONE_CHECK for name in FAULTY_MODULES if name != "test_hook"})
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4,8")
    run(pytester, "--update-golden").assert_outcomes(passed=7)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4")
    pytester.makepyfile(test_hook=HOOK_FIXTURE + TEST_DECODE)
    for name, how in FAULTY_MODULES.items():
        if name != "test_hook":
            _break_bs1_golden(pytester, how, f"cpu/{name}.py/test_decode")
    before = _goldens(pytester)
    failing = {f"cpu/{name}.py/" for name in FAULTY_MODULES}

    result = run(pytester, "-n", "2", warm=True)  # workers forked warm: nothing here is about how they start
    result.assert_outcomes(failed=7)
    out = result.stdout.str()
    assert "RecursionError" not in out and "Traceback" not in out
    for folder in failing:
        _assert_kept(pytester, before, result, folder)
    assert _goldens(pytester) == before

    # An invalid golden is what --update-golden rewrites (test_deep.py would pass); links are refused.
    modules = [f"{name}.py" for name in ("test_model", *FAULTY_MODULES) if name != "test_deep"]
    result = run(pytester, "-n", "2", *modules, "--update-golden", warm=True)
    result.assert_outcomes(passed=2, failed=4)
    failing.discard("cpu/test_deep.py/")
    for folder in failing:
        _assert_kept(pytester, before, result, folder)
    gone = sorted(set(before) - set(_goldens(pytester)))
    assert gone == [f"cpu/test_model.py/{t}/Fake_bs_8.json" for t in ("test_decode", "test_other")]
