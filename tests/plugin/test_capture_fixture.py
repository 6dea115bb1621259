"""The ``graph_capture`` fixture as users run it with their own runner: sizes, failures, output."""

from __future__ import annotations

import pytest
from helpers import run, use_this_checkout

from pytest_graphcapture.keys import safe_name
from pytest_graphcapture.plugin import fixtures

RUNNER_CONFTEST = """
import os
import pytest
import torch
from pytest_graphcapture.testing import FakeRunner


class BrokenRunner(FakeRunner):
    def forward_for(self, key):
        def forward():
            os.write(2, b"my forward writes to stderr\\n")
            if key.batch_size == 2:
                raise ValueError("hidden size does not match the weights")
        return forward


@pytest.fixture
def decode_runner():
    if os.environ.get("BROKEN_RUNNER"):
        return BrokenRunner([1, 2, 4])
    return FakeRunner([1, 2, 4])
"""

CAPTURE_TEST = """
import os

def test_capture(graph_capture):
    result = graph_capture()
    print("KEYS=" + ",".join(str(k.batch_size) for k in result.keys))
    os.write(2, b"the test writes to stderr\\n")
    assert os.environ.get("FAIL_AFTER") != "1", "failing on purpose"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(RUNNER_CONFTEST)
    pytester.makepyfile(test_capture=CAPTURE_TEST)
    return pytester


def failing_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str
) -> tuple[pytest.RunResult, str]:
    """Run the project with ``variable`` set (a broken runner, or a test failing after its capture)."""
    monkeypatch.setenv(variable, "1")
    result = run(project)
    result.assert_outcomes(failed=1)
    return result, result.stdout.str()


def test_batch_sizes_option_applies_to_a_conftest_runner(project: pytest.Pytester) -> None:
    result = run(project, "-s", "--graph-capture-batch-sizes=4,1")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*KEYS=4,1"])


def test_a_batch_size_the_runner_lacks_is_one_line_naming_the_setting(project: pytest.Pytester) -> None:
    project.makeini("[pytest]\ngraph_capture_batch_sizes = 1,3\n")
    result = run(project)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "UsageError: ini key graph_capture_batch_sizes asks for batch size 3, which runner FakeRunner "
            "does not capture (it lists 1, 2, 4)"
        ]
    )
    assert "Traceback" not in result.stdout.str() and "pytest_graphcapture/" not in result.stdout.str()


def test_a_failing_forward_is_a_short_message_naming_key_stage_and_user_frame(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, out = failing_run(project, monkeypatch, "BROKEN_RUNNER")
    failure = out[out.index("_ test_capture _") : out.index("short test summary")]
    result.stdout.fnmatch_lines(
        [
            "CaptureError: capturing BrokenRunner[[]bs=2, rank=0[]] failed during warmup 1: "
            "ValueError: hidden size does not match the weights",
            "in your code (innermost last):",
            '*conftest.py", line 12, in forward',
            '*raise ValueError("hidden size does not match the weights")',
        ]
    )
    assert "pytest_graphcapture/" not in failure, "our own source is noise in the user's failure"
    shown = failure.split("- Captured stderr call -")[0]
    assert len(shown.splitlines()) < 15, shown


def test_kineto_trace_points_stay_out_of_a_failures_captured_stderr(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, out = failing_run(project, monkeypatch, "FAIL_AFTER")
    assert "the test writes to stderr" in out, "other stderr output is kept"
    assert "USDT" not in out and "profiler_start" not in out


def test_progress_per_key_shows_live_with_v_and_without_s(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_this_checkout(monkeypatch)
    # A subprocess, as users run it: output capturing works on the real descriptors there.
    result = run(project, "-v", subprocess=True, warm=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*graph-capture: FakeRunner bs=4 rank=0 captured in *s*",
            "*graph-capture: FakeRunner bs=2 rank=0 captured in *s*",
            "*graph-capture: FakeRunner bs=1 rank=0 captured in *s*",
        ]
    )


def test_a_long_capture_reports_its_total_on_one_line_without_v(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = run(project)
    assert "graph-capture:" not in result.stdout.str(), "a short capture prints nothing without -v"
    monkeypatch.setattr(fixtures, "LONG_CAPTURE_S", 0.0)  # the in-process run shares the module
    result = run(project)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*graph-capture: FakeRunner: 3 keys captured in *s*"])
    assert "bs=4" not in result.stdout.str()


PARAMETRIZED_TRACES = """
import pytest

@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_capture(graph_capture, dtype):
    graph_capture(trace="per-bs")
"""

SAME_RUNNER_TRACES = """
def test_engine(graph_capture):
    graph_capture(trace="per-bs")


class TestTwice:
    def test_capture_twice(self, graph_capture):
        first = graph_capture(trace="per-bs")
        second = graph_capture(trace="per-bs")
        assert set(first.trace_paths).isdisjoint(second.trace_paths)
"""


def test_every_test_writes_its_traces_to_its_own_folder(pytester: pytest.Pytester) -> None:
    """Tests capturing runners of the same name (in one module or two, parametrized, twice in a test) keep every trace."""
    pytester.makeconftest(RUNNER_CONFTEST)
    pytester.makepyfile(test_traces=PARAMETRIZED_TRACES)
    (pytester.path / "sub").mkdir()
    (pytester.path / "sub" / "test_other.py").write_text(SAME_RUNNER_TRACES)
    result = run(pytester, "--graph-capture-batch-sizes=1")
    result.assert_outcomes(passed=4)
    folder = pytester.path / "graph_capture_profile"
    assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*.json.gz")) == [
        "sub/test_other.py/TestTwice/test_capture_twice/2/FakeRunner_bs_1_rank0.json.gz",
        "sub/test_other.py/TestTwice/test_capture_twice/FakeRunner_bs_1_rank0.json.gz",
        "sub/test_other.py/test_engine/FakeRunner_bs_1_rank0.json.gz",
        f"test_traces.py/{safe_name('test_capture[bf16]')}/FakeRunner_bs_1_rank0.json.gz",
        f"test_traces.py/{safe_name('test_capture[fp16]')}/FakeRunner_bs_1_rank0.json.gz",
    ]
