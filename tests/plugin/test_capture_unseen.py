"""A runner whose capture forward the profile holds nothing of: refused, never an empty golden marked complete.

``graph_capture()`` runs each key's forward and records its capture: a forward that does
its work in the warmups only (a cached result at the capture) or at some sizes only leaves
that key's profile empty, and a golden from it would pass any later forward.  The capture
fails in one line naming the runner, the key and what to do, as ``graph_capture.engine``
does; a forward that raises is still reported as itself.
"""

from __future__ import annotations

import pytest
from helpers import run

RUNNER = """
import os

import pytest
import torch

from pytest_graphcapture import GraphRunner

ARRANGEMENT = os.environ.get("ARRANGEMENT", "plain")
WIDTH = int(os.environ.get("WIDTH", "4"))


class CachingRunner(GraphRunner):
    def __init__(self):
        self.x, self.w = torch.ones(4, WIDTH), torch.ones(WIDTH, WIDTH)
        self.cache = {}

    def batch_sizes(self):
        return [1, 2, 4]

    def forward_for(self, key):
        bs, calls = key.batch_size, []

        def forward():
            calls.append(bs)
            if ARRANGEMENT == "cached" and bs in self.cache:
                return self.cache[bs]  # the warmups did the work: the capture returns their result
            if ARRANGEMENT == "warmup only" and len(calls) > 1:
                return None  # work in the first warmup only
            if ARRANGEMENT == f"idle at bs={bs}":
                return None  # this size does nothing at all
            if ARRANGEMENT == "idle at bs=4, raises at bs=1" and bs in (4, 1):
                if bs == 1:
                    raise ValueError("hidden size does not match the weights")
                return None
            self.cache[bs] = out = torch.relu(torch.mm(self.x[:bs], self.w))
            return out

        return forward


def runner_factory(ctx):
    return CachingRunner()


@pytest.fixture
def decode_runner():
    return CachingRunner()
"""

TESTS = """
import pytest
from conftest import runner_factory


def test_capture(graph_capture, golden):
    golden.check(graph_capture())


@pytest.mark.graph_capture_isolated
def test_isolated(graph_capture, golden):
    golden.check(graph_capture(runner_factory))
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(RUNNER)
    pytester.makepyfile(test_runner=TESTS)
    return pytester


def _goldens(pytester: pytest.Pytester) -> list[str]:
    return sorted(p.name for p in (pytester.path / "goldens").rglob("*.json"))


def _refused(result: pytest.RunResult, bs: int) -> None:
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            f"EmptyCaptureError: graph-capture: CachingRunner bs={bs} rank=0: capture: the profile holds nothing of "
            "the capture forward (no op, no kernel, no launch) although the forward ran, so no golden is written:*"
            "; make the capture forward run, on this thread, the work its graph replays"
        ]
    )
    assert "Traceback" not in result.stdout.str() and "pytest_graphcapture/" not in result.stdout.str()


@pytest.mark.parametrize(
    ("arrangement", "bs"),
    [("cached", 4), ("warmup only", 4), ("idle at bs=4", 4), ("idle at bs=2", 2), ("idle at bs=1", 1)],
)
def test_a_capture_forward_the_profile_holds_nothing_of_is_refused_and_writes_no_golden(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, arrangement: str, bs: int
) -> None:
    monkeypatch.setenv("ARRANGEMENT", arrangement)
    _refused(run(project, "-k", "test_capture", "--update-golden", "--golden-dir=goldens"), bs)
    assert _goldens(project) == []


def test_a_forward_that_raises_is_reported_as_itself_before_an_empty_key(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARRANGEMENT", "idle at bs=4, raises at bs=1")
    result = run(project, "-k", "test_capture", "--update-golden", "--golden-dir=goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "CaptureError: capturing CachingRunner[[]bs=1, rank=0[]] failed during warmup 1: "
            "ValueError: hidden size does not match the weights"
        ]
    )
    assert "EmptyCaptureError" not in result.stdout.str() and _goldens(project) == []


def test_an_isolated_capture_refuses_it_in_one_line_too(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARRANGEMENT", "idle at bs=2")
    result = run(project, "-k", "test_isolated", "--update-golden", "--golden-dir=goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*isolated graph capture failed: *EmptyCaptureError: graph-capture: CachingRunner bs=2 rank=0: capture: "
            "the profile holds nothing of the capture forward*"
        ]
    )
    assert _goldens(project) == []


def test_goldens_of_a_forward_that_works_gate_a_changed_one_that_the_profile_cannot_see(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, "-k", "test_capture", "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
    assert _goldens(project) == ["CachingRunner_bs_1.json", "CachingRunner_bs_2.json", "CachingRunner_bs_4.json"]
    run(project, "-k", "test_capture", "--golden-dir=goldens").assert_outcomes(passed=1)
    monkeypatch.setenv("WIDTH", "6")  # a changed forward: other shapes
    for arrangement in ("plain", "cached", "idle at bs=2"):  # never a pass, seen or not
        monkeypatch.setenv("ARRANGEMENT", arrangement)
        run(project, "-k", "test_capture", "--golden-dir=goldens").assert_outcomes(failed=1)
