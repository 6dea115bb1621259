"""The fake-backend fixtures users request to contract-test their own capture code (CPU only)."""

from __future__ import annotations

import pytest
from helpers import run

USER_CAPTURE = '''
import pytest
import torch

from pytest_graphcapture.errors import CaptureError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.testing import FakeRunner, InjectedFault


class Engine:
    """A user's capture loop in the style of the serving engines; ``mistake`` breaks the contract."""

    def __init__(self, mistake=None):
        self.mistake = mistake
        self.out = torch.zeros(8, 4)

    def forward(self, bs):
        self.out[:bs] = torch.ones(bs, 4) * 2

    def capture(self, profiler):
        sizes = [1, 2, 4] if self.mistake == "smallest first" else [4, 2, 1]
        for bs in sizes:
            for _ in range(2):
                torch.cuda.synchronize()
                self.forward(bs)
                profiler.step()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle()):
                self.forward(bs)
                if self.mistake == "step inside":
                    profiler.step()
            if self.mistake != "step inside":
                profiler.step()


@pytest.mark.parametrize("mistake", [None, "smallest first", "step inside"])
def test_capture_loop(capture_contract, mistake):
    engine = Engine(mistake)
    capture_contract.check_capture(engine.capture, forward=(engine, "forward"), key=lambda bs: bs, runner="Engine")


def test_fakes_are_removed_afterwards(capture_contract):
    engine = Engine()
    original = torch.cuda.CUDAGraph
    capture_contract.check_capture(engine.capture, forward=(engine, "forward"), key=lambda bs: bs)
    assert torch.cuda.CUDAGraph is original and "forward" not in vars(engine)


def test_runner(capture_contract):
    result = capture_contract.check_runner(FakeRunner((1, 4, 2), variants=(None, "v")))
    assert [k.batch_size for k in result.keys] == [4, 4, 2, 2, 1, 1]


def test_injected_fault_and_the_shared_log(fake_backend, recording_profiler, capture_contract):
    key = CaptureKey("FakeRunner", 2)
    fake_backend.inject_fault("capture", key)
    with pytest.raises(CaptureError, match="during capture") as info:
        capture_contract.check_runner(FakeRunner((1, 2)))
    assert isinstance(info.value.__cause__, InjectedFault)
    assert fake_backend.log.for_key(key)[-3:] == ["graph.enter", "forward", "graph.exit"]  # no step: the key failed
    recording_profiler.step()
    assert fake_backend.log.calls[-1].name == "profiler.step" and recording_profiler.log is fake_backend.log
'''


def test_capture_contract_checks_user_capture_loops_and_runners(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_user=USER_CAPTURE)
    result = run(pytester, "-v")
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(["*test_capture_loop?None? PASSED*"])
    # Smallest first: the listing shows bs=1 and bs=2 captured before the expected bs=4.
    result.stdout.fnmatch_lines(
        [
            "*capture calls of Engine (largest batch size first) differs from what was expected:",
            "*+forward(bs=1)",
            "*+graph.enter(bs=1)",
            "* forward(bs=4)",
        ]
    )
    # A step inside the graph: between forward and graph.exit, and missing after it.
    result.stdout.fnmatch_lines(["*+profiler.step(bs=4)", "* graph.exit(bs=4)", "*-profiler.step(bs=4)"])


def test_unknown_fault_stage_names_the_stages() -> None:
    from pytest_graphcapture.testing import FakeBackend

    with pytest.raises(ValueError, match="unknown stage 'warmup'; one of: warmup 1, warmup 2, capture"):
        FakeBackend().inject_fault("warmup")


def test_capture_contract_refuses_an_absurd_warmup_count_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_user=USER_CAPTURE.split("@pytest.mark.parametrize")[0]
        + """
def test_many(capture_contract):
    engine = Engine()
    capture_contract.check_capture(engine.capture, forward=(engine, "forward"), key=lambda bs: bs, warmups=5000)
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*capture_contract.check_capture: warmups= must be * from 0 to 1000*got 5000*"])
