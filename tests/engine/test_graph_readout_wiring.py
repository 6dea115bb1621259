"""The graph readout wired into the CUDA backend, behind fakes of torch.cuda and cuda-bindings.

Not run on a GPU: torch's graph calls and the cuda-bindings calls are fakes that keep the
contract the backend relies on (``CUDAGraph(keep_graph=True)``, ``raw_cuda_graph()``,
explicit ``instantiate()``; the runtime and driver calls as the readout's own tests fake them).
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any, Iterator

import pytest
import torch
from test_graph_readout import Error, FakeDriver, FakeRuntime13, _two_branch

from pytest_graphcapture.engine import backend as backend_module
from pytest_graphcapture.engine import capture as capture_module
from pytest_graphcapture.engine import readout
from pytest_graphcapture.engine.backend import NO_KEEP_GRAPH, CudaGraphBackend
from pytest_graphcapture.engine.readout import GraphReadoutWarning, read_captured_graph
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.summary import Summary

KEY = CaptureKey("Fake", 8)


class FakeTorchGraph:
    """torch.cuda.CUDAGraph as of torch 2.8: keep_graph keeps the raw graph and defers instantiation."""

    events: list[str] = []
    address = 0

    def __init__(self, keep_graph: bool = False) -> None:
        self.keep_graph = keep_graph
        self.events.append(f"new keep_graph={keep_graph}")

    def raw_cuda_graph(self) -> int:
        assert self.keep_graph, "raw_cuda_graph() needs keep_graph=True"
        self.events.append("raw_cuda_graph")
        return self.address

    def instantiate(self) -> None:
        self.events.append("instantiate")

    def replay(self) -> None:
        self.events.append("replay")


class OldTorchGraph:
    """torch.cuda.CUDAGraph before 2.8: no keep_graph, no raw_cuda_graph."""

    def __init__(self) -> None:
        FakeTorchGraph.events.append("new")

    def replay(self) -> None:
        FakeTorchGraph.events.append("replay")


@contextlib.contextmanager
def fake_capture(graph: Any, pool: Any = None, stream: Any = None) -> Iterator[None]:
    FakeTorchGraph.events.append("capture begin")
    yield
    FakeTorchGraph.events.append("capture end")


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> FakeRuntime13:
    """A CUDA device with one captured graph (the two-branch graph of the DOT fixtures)."""
    runtime = FakeRuntime13()
    FakeTorchGraph.events = []
    FakeTorchGraph.address = _two_branch(runtime)
    for name, value in {
        "is_available": lambda: True,
        "graph_pool_handle": lambda: "pool",
        "Stream": lambda device=None: "stream",
        "stream": lambda stream: contextlib.nullcontext(),
        "synchronize": lambda device=None: None,
        "memory_allocated": lambda device=None: 0,
        "memory_reserved": lambda device=None: 0,
        "graph": fake_capture,
        "CUDAGraph": FakeTorchGraph,
    }.items():
        monkeypatch.setattr(torch.cuda, name, value)
    monkeypatch.setattr(torch.version, "hip", None)
    monkeypatch.setattr(backend_module, "load_bindings", lambda: (runtime, FakeDriver(runtime)))
    monkeypatch.setattr(readout, "_said", set())
    return runtime


def test_each_captured_graph_is_instantiated_then_read(cuda: FakeRuntime13) -> None:
    """Instantiated first (torch's get_graph_data() needs the exec graph); the kept template is read after."""
    backend = CudaGraphBackend("cuda")
    graph = backend.capture_one(KEY, lambda: None)
    assert isinstance(graph, FakeTorchGraph)
    assert FakeTorchGraph.events == [
        "new keep_graph=True",
        "capture begin",
        "capture end",
        "instantiate",
        "raw_cuda_graph",
    ]
    assert backend.readout_sources[KEY] == "graph"  # this torch graph has no get_graph_data()
    expected = read_captured_graph(FakeTorchGraph.address, runtime=cuda, driver=FakeDriver(cuda))  # type: ignore[arg-type]
    assert backend.graph_readouts[KEY] == expected
    assert backend.graph_readouts[KEY].branches() == 2
    assert backend.readout_seconds[KEY] >= 0


def test_a_failed_read_is_said_and_the_graph_still_instantiated(cuda: FakeRuntime13) -> None:
    cuda.fail["cudaGraphGetNodes"] = Error.cudaErrorInvalidValue
    backend = CudaGraphBackend("cuda")
    with pytest.warns(GraphReadoutWarning, match=r"graph capture .*cudaGraphGetNodes failed.*profiler replay"):
        backend.capture_one(KEY, lambda: None)
    assert "instantiate" in FakeTorchGraph.events
    assert KEY not in backend.graph_readouts


def test_a_driver_without_the_call_is_said_and_the_graph_still_instantiated(
    cuda: FakeRuntime13, monkeypatch: pytest.MonkeyPatch
) -> None:
    def missing(*args: object) -> None:
        raise RuntimeError('Function "cuGraphKernelNodeGetParams" not found')

    backend = CudaGraphBackend("cuda")
    monkeypatch.setattr(FakeDriver, "cuGraphKernelNodeGetParams", missing)
    with pytest.warns(GraphReadoutWarning, match=r'reading the captured graph: Function "cuGraphKernelNodeGetParams"'):
        backend.capture_one(KEY, lambda: None)
    assert "instantiate" in FakeTorchGraph.events and KEY not in backend.graph_readouts


def test_without_cuda_bindings_graphs_are_captured_as_before(
    cuda: FakeRuntime13, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend_module, "load_bindings", lambda: None)
    backend = CudaGraphBackend("cuda")
    backend.capture_one(KEY, lambda: None)
    assert FakeTorchGraph.events == ["new keep_graph=False", "capture begin", "capture end"]
    assert backend.graph_readouts == {}


def test_a_torch_without_keep_graph_is_said_once_and_captures_as_before(
    cuda: FakeRuntime13, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(torch.cuda, "CUDAGraph", OldTorchGraph)
    with pytest.warns(GraphReadoutWarning) as said:
        backend = CudaGraphBackend("cuda")
        CudaGraphBackend("cuda")
    assert [str(w.message) for w in said] == [NO_KEEP_GRAPH.format(version=torch.__version__)]
    backend.capture_one(KEY, lambda: None)
    assert FakeTorchGraph.events == ["new", "capture begin", "capture end"]


def test_rocm_builds_are_not_read_in_process(cuda: FakeRuntime13, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "hip", "7.2.53211")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backend = CudaGraphBackend("cuda")
    assert backend.bindings is None


def _captured(backend: CudaGraphBackend) -> CaptureResult:
    """A capture result whose one key has the NVIDIA capture window's summary: launches named by no kernel."""
    graph = backend.capture_one(KEY, lambda: None)
    launch_ops = [("memset", None), *[("kernel", {"name": "aten::mm", "input_dims": [[8, 256]]})] * 5]
    launch_ops.append(("memcpy", {"name": "aten::copy_", "input_dims": [[8]]}))
    summary = Summary(
        key=KEY,
        platform="cuda-sm90",
        kernels=[],
        ops=[],
        launches={"total": 7, "by_api": {"cudaLaunchKernel": 5, "cudaMemsetAsync": 1, "cudaMemcpyAsync": 1}},
        complete=False,
        incomplete_reason="5 of 7 launches in the capture window carry no kernel name",
        launch_ops=launch_ops,
    )
    result = CaptureResult(runner_name="Fake", platform="cuda-sm90")
    result.keys[KEY] = KeyResult(KEY, trace_path=None, summary=summary, graph=graph, seconds=0.0)
    return result


def test_with_a_replay_the_graph_gives_the_kernels_and_the_replay_cross_checks(
    cuda: FakeRuntime13, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = CudaGraphBackend("cuda")
    result = _captured(backend)
    replay = [{"name": "ampere_sgemm_128x64_tn", "kind": "kernel"}]  # the profiler kept one record of seven
    monkeypatch.setattr(capture_module, "replay_kernels_from_profile", lambda prof: replay)
    with pytest.warns(Warning, match="kernel evidence incomplete"):
        capture_module._attach_replay_kernels(result, backend, backend_module.CaptureProgress(), None)
    summary = result.keys[KEY].summary
    assert summary.kernel_source == "graph" and summary.topology == {
        "nodes": {"kernel": 5, "memcpy": 1, "memset": 1},
        "branches": 2,
    }
    assert not summary.complete and "missing from the replay" in summary.incomplete_reason
    assert {k["op"]["name"] for k in summary.kernels if k["kind"] == "kernel"} == {"aten::mm"}
    assert "<<<64,256,49152>>>" in {k.get("launch") for k in summary.kernels}  # the CUTLASS kernel


def test_without_a_replay_kernels_come_from_the_graph_alone(cuda: FakeRuntime13) -> None:
    backend = CudaGraphBackend("cuda")
    result = _captured(backend)
    capture_module._attach_graph_readouts(result, backend)
    summary = result.keys[KEY].summary
    assert summary.complete and summary.unattributed is None and summary.kernel_source == "graph"
    assert sum(k["count"] for k in summary.kernels) == 7
    assert FakeTorchGraph.events.count("replay") == 0


def test_a_replay_that_lost_every_record_leaves_the_key_incomplete_and_without_a_golden(
    cuda: FakeRuntime13, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a readout an empty replay is a profiler fault that fails the capture; with one, the graph stands,
    the key is incomplete naming the silenced profiler, and no golden may be written from it."""
    backend = CudaGraphBackend("cuda")
    result = _captured(backend)
    monkeypatch.setattr(capture_module, "replay_kernels_from_profile", lambda prof: [])
    monkeypatch.delenv("CUDA_INJECTION64_PATH", raising=False)
    with pytest.warns(Warning, match="kernel evidence incomplete"):
        capture_module._attach_replay_kernels(result, backend, backend_module.CaptureProgress(), None)
    summary = result.keys[KEY].summary
    assert not summary.complete
    assert "replay recorded no kernels although the graph launches kernels" in summary.incomplete_reason
    assert result.keys[KEY].no_golden == summary.incomplete_reason
    assert sum(k["count"] for k in summary.kernels) == 7


def test_a_silent_replay_names_the_cupti_client_found(cuda: FakeRuntime13, monkeypatch: pytest.MonkeyPatch) -> None:
    """An injection library set after the capture began (a recorder loaded by the process) is named in the reason."""
    backend = CudaGraphBackend("cuda")
    result = _captured(backend)
    monkeypatch.setattr(capture_module, "replay_kernels_from_profile", lambda prof: [])
    monkeypatch.setenv("CUDA_INJECTION64_PATH", "/opt/recorder.so")
    with pytest.warns(Warning, match="kernel evidence incomplete"):
        capture_module._attach_replay_kernels(result, backend, backend_module.CaptureProgress(), None)
    reason = result.keys[KEY].summary.incomplete_reason
    assert (
        "another CUPTI client holds CUPTI (a CUPTI injection library (CUDA_INJECTION64_PATH=/opt/recorder.so))"
        in reason
    )
    assert result.keys[KEY].no_golden == reason
