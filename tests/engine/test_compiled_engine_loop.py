"""A ``torch.compile(mode="reduce-overhead")`` model's capture loop under the engine-loop gate.

inductor's cudagraph trees capture from inside the compiled callable: a size's first call
warms it up (the first call on a device also captures the tree manager's empty priming
graph), its second call records the graph, later calls replay it.  On a GPU, with
``warmups=1``, that second call is the capture forward and holds the key's graph.  On CPU
inductor keeps every graph out of CUDA graphs (silently: it only counts it), so the capture
forward holds no graph and the gate refuses it in one line saying so.

The model is a bare matmul on CPU, so inductor emits no C++ kernel (no compiler needed,
about a second); on a GPU a ReLU after it gives inductor a Triton kernel of its own.
"""

from __future__ import annotations

import pytest
import torch

from pytest_graphcapture.engine.backend import detect_platform
from pytest_graphcapture.engine.capture import CaptureSettings
from pytest_graphcapture.engine.contract import CaptureContractError
from pytest_graphcapture.engine.loop import capture_engine_loop

# torch.compile's own modules, imported on the first compile, still use the deprecated torch.jit.script_method.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


class CompiledEngine:
    """A decode engine whose model is ``torch.compile(mode="reduce-overhead")``; its loop warms each size up once."""

    def __init__(self, device: str, warmups: int = 1) -> None:
        self.device = torch.device(device)
        self.x = torch.ones(8, 16, device=self.device)
        self.w = torch.ones(16, 16, device=self.device)
        self.warmups = warmups
        body = (lambda x: torch.relu(torch.mm(x, self.w))) if self.device.type == "cuda" else self.matmul
        self.model = torch.compile(body, mode="reduce-overhead", dynamic=False)

    def matmul(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, self.w)

    def forward(self, bs: int) -> torch.Tensor:
        return self.model(self.x[:bs])

    def capture(self, profiler) -> None:
        for bs in (4, 2):
            for _ in range(self.warmups):
                self.forward(bs)
                profiler.step()
            self.forward(bs)  # the compiled call that records the size's graph
            profiler.step()


def gate(engine: CompiledEngine, warmups: int, **settings) -> object:
    try:
        with torch.no_grad():
            return capture_engine_loop(
                engine.capture, forward=(engine, "forward"), key=lambda bs: bs, warmups=warmups, **settings
            )
    finally:
        torch._dynamo.reset()  # no compiled code of this test lingers into the next


def test_on_cpu_a_reduce_overhead_model_captures_no_graph_and_is_refused_in_one_line() -> None:
    with pytest.raises(CaptureContractError) as info:
        gate(CompiledEngine("cpu"), warmups=1, settings=CaptureSettings(summarize=False))
    assert str(info.value) == (
        "graph_capture.engine: CompiledEngine bs=4: capture: the capture forward ran with no graph around it and "
        "began none inside it; inductor kept 1 compiled graph out of CUDA graphs while the loop ran "
        '(torch.compile(mode="reduce-overhead") captures no graph on CPU, and on a GPU it logs \'skipping '
        "cudagraphs due to …' with the reason)"
    )


@pytest.mark.gpu
def test_on_a_gpu_a_reduce_overhead_model_is_gated_with_one_warmup() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    settings = CaptureSettings(platform=detect_platform(device))
    result = gate(CompiledEngine("cuda"), warmups=1, device=device, settings=settings)
    assert [k.batch_size for k in result.keys] == [4, 2]
    for key_result in result:
        assert (
            isinstance(key_result.graph, tuple) and len(key_result.graph) == 1
        )  # the recorded graph, not the priming one
        summary = key_result.summary
        assert summary.kernel_source in ("graph-data", "graph", "replay") and summary.kernels, summary.kernel_source
    # Two warmups: the second call recorded the graph in a warmup, the capture call replayed it.
    with pytest.raises(CaptureContractError, match=r"the forward of warmup 2 began one: .* pass warmups=1 to "):
        gate(CompiledEngine("cuda", warmups=2), warmups=2, device=device, settings=settings)
