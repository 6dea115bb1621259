"""The ``pytest_graphcapture_normalize_kernel`` hook renames kernels before goldens are written and compared."""

from __future__ import annotations

import json

import pytest

CONFTEST = """
import os
import pytest
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import Summary


@pytest.fixture
def capture():
    result = CaptureResult(runner_name="Fake", platform="cpu")
    for bs in (2, 1):
        key = CaptureKey("Fake", bs)
        kernels = [{"name": "vendor_v12::gemm_kernel", "kind": "kernel", "count": 2}]
        result.keys[key] = KeyResult(key, summary=Summary(key=key, platform="cpu", kernels=kernels, ops=[],
                                                          launches={"total": 2, "by_api": {}}))
    return result


def pytest_graphcapture_normalize_kernel(config, name, level):
    if os.environ.get("RENAME_KERNELS") == "1":
        return "renamed::" + name.split("::")[-1] if not name.startswith("renamed::") else name
    return None
"""
TEST = """
def test_gate(capture, golden):
    golden.check(capture)
"""


def test_a_users_hook_changes_the_kernel_names_a_golden_holds(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_gate=TEST)
    monkeypatch.delenv("RENAME_KERNELS", raising=False)
    pytester.runpytest("-p", "no:cacheprovider", "--update-golden").assert_outcomes(passed=1)
    golden = next((pytester.path / "goldens").rglob("*_bs_1.json"))
    plain = [k["name"] for k in json.loads(golden.read_text())["kernels"] if k["kind"] == "kernel"]
    assert plain == ["vendor_v12::gemm_kernel"]

    # With the hook renaming, the capture and the plain golden are both renamed before they are compared ...
    monkeypatch.setenv("RENAME_KERNELS", "1")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    # ... and the goldens it writes hold the hook's names.
    pytester.runpytest("-p", "no:cacheprovider", "--update-golden").assert_outcomes(passed=1)
    renamed = [k["name"] for k in json.loads(golden.read_text())["kernels"] if k["kind"] == "kernel"]
    assert renamed == ["renamed::gemm_kernel"]
    # A golden that holds the hook's names fails a run without the hook: the names are really compared.
    monkeypatch.delenv("RENAME_KERNELS")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*- renamed::gemm_kernel ×2*", "*+ vendor_v12::gemm_kernel ×2*"])
