"""Isolated captures, run for real on CPU: the marker and the option capture in a fresh subprocess.

A profiler session that another test started first can leave kernel collection dead
for the whole process; an isolated capture runs in a process of its own, built from
the test's runner factory the way multi-rank captures build each rank's runner.
"""

from __future__ import annotations

import os
import shutil

import pytest
from helpers import run

TESTS = """
import os
from pathlib import Path

import pytest

from pytest_graphcapture.engine.decode_model import TinyDecodeRunner


def runner_factory(ctx):
    # Where the runner was built: the test compares it with its own process.
    Path(os.environ["PID_FILE"]).write_text(str(os.getpid()))
    return TinyDecodeRunner(device=ctx.device)  # built as graph_capture() builds its default runner


@pytest.mark.graph_capture_isolated
def test_marker(graph_capture, golden):
    result = graph_capture(runner_factory)
    assert int(Path(os.environ["PID_FILE"]).read_text()) != os.getpid()
    assert [kr.key.batch_size for kr in result] == [2, 1] and {kr.key.rank for kr in result} == {0}
    assert all(kr.summary is not None and kr.metrics.capture_seconds > 0 for kr in result)
    golden.check(result)


def test_plain(graph_capture, golden):
    golden.check(graph_capture())


def test_runner_object(graph_capture):
    graph_capture(TinyDecodeRunner((1,)))
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in list(os.environ):
        if name.startswith("GRAPH_CAPTURE_"):
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PID_FILE", str(pytester.path / "pid.txt"))
    pytester.makepyfile(test_iso=TESTS)
    return pytester


@pytest.mark.slow
def test_the_marker_and_the_option_capture_in_a_fresh_process_and_check_goldens_like_an_in_process_capture(
    project: pytest.Pytester,
) -> None:
    QUIET = ("--graph-capture-device=cpu", "--graph-capture-batch-sizes=1,2")
    run(project, *QUIET, "-k", "plain", "--update-golden").assert_outcomes(passed=1)
    folder = project.path / "goldens/cpu/test_iso.py"
    shutil.copytree(folder / "test_plain", folder / "test_marker")
    before = {p.name: p.read_bytes() for p in (folder / "test_marker").iterdir()}
    assert sorted(before) == ["TinyDecodeRunner_bs_1.json", "TinyDecodeRunner_bs_2.json"]
    # The isolated capture (the marker's; the option isolates every capture) passes the goldens of the in-process
    # one: the same graphs, and one process: no rank suffix.  A runner object (it cannot be sent to the
    # process) gets one clear line.
    result = run(project, *QUIET, "--graph-capture-isolate", "-k", "marker or runner_object")
    result.assert_outcomes(passed=1, failed=1)
    assert "cpu: 2 checked, 2 passed, 0 failed" in result.stdout.str()
    assert {p.name: p.read_bytes() for p in (folder / "test_marker").iterdir()} == before
    result.stdout.fnmatch_lines(
        ["*isolated graph_capture() got a runner object (TinyDecodeRunner); each process builds its own runner*"]
    )
    assert "Traceback" not in result.stdout.str()


MARKER_TESTS = """
import pytest

from pytest_graphcapture.engine.decode_model import TinyDecodeRunner


def runner_factory(ctx):
    raise AssertionError("no process may start: the arguments are refused first")


@pytest.mark.graph_capture_isolated(timeout=TIMEOUT)
def test_isolated(graph_capture):
    graph_capture(runner_factory)


@pytest.mark.graph_capture_ranks(2, timeout=TIMEOUT)
def test_ranks(graph_capture):
    graph_capture(runner_factory)


def test_call(graph_capture):
    graph_capture(runner_factory, ranks=1, timeout=TIMEOUT)
"""


@pytest.mark.parametrize(
    ("timeout", "problem"),
    [
        ('"abc"', "'abc' is not a number of seconds"),
        ("0", "the timeout must be a positive, finite number of seconds, got 0"),
        ("-1", "the timeout must be a positive, finite number of seconds, got -1"),
        ('float("nan")', "the timeout must be a positive, finite number of seconds, got nan"),
        ('float("inf")', "the timeout must be a positive, finite number of seconds, got inf"),
        ("True", "True is not a number of seconds"),
        ("[5]", "[5] is not a number of seconds"),
    ],
)
def test_a_bad_timeout_is_one_line_naming_the_marker_or_the_argument(
    pytester: pytest.Pytester, timeout: str, problem: str
) -> None:
    pytester.makepyfile(test_markers=MARKER_TESTS.replace("TIMEOUT", timeout))
    result = run(pytester, "--graph-capture-device=cpu")
    result.assert_outcomes(failed=3)
    for where in ("@pytest.mark.graph_capture_isolated(timeout=...)", "@pytest.mark.graph_capture_ranks(timeout=...)"):
        assert f"{where}: {problem}" in result.outlines, result.stdout.str()
    assert f"graph_capture(timeout=...): {problem}" in result.outlines
    text = result.stdout.str()
    assert "Traceback" not in text and "ValueError" not in text and "init_process_group" not in text


def test_marker_arguments_that_are_not_its_own_are_refused_by_name(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_markers="""
import pytest


@pytest.mark.graph_capture_isolated(timout=5)
def test_misspelled(graph_capture):
    graph_capture("os:getcwd")


@pytest.mark.graph_capture_isolated(5)
def test_positional(graph_capture):
    graph_capture("os:getcwd")


@pytest.mark.graph_capture_ranks("two")
def test_rank_count(graph_capture):
    graph_capture("os:getcwd")
"""
    )
    result = run(pytester, "--graph-capture-device=cpu")
    result.assert_outcomes(failed=3)
    for line in (
        "@pytest.mark.graph_capture_isolated: unknown argument timout=5; it takes timeout=",
        "@pytest.mark.graph_capture_isolated: 1 positional argument given; it takes only timeout=",
        "@pytest.mark.graph_capture_ranks: the number of ranks must be a positive integer, got 'two'",
    ):
        assert line in result.outlines, result.stdout.str()
