"""torch's own capture calls raising inside an engine's loop: the key fails during its capture, once.

On a GPU, an error inside a graph's context invalidates the capture and torch's
``capture_end`` raises too; ``capture_begin`` can refuse a capture.  The CPU stand-ins
never raise, so these tests make them raise as CUDA would.
"""

from __future__ import annotations

import pytest
import torch

from pytest_graphcapture.engine import stand_ins
from pytest_graphcapture.engine.capture_observer import observation_mode
from pytest_graphcapture.engine.engine_loop import capture_engine_loop
from pytest_graphcapture.errors import CaptureError


class Engine:
    def __init__(self) -> None:
        self.out = torch.zeros(8, 4)
        self.device = torch.device("cpu")
        self.skipped: list[int] = []

    def forward(self, bs: int) -> None:
        self.out[:bs].add_(1.0)

    def capture(self, profiler) -> None:
        for bs in (4, 2, 1):
            try:
                for _ in range(2):
                    self.forward(bs)
                    profiler.step()
                with torch.cuda.graph(torch.cuda.CUDAGraph()):
                    self.forward(bs)
                    if bs == 2:
                        raise ValueError("the sampler read a host tensor during capture")
                profiler.step()
            except Exception:  # the engine logs the size and goes on
                self.skipped.append(bs)


def test_an_error_that_invalidates_the_capture_fails_its_key_during_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    def capture_end(self) -> None:
        self.capturing = False
        raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    monkeypatch.setattr(stand_ins.EagerCUDAGraph, "capture_end", capture_end)
    engine = Engine()
    with pytest.raises(CaptureError) as info:
        capture_engine_loop(engine.capture, forward=(engine, "forward"), key=lambda bs: bs, runner_name="E")
    message = str(info.value)
    # bs=4 failed first, in its capture (torch's capture_end raised with no exception leaving the graph).
    if observation_mode(real_graphs=False) == "hooks":
        # torch runs no end hook when ending the capture raises, and the engine caught the error: the
        # gate learns of it at the loop's next call and says what it can.
        assert message.startswith(
            "capturing E[bs=4, rank=0] failed during capture: RuntimeError: torch ended this graph's capture "
            "with an error (its capture-end hook never ran)"
        )
    else:
        assert message.startswith("capturing E[bs=4, rank=0] failed during capture: RuntimeError: CUDA error")
    assert "the capture function caught this error and carried on" in message
    assert engine.skipped == [4, 2, 1]


def test_the_exception_that_invalidated_a_capture_is_the_one_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    original = stand_ins.EagerCUDAGraph.capture_end

    def capture_end(self) -> None:
        import sys

        original(self)
        if sys.exc_info()[1] is not None:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    monkeypatch.setattr(stand_ins.EagerCUDAGraph, "capture_end", capture_end)
    engine = Engine()
    with pytest.raises(CaptureError) as info:
        capture_engine_loop(engine.capture, forward=(engine, "forward"), key=lambda bs: bs, runner_name="E")
    message = str(info.value)
    assert message.startswith(
        "capturing E[bs=2, rank=0] failed during capture: ValueError: the sampler read a host tensor during capture"
    )
    assert "not permitted" not in message and "inside another graph" not in message
