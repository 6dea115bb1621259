"""The failure text a reviewer reads: batch sizes grouped, the environment change first (pytester)."""

from __future__ import annotations

import re

import pytest
from helpers import FAKE_CONFTEST, TEST_DECODE, run

from pytest_graphcapture.plugin.settings import CI_VARIABLES

SIZES = [1, 2, 4, 8, 12, 16, 24, 32]

CONFTEST = """
import os
import pytest
from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


@pytest.fixture
def decode_runner():
    width = int(os.environ.get("MLP_WIDTH", "128"))
    return TinyDecodeRunner(SIZES, device="cpu", config=DecoderConfig(hidden_size=64, intermediate_size=width))
""".replace("SIZES", repr(SIZES))

TEST = """
def test_decode(graph_capture, golden):
    golden.check(graph_capture())
"""


def _covered(message: list[str], per_size: str) -> list[str]:
    """Per-size change lines of the diff file that no grouped line of the message reproduces."""
    grouped = []
    for line in message:
        found = re.match(r"\s+bs=([\d,]+): (.*)$", line)
        if found:
            grouped.append(([int(b) for b in found.group(1).split(",")], found.group(2)))
    missing = []
    bs = None
    for line in per_size.splitlines():
        heading = re.match(r"bs=(\d+) \(", line)
        if heading:
            bs = int(heading.group(1))
        elif re.match(r"    [~+-] ", line):
            text = line.strip()
            if not any(
                bs in sizes and re.sub(r"(?<![\w.])bs(?![\w.])", str(bs), template) == text
                for sizes, template in grouped
            ):
                missing.append(f"bs={bs}: {text}")
    return missing


def test_widened_mlp_at_eight_batch_sizes_fits_in_40_lines(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_model=TEST)
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("MLP_WIDTH", "192")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    out = result.outlines
    start = next(i for i, line in enumerate(out) if line.startswith("graph capture of TinyDecodeRunner"))
    end = next(i for i, line in enumerate(out) if line.startswith("accept them with:"))
    message = out[start : end + 1]
    assert len(message) <= 40, "\n".join(message)
    assert "bs=1,2,4,8,12,16,24,32 differ from their goldens:" in message
    assert "    bs=1,2,4,8,12,16,24,32: ~ aten::silu [[bs,128]] → [[bs,192]]" in message
    marker = next(line for line in message if line.startswith("per-batch-size diff in "))
    per_size = (pytester.path / marker.split(" in ", 1)[1]).read_text()
    assert per_size.count(" (goldens/cpu/test_model.py/test_decode/TinyDecodeRunner_bs_") == len(SIZES)
    assert _covered(message, per_size) == []  # every distinct change of every size is in the message


ENV_CONFTEST = (
    FAKE_CONFTEST
    + """
_plain_summary = make_summary


def make_summary(bs, runner, platform):
    summary = _plain_summary(bs, runner, platform)
    summary.environment = {
        "torch_version": os.environ.get("FAKE_TORCH", "2.11.0"),
        "cuda_runtime_version": "12.8",
        "device_name": "NVIDIA H100 80GB HBM3",
    }
    return summary
"""
)


def test_toolchain_change_leads_the_failure(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(ENV_CONFTEST)
    pytester.makepyfile(test_model=TEST_DECODE)
    run(pytester, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_TORCH", "2.12.0")
    run(pytester, "test_model.py::test_decode").assert_outcomes(passed=1)  # the environment alone never fails
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    result = run(pytester, "test_model.py::test_decode")
    result.assert_outcomes(failed=1)
    out = result.outlines
    first = next(i for i, line in enumerate(out) if "since the goldens were written" in line)
    assert out[first] == "torch 2.11.0 → 2.12.0 since the goldens were written (may explain the diff)"
    assert out[first + 1].startswith("graph capture of Fake does not match its goldens")
    summary_line = next(line for line in out if line.startswith("FAILED test_model.py::test_decode"))
    assert "torch 2.11.0 → 2.12.0" in summary_line
