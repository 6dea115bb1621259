"""The failure text a reviewer reads: batch sizes grouped, the environment change first (pytester)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, TEST_DECODE, run

from pytest_graphcapture.golden.change import DEFAULT_CLASSES
from pytest_graphcapture.golden.store import CI_VARIABLES

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
    """Per-size change lines of the diff file that no grouped line of the message reproduces.

    View/metadata op lines are left out: the message folds them into one line that names the file.
    """
    grouped = []
    for line in message:
        found = re.match(r"\s+bs=([\d,]+): (.*)$", line)
        if found:
            sizes, text = [int(b) for b in found.group(1).split(",")], found.group(2)
            callers = re.search(r" \(from (.*?)\)", text)  # a GEMM's callers fold into its line
            grouped.append((sizes, text.replace(callers.group(0), "") if callers else text))
            grouped += [(sizes, f"aten::{op}") for op in (callers.group(1).split(" › ") if callers else [])]
    missing = []
    bs = None
    for line in per_size.splitlines():
        heading = re.match(r"bs=(\d+) \(", line)
        if heading:
            bs = int(heading.group(1))
        elif re.match(r"    [~+-] ", line):
            text = line.strip()
            if DEFAULT_CLASSES.kind(text.split(" ", 2)[1]) == "view":
                continue
            if not any(
                bs in sizes and re.sub(r"(?<![\w.])bs(?![\w.])", str(bs), template) in (text, text.split(" ")[1])
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
    folded = [line for line in message if "view/metadata op line" in line]
    assert len(folded) == 1 and folded[0].endswith(f"full diff in {marker.split(' in ', 1)[1]}")


ENV_CONFTEST = (
    FAKE_CONFTEST
    + """
_plain_summary = make_summary


def make_summary(bs, runner, platform):
    summary = _plain_summary(bs, runner, platform)
    summary.environment = {
        "torch_version": os.environ.get("FAKE_TORCH", "2.11.0"),
        "cuda_runtime_version": os.environ.get("FAKE_CUDA", "12.8"),
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
    monkeypatch.setenv("FAKE_CUDA", "12.9")
    run(pytester, "test_model.py::test_decode").assert_outcomes(passed=1)  # the environment alone never fails
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    result = run(pytester, "test_model.py::test_decode")
    result.assert_outcomes(failed=1)
    out = result.outlines
    first = next(i for i, line in enumerate(out) if "since the goldens were written" in line)
    assert out[first] == (
        "torch release changed: torch 2.11.0 → 2.12.0; CUDA runtime 12.8 → 12.9 since the goldens were written "
        "(a new torch release can decompose ops and pick kernels differently, which may explain the diff)"
    )
    assert out[first + 1].startswith("graph capture of Fake does not match its goldens")
    summary_line = next(line for line in out if line.startswith("FAILED test_model.py::test_decode"))
    assert "Failed: torch release changed: torch 2.11" in summary_line  # the short summary leads with it too


def _failure_lines(result: pytest.RunResult, test: str) -> list[str]:
    """The lines of one test's failure section, below its ``____ test ____`` heading."""
    out = result.outlines
    start = next(i for i, line in enumerate(out) if re.fullmatch(rf"_+ {test} _+", line)) + 1
    end = next(i for i in range(start, len(out)) if out[i].startswith("=") or re.fullmatch(r"_+ \S+ _+", out[i]))
    return out[start:end]


def _set_golden_torch(folder: Path, version: str) -> None:
    """Rewrite the recorded torch of every golden under ``folder``, as if written under ``version``."""
    goldens = sorted(folder.rglob("*.json"))
    assert goldens
    for path in goldens:
        data = json.loads(path.read_text())
        data["environment"]["torch_version"] = version
        path.write_text(json.dumps(data))


def test_diff_after_a_torch_release_change_says_so_first(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real capture checked against goldens of another torch release: the first line says the release changed."""
    import torch

    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST.replace(repr(SIZES), "[1, 2]"))  # two sizes say it as well as eight
    pytester.makepyfile(test_model=TEST)
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    now = torch.__version__
    release, _, build = now.partition("+")
    older = "2.8.0" if release != "2.8.0" else "2.9.1"
    goldens = pytester.path / "goldens"

    _set_golden_torch(goldens, f"{older}+{build}" if build else older)
    run(pytester).assert_outcomes(passed=1)  # another torch without a diff passes: the environment never fails
    monkeypatch.setenv("MLP_WIDTH", "192")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    lines = _failure_lines(result, "test_decode")
    was = f"{older}+{build}" if build else older
    assert lines[0] == (
        f"torch release changed: torch {was} → {now} since the goldens were written (a new torch release "
        "can decompose ops and pick kernels differently, which may explain the diff)"
    )
    assert lines[1].startswith("graph capture of TinyDecodeRunner does not match its goldens")
    summary_line = next(line for line in result.outlines if line.startswith("FAILED test_model.py::test_decode"))
    assert "Failed: torch release changed: torch " in summary_line

    # Another build of the same release (CPU goldens, CUDA wheel) is named, but is no release change.
    other = f"{release}+cu128" if build != "cu128" else f"{release}+cpu"
    _set_golden_torch(goldens, other)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    lines = _failure_lines(result, "test_decode")
    assert lines[0] == f"torch {other} → {now} since the goldens were written (may explain the diff)"
    assert "torch release changed" not in result.stdout.str()


def test_when_only_some_goldens_come_from_another_torch_release_the_first_line_names_those_keys(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(CONFTEST.replace(repr(SIZES), "[1, 2, 4]"))
    pytester.makepyfile(test_model=TEST)
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    now = torch.__version__
    goldens = pytester.path / "goldens"
    for path in goldens.rglob("*_bs_[12].json"):
        data = json.loads(path.read_text())
        data["environment"]["torch_version"] = "2.8.0"
        path.write_text(json.dumps(data))
    monkeypatch.setenv("MLP_WIDTH", "192")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    lines = _failure_lines(result, "test_decode")
    assert lines[0] == (
        f"torch release changed for bs=1, bs=2 (2 of 3 failed keys): torch 2.8.0 → {now} since their goldens were "
        "written (a new torch release can decompose ops and pick kernels differently, which may explain their diff; "
        "the other failed keys show no toolchain change)"
    )
    assert lines[1].startswith("graph capture of TinyDecodeRunner does not match its goldens for bs=1, bs=2, bs=4")

    # Keys from two older releases: each release is named with its keys.
    path = next(goldens.rglob("*_bs_2.json"))
    data = json.loads(path.read_text())
    data["environment"]["torch_version"] = "2.9.1"
    path.write_text(json.dumps(data))
    lines = _failure_lines(run(pytester), "test_decode")
    assert lines[0].startswith(
        f"torch release changed for bs=1, bs=2 (2 of 3 failed keys): torch 2.8.0 → {now} (bs=1); "
        f"torch 2.9.1 → {now} (bs=2) since their goldens were written"
    )
