"""Isolated captures, run for real on CPU: the marker and the option capture in a fresh subprocess.

A profiler session that another test started first can leave kernel collection dead
for the whole process; an isolated capture runs in a process of its own, built from
the test's runner factory the way multi-rank captures build each rank's runner.
"""

from __future__ import annotations

import json
import os

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
    return TinyDecodeRunner((1, 2), device=ctx.device)


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


def test_the_marker_captures_in_a_fresh_process_and_checks_goldens_like_an_in_process_capture(
    project: pytest.Pytester,
) -> None:
    QUIET = ("--graph-capture-device=cpu", "--graph-capture-batch-sizes=1,2")
    run(project, *QUIET, "-k", "marker or plain", "--update-golden").assert_outcomes(passed=2)
    files = sorted(p.name for p in (project.path / "goldens/cpu/test_iso.py/test_marker").iterdir())
    assert files == ["TinyDecodeRunner_bs_1.json", "TinyDecodeRunner_bs_2.json"], "one process: no rank suffix"
    # The isolated capture and the in-process one summarize the same graphs.
    for name in files:
        isolated = json.loads((project.path / "goldens/cpu/test_iso.py/test_marker" / name).read_text())
        plain = json.loads((project.path / "goldens/cpu/test_iso.py/test_plain" / name).read_text())
        for section in ("ops", "kernels", "launches"):
            assert isolated[section] == plain[section], (name, section)
    run(project, *QUIET, "-k", "marker").assert_outcomes(passed=1)


def test_the_option_isolates_every_capture_and_a_runner_object_gets_one_clear_line(project: pytest.Pytester) -> None:
    result = run(
        project,
        "--graph-capture-device=cpu",
        "--graph-capture-batch-sizes=1,2",
        "--update-golden",
        "--graph-capture-isolate",
        "-k",
        "runner_object or plain",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*isolated graph_capture() got a runner object (TinyDecodeRunner); each process builds its own runner*"]
    )
    assert "Traceback" not in result.stdout.str()
    assert (project.path / "goldens/cpu/test_iso.py/test_plain/TinyDecodeRunner_bs_2.json").is_file()
