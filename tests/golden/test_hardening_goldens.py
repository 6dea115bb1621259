"""Bad goldens and failing writes, through a real pytest run of the capture engine.

Each case ends in a test failure (or usage error) whose message names the golden
file and the problem; the previous golden stays byte-identical and no temp file is left.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

CONFTEST = """
import errno, os
import pytest
from pytest_graphcapture.testing import FakeRunner
import pytest_graphcapture._io as golden_store

@pytest.fixture
def decode_runner():
    return FakeRunner([1, 2], hidden=int(os.environ.get("HARDEN_HIDDEN", "8")))

@pytest.fixture(autouse=True)
def _failing_disk(monkeypatch):
    code = os.environ.get("HARDEN_WRITE_ERRNO")
    if code:
        def refuse(*args, **kwargs):
            raise OSError(int(code), os.strerror(int(code)))
        monkeypatch.setattr(golden_store.os, "replace", refuse)
"""

TEST = """
def test_gate(graph_capture, golden):
    golden.check(graph_capture())
"""

GOLDEN = Path("goldens/cpu/test_gate.py/test_gate/FakeRunner_bs_2.json")


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_gate=TEST)
    created = pytester.runpytest("--update-golden")
    created.assert_outcomes(passed=1)
    assert (pytester.path / GOLDEN).exists()
    return pytester


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "goldens").rglob("*")) if p.is_file()
    }


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_a_failing_golden_write_names_the_file_and_keeps_the_old_golden(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    before = snapshot(project.path)
    monkeypatch.setenv("HARDEN_HIDDEN", "16")  # the model changed: --update-golden must rewrite
    monkeypatch.setenv("HARDEN_WRITE_ERRNO", str(code))
    result = project.runpytest("--update-golden")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "FakeRunner_bs_" in output and "cannot write" in output and __import__("os").strerror(code) in output
    assert "Traceback" not in output
    assert snapshot(project.path) == before, "the previous goldens must be intact and no temp file left"


BAD_GOLDENS = {
    "malformed JSON": ('{"schema_version": 1, "kernels": [', "JSON"),
    "duplicate keys": (None, "duplicate key"),
    "wrong types": (None, "kernels"),
    "newer schema": (None, "upgrade"),
    "not UTF-8": (b"\xff\xfe{}", "UTF-8"),
    "empty file": ("", ""),
}


def corrupt(path: Path, case: str) -> None:
    text, _ = BAD_GOLDENS[case]
    if isinstance(text, bytes):
        path.write_bytes(text)
        return
    if text is not None:
        path.write_text(text)
        return
    data = json.loads(path.read_text())
    if case == "duplicate keys":
        raw = path.read_text().rstrip()
        path.write_text(raw[:-1].rstrip() + ',\n  "platform": "cpu"\n}\n')
    elif case == "wrong types":
        data["kernels"] = "many"
        path.write_text(json.dumps(data))
    elif case == "newer schema":
        data["schema_version"] = 999
        path.write_text(json.dumps(data))


@pytest.mark.parametrize("case", sorted(BAD_GOLDENS))
def test_a_bad_golden_fails_naming_the_file_and_is_left_as_it_was(project: pytest.Pytester, case: str) -> None:
    path = project.path / GOLDEN
    corrupt(path, case)
    damaged = path.read_bytes()
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert str(GOLDEN.name) in output and BAD_GOLDENS[case][1] in output
    assert "Traceback" not in output and "golden.py:" not in output
    assert path.read_bytes() == damaged, "a plain run never rewrites a golden"


@pytest.mark.parametrize("platform", ["../../escape", "a/b\\c", "nul\x00x", "ünï/cødé", "p" * 300])
def test_hostile_platform_runner_and_test_names_stay_inside_the_golden_dir(
    pytester: pytest.Pytester, platform: str
) -> None:
    pytester.makepyfile(
        test_names="""
        import pytest
        from pytest_graphcapture.testing import FakeRunner

        @pytest.mark.parametrize("name", ["../../../up", "a/b", "é\\\\x"])
        def test_gate(graph_capture, golden, name):
            golden.check(graph_capture(FakeRunner([1], variants=["../v"], name=name)))
    """
    )
    # The platform comes from the platform hook, which (unlike argv) can carry any string, NUL included.
    pytester.makeconftest(f"def pytest_graphcapture_platform(config, device):\n    return {platform!r}\n")
    result = pytester.runpytest("--update-golden")
    result.assert_outcomes(passed=3)
    root = (pytester.path / "goldens").resolve()
    files = [p.resolve() for p in pytester.path.rglob("*.json")]
    assert len(files) == 3 and len({f.parent for f in files}) == 3, "distinct tests keep distinct folders"
    assert all(root in f.parents for f in files), files
    assert all(len(part) <= 255 for f in files for part in f.parts)
