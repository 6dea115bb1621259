"""What ``golden.check`` owns: named checks, usage errors, and the goldens of tests that are gone."""

from __future__ import annotations

import pytest
from helpers import TEST_DECODE, fake_project, run

TWO_CHECKS = """
import os

def test_decode(fake_capture, golden):
    result = fake_capture()
    golden.check(result)
    name = os.environ.get("SECOND_NAME") or None
    golden.check(result, level="family", name=name)
"""

BAD_REGEX = """
def test_decode(fake_capture, golden):
    golden.check(fake_capture(), ignore_ops=["aten::(mm"])
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return fake_project(pytester, monkeypatch)


def goldens(project: pytest.Pytester) -> list[str]:
    base = project.path / "goldens"
    return sorted(p.relative_to(base).as_posix() for p in base.rglob("*.json")) if base.exists() else []


# --------------------------------------------------------------------------- two checks in one test


def test_a_second_check_of_the_same_runner_is_refused_saying_how_to_name_it(project: pytest.Pytester) -> None:
    project.makepyfile(test_model=TWO_CHECKS)
    result = run(project, "--update-golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*golden.check: this test already checked runner Fake against the goldens in "
            "goldens/cpu/test_model.py/test_decode/; both checks would write the same files.*"
            '*golden.check(result, name="family")'
        ]
    )
    assert "--update-golden" not in result.stdout.str().split("FAILURES")[1]


def test_named_checks_keep_their_own_goldens_and_stay_green(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(test_model=TWO_CHECKS)
    monkeypatch.setenv("SECOND_NAME", "family")
    run(project, "--update-golden").assert_outcomes(passed=1)
    folder = "cpu/test_model.py/test_decode"
    assert goldens(project) == [f"{folder}/Fake_bs_{bs}.json" for bs in (1, 2, 4)] + [
        f"{folder}/family/Fake_bs_{bs}.json" for bs in (1, 2, 4)
    ]
    result = run(project)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["cpu: 6 checked, 6 passed, 0 failed, 0 created, 0 updated, 0 deleted, 0 unused*"])


# --------------------------------------------------------------------------- usage errors


def test_a_bad_ignore_regex_is_a_usage_error_not_a_mismatch(project: pytest.Pytester) -> None:
    project.makepyfile(test_model=BAD_REGEX)
    result = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*golden.check(ignore_ops=...): 'aten::(mm' is not a valid regular expression: missing ), *"]
    )
    out = result.stdout.str()
    assert "does not match" not in out and "has no golden" not in out and "--update-golden" not in out


# --------------------------------------------------------------------------- goldens of tests that are gone

KEPT = "cpu/test_model.py/test_decode"
GONE = "cpu/test_model.py/test_other"


@pytest.fixture
def renamed(project: pytest.Pytester) -> pytest.Pytester:
    """Goldens of test_decode and test_other; then test_other is renamed."""
    project.makepyfile(test_model=TEST_DECODE)
    run(project, "--update-golden").assert_outcomes(passed=2)
    project.makepyfile(test_model=TEST_DECODE.replace("def test_other", "def test_renamed"))
    return project


def test_goldens_of_a_renamed_test_are_reported_after_a_whole_suite_run(renamed: pytest.Pytester) -> None:
    result = run(renamed, "-k", "test_decode")
    result.assert_outcomes(passed=1, deselected=1)
    assert "unused" not in result.stdout.str().split("graph capture goldens")[1].replace("0 unused", "")
    result = run(renamed, "test_model.py")
    assert "belongs to no collected test" not in result.stdout.str(), "a run given paths is not the whole suite"
    result = run(renamed)
    result.stdout.fnmatch_lines(
        [
            "cpu: 6 checked, 3 passed, 3 failed, 0 created, 0 updated, 0 deleted, 3 unused, 0 incomplete",
            f"unused: goldens/{GONE}/Fake_bs_1.json (belongs to no collected test; remove with --update-golden)",
        ]
    )
    assert len([p for p in goldens(renamed) if p.startswith(GONE)]) == 3


def test_update_golden_removes_the_goldens_of_a_deleted_test(renamed: pytest.Pytester) -> None:
    result = run(renamed, "--update-golden")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"deleted: goldens/{GONE}/Fake_bs_4.json"])
    assert not (renamed.path / "goldens" / GONE).exists()
    assert goldens(renamed) == sorted(
        [f"{KEPT}/Fake_bs_{bs}.json" for bs in (1, 2, 4)]
        + [f"cpu/test_model.py/test_renamed/Fake_bs_{bs}.json" for bs in (1, 2, 4)]
    )


def test_goldens_of_a_skipped_or_broken_module_are_kept(project: pytest.Pytester) -> None:
    project.makepyfile(test_model=TEST_DECODE, test_extra=TEST_DECODE, test_broken=TEST_DECODE)
    run(project, "--update-golden").assert_outcomes(passed=6)
    before = goldens(project)
    project.makepyfile(test_extra='import pytest\npytest.skip("needs vllm", allow_module_level=True)\n')
    project.makepyfile(test_broken="import no_such_module\n" + TEST_DECODE)
    result = run(project, "--update-golden", "--continue-on-collection-errors")
    result.assert_outcomes(passed=2, skipped=1, errors=1)
    assert "belongs to no collected test" not in result.stdout.str()
    assert "deleted:" not in result.stdout.str()
    assert goldens(project) == before


def test_orphans_are_found_under_xdist(renamed: pytest.Pytester) -> None:
    result = run(renamed, "-n", "2", subprocess=True, warm=True)
    result.stdout.fnmatch_lines(
        [f"unused: goldens/{GONE}/Fake_bs_2.json (belongs to no collected test; remove with --update-golden)"]
    )
