"""A slip in how a test calls the plugin ends in one line that names the fix, never a traceback into the plugin."""

from __future__ import annotations

import pytest
from helpers import run

MISUSE = """
from pytest_graphcapture import GraphRunner


class NoSizes(GraphRunner):
    def forward_for(self, key):
        return lambda: None


class NoForward(GraphRunner):
    runner_name = "Mine"

    def batch_sizes(self):
        return [1]


def test_fixture_not_called(graph_capture, golden):
    golden.check(graph_capture)


def test_runner_not_captured(golden, decode_runner):
    golden.check(decode_runner)


def test_something_else(golden):
    golden.check({"bs=1": "summary"})


def test_no_batch_sizes(graph_capture):
    graph_capture(NoSizes())


def test_no_forward_for(graph_capture):
    graph_capture(NoForward())
"""


def test_golden_check_of_a_non_result_and_a_runner_missing_a_method_say_what_to_write(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_misuse=MISUSE)
    result = run(pytester, "--golden-dir=goldens")
    result.assert_outcomes(failed=5)
    result.stdout.fnmatch_lines_random(
        [
            "golden.check got the graph_capture fixture itself, not a capture result: call it first, "
            "golden.check(graph_capture()) or golden.check(graph_capture(runner))",
            "golden.check got a runner (TinyDecodeRunner), not a capture result: capture it first, "
            "golden.check(graph_capture(runner))",
            "golden.check expects the CaptureResult that graph_capture(...) or graph_capture.engine(...) returns, "
            "got dict",
            "RunnerContractError: runner NoSizes (NoSizes) does not implement batch_sizes(): a GraphRunner returns "
            "the batch sizes to capture from it, e.g. [[]1, 2, 4[]] (docs/adapting.md)",
            "CaptureError: capturing Mine[[]bs=1, rank=0[]] failed during setup: RunnerContractError: runner Mine "
            "(NoForward) does not implement forward_for(key)*",
        ]
    )
    out = result.stdout.str()
    assert "AttributeError" not in out and "fixtures.py" not in out and "Traceback" not in out
    assert not (pytester.path / "goldens").exists()
