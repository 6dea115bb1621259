"""torch's own capture calls raising inside an engine's loop: the key fails during its capture, once.

On a GPU, an error inside a graph's context invalidates the capture and torch's
``capture_end`` raises too; ``capture_begin`` can refuse a capture.  The CPU stand-ins
never raise, so these tests make them raise as CUDA would.
"""

from __future__ import annotations

import pytest
import torch

from pytest_graphcapture.engine import observe as capture_observer
from pytest_graphcapture.engine import observe as stand_ins
from pytest_graphcapture.engine.loop import capture_engine_loop
from pytest_graphcapture.engine.observe import observation_mode
from pytest_graphcapture.errors import CaptureError
from pytest_graphcapture.summary.platform import graph_hooks


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


class PiecewiseEngine:
    """Two pieces captured inside the forward; a piece whose capture fails is logged and skipped, as engines do."""

    def __init__(self, doomed_piece: int) -> None:
        self.x, self.w = torch.ones(8, 4), torch.ones(4, 4)
        self.device = torch.device("cpu")
        self.doomed_piece, self.capturing = doomed_piece, False
        self.skipped: list[tuple[int, int]] = []

    def forward(self, bs: int) -> torch.Tensor:
        x = self.x[:bs]
        for piece in range(2):
            if self.capturing:
                graph = torch.cuda.CUDAGraph()
                graph.doomed = bs == 2 and piece == self.doomed_piece
                try:
                    with torch.cuda.graph(graph):
                        x = torch.relu(x @ self.w)
                except RuntimeError:  # the engine logs the piece and goes on with the next
                    self.skipped.append((bs, piece))
            else:
                x = torch.relu(x @ self.w)
            x = torch.softmax(x, dim=-1)  # eager, between the pieces
        return x

    def capture(self) -> None:
        for bs in (4, 2, 1):
            for _ in range(2):
                self.forward(bs)
            self.capturing = True
            try:
                self.forward(bs)
            finally:
                self.capturing = False


@pytest.mark.parametrize("mode", ["hooks", "patch"])
@pytest.mark.parametrize("doomed_piece", [0, 1], ids=["then the next piece begins", "then the forward returns"])
def test_a_piece_whose_capture_torch_ended_with_an_error_fails_its_key_during_capture(
    monkeypatch: pytest.MonkeyPatch, mode: str, doomed_piece: int
) -> None:
    if mode == "hooks" and graph_hooks(torch) is None:
        pytest.skip(f"torch {torch.__version__} has no global capture hooks (torch >= 2.15): run under torch 2.15")
    if mode == "patch":
        monkeypatch.setattr(capture_observer, "graph_hooks", lambda torch: None)
    original = stand_ins.EagerCUDAGraph.capture_end

    def capture_end(self) -> None:
        if getattr(self, "doomed", False):  # as CUDA does for a capture an error inside it invalidated
            self.capturing = False
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")
        original(self)

    monkeypatch.setattr(stand_ins.EagerCUDAGraph, "capture_end", capture_end)
    engine = PiecewiseEngine(doomed_piece)
    with pytest.raises(CaptureError) as info:
        capture_engine_loop(engine.capture, forward=(engine, "forward"), key=lambda bs: bs, runner_name="E")
    message = str(info.value)
    assert observation_mode(real_graphs=False) == mode
    if mode == "hooks":  # no end hook ran: the gate says what it saw, never "still capturing"
        why = (
            f"RuntimeError: torch ended the capture of piece {doomed_piece + 1} (graph {doomed_piece + 1} begun inside "
            f"the forward) with an error (its capture-end hook never ran)"
        )
    else:
        why = "RuntimeError: CUDA error: operation failed due to a previous error during capture"
    assert message.startswith(f"capturing E[bs=2, rank=0] failed during capture: {why}"), message
    assert "the capture function caught this error and carried on" in message
    assert "still capturing" not in message and engine.skipped == [(2, doomed_piece)]
