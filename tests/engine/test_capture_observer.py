"""How the engine-loop gate sees each graph capture: torch's global hooks (torch >= 2.15), else patching.

The hook tests run against torch's own registration functions
(``torch.cuda.graphs.register_graph_capture_start_hook`` …) with the CPU stand-in graph
firing torch's registries where ``torch/cuda/graphs.py`` fires them: ``capture_begin`` runs
the start hooks once the capture is live, ``capture_end`` the end hooks after
``capture_end_pre`` and then ``instantiate()`` (for ``keep_graph=False``), which runs the
instantiate hooks.  They skip on a torch without the hooks (CI's 2.13); the patching tests
run everywhere.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from pytest_graphcapture.engine import loop as engine_loop
from pytest_graphcapture.engine import observe as capture_observer
from pytest_graphcapture.engine.backend import EagerBackend
from pytest_graphcapture.engine.capture import INJECTION, CaptureSettings, CuptiConflictError, refuse_other_clients
from pytest_graphcapture.engine.contract import CaptureContractError
from pytest_graphcapture.engine.loop import capture_engine_loop
from pytest_graphcapture.engine.observe import EagerCUDAGraph, HookFailure, observation_mode, observe_captures
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.platform import graph_hooks

HAS_HOOKS = graph_hooks(torch) is not None
#: The stand-in's own capture_begin (the patching path replaces it on the class for the loop).
STAND_IN_BEGIN = EagerCUDAGraph.__dict__["capture_begin"]
needs_hooks = pytest.mark.skipif(
    not HAS_HOOKS,
    reason=f"torch {torch.__version__} has no torch.cuda.graphs.register_graph_capture_start_hook (torch >= 2.15 "
    f"has it): run this module under torch 2.15, e.g. PIP_CONSTRAINT=/dev/null pip install torch==2.15.0 in a "
    f"venv of its own, or scripts/compat.sh 2.15.0",
)


def registries() -> dict[str, int]:
    """How many global hooks torch holds per registry (empty where torch has none)."""
    graphs = torch.cuda.graphs
    names = ("_global_capture_start_hooks", "_global_capture_end_hooks", "_global_instantiate_hooks")
    return {name: len(getattr(graphs, name, {})) for name in names}


class Engine:
    """A decode engine's start-up loop: per batch size, two warmups, then the capture; largest first."""

    device = "cpu"

    def __init__(self, sizes: tuple = (4, 2), empty_graph_at: Any = None) -> None:
        self.sizes, self.empty_graph_at = sizes, empty_graph_at
        self.weight = torch.randn(8, 8)
        self.seen: list[dict] = []

    def forward(self, batch_size: int) -> torch.Tensor:
        return torch.relu(torch.ones(batch_size, 8) @ self.weight)

    def capture(self) -> None:
        for bs in self.sizes:
            for _ in range(2):
                self.forward(bs)
            graph = torch.cuda.CUDAGraph()
            self.seen.append(
                {
                    "begin patched": torch.cuda.CUDAGraph.__dict__.get("capture_begin") is not STAND_IN_BEGIN,
                    "hooks": registries(),
                }
            )
            with torch.cuda.graph(graph):
                if bs != self.empty_graph_at:
                    self.forward(bs)


def run(engine: Engine) -> Any:
    return capture_engine_loop(
        engine.capture, forward=(engine, "forward"), key=lambda bs: bs, settings=CaptureSettings(summarize=False)
    )


@needs_hooks
def test_with_torchs_hooks_every_capture_is_seen_through_them_and_nothing_of_torch_is_patched() -> None:
    before = registries()
    engine = Engine()
    result = run(engine)
    assert sorted(k.batch_size for k in result.keys) == [2, 4]
    assert observation_mode(real_graphs=False) == "hooks" and observation_mode(real_graphs=True) == "hooks"
    assert not any(seen["begin patched"] for seen in engine.seen)
    assert all(seen["hooks"] == {name: n + 1 for name, n in before.items()} for seen in engine.seen)
    assert registries() == before  # every hook of the gate removed


@needs_hooks
def test_torch_swallows_what_a_global_hook_raises() -> None:
    """The premise of keeping failures: torch's fan-out of global hooks drops every exception."""

    def boom(graph: Any) -> None:
        raise ValueError("boom")

    handle = torch.cuda.graphs.register_graph_capture_end_hook(boom)
    try:
        graph = EagerCUDAGraph()
        graph.capture_begin()
        graph.capture_end()  # nothing raised
    finally:
        handle.remove()


class Listener:
    def __init__(self, fail_at: str) -> None:
        self.fail_at, self.calls = fail_at, []

    def capture_begin(self, graph: Any) -> bool:
        self.calls.append("begin")
        if self.fail_at == "begin":
            raise KeyError("no such key")
        return True

    def capture_end(self, graph: Any) -> None:
        self.calls.append("end")
        if self.fail_at == "end":
            raise ValueError("boom")

    def graph_instantiated(self, graph: Any) -> None:
        self.calls.append("instantiate")


@needs_hooks
@pytest.mark.parametrize(("fail_at", "event"), [("begin", "capture start"), ("end", "capture end")])
def test_a_failure_inside_a_hook_is_kept_and_raised_when_the_capture_ends(fail_at: str, event: str) -> None:
    told: list[BaseException] = []
    listener = Listener(fail_at)
    with observe_captures(listener, real_graphs=False, on_failure=told.append) as observer:
        graph = EagerCUDAGraph()
        graph.capture_begin()
        graph.capture_end()  # torch's fan-out swallowed it
    assert observer.mode == "hooks" and listener.calls == ["begin", "end", "instantiate"]
    with pytest.raises(HookFailure, match=f"the gate's graph {event} hook failed: ") as info:
        observer.raise_kept()
    assert told == [info.value] and "\n" not in str(info.value)


@needs_hooks
def test_a_contract_violation_in_a_hook_fails_the_capture_with_its_own_line() -> None:
    """A graph that ran no forward is refused in the end hook; torch swallows it; the gate still fails with it."""
    with pytest.raises(CaptureContractError, match="Engine bs=2: capture: a graph after bs=4 ran no forward") as info:
        run(Engine(empty_graph_at=2))
    assert "caught" not in str(info.value)  # torch swallowed it; the engine never saw it
    assert all(n == 0 for n in _ours_left())


def _ours_left() -> list[int]:
    """Hooks of the gate left registered (their code is the observer's ``hook`` closure)."""
    graphs = torch.cuda.graphs
    left = []
    for name in ("_global_capture_start_hooks", "_global_capture_end_hooks", "_global_instantiate_hooks"):
        hooks = getattr(graphs, name, {}).values()
        left.append(sum(1 for h in hooks if getattr(h, "__module__", "") == capture_observer.__name__))
    return left


@needs_hooks
def test_another_consumers_hooks_still_fire_and_stay_registered() -> None:
    seen: list[str] = []
    handle = torch.cuda.graphs.register_graph_capture_start_hook(lambda graph: seen.append("start"))
    try:
        run(Engine())
        assert seen == ["start", "start"]
        assert handle.id in torch.cuda.graphs._global_capture_start_hooks
    finally:
        handle.remove()


@needs_hooks
def test_each_keys_graph_is_handed_to_the_readout_from_torchs_instantiate_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU the instantiate hook is where a key's graph is read (its template is live there)."""
    read: list[tuple[CaptureKey, Any]] = []

    class ReadingBackend(EagerBackend):
        def read_instantiated(self, key: CaptureKey, graph: Any) -> None:
            read.append((key, graph))

    monkeypatch.setattr(engine_loop, "make_backend", lambda device: ReadingBackend(device))
    result = run(Engine())
    assert [key.batch_size for key, _ in read] == [4, 2]
    assert all(result.keys[key].graph is graph for key, graph in read)


def test_the_patching_path_observes_the_loop_and_leaves_torch_cuda_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path of torch 2.8-2.14 (CI's 2.13 as it is; on a torch with the hooks, they are hidden from the probe)."""
    if HAS_HOOKS:
        monkeypatch.setattr(capture_observer, "graph_hooks", lambda torch: None)
    cuda_before = dict(vars(torch.cuda))
    graph_class_before = dict(vars(torch.cuda.CUDAGraph))
    hooks_before = registries()
    engine = Engine()
    result = run(engine)
    assert sorted(k.batch_size for k in result.keys) == [2, 4]
    assert all(seen["begin patched"] for seen in engine.seen)  # wrapped while the loop ran
    assert all(seen["hooks"] == hooks_before for seen in engine.seen)  # no hook registered
    assert observation_mode(real_graphs=False) == "patch"
    cuda_after = dict(vars(torch.cuda))
    assert all(cuda_after.get(name) is value for name, value in cuda_before.items())
    assert all(isinstance(cuda_after[name], type(torch)) for name in cuda_after.keys() - cuda_before.keys())
    assert dict(vars(torch.cuda.CUDAGraph)) == graph_class_before


@pytest.mark.parametrize("mode", ["hooks", "patch"])
def test_a_cupti_client_found_as_a_capture_begins_is_that_captures_failure(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a GPU the gate checks for another CUPTI client as each capture begins (an engine's torch.cuda.graph
    with the cupti annotation backend brings one up right before): kept on the hook path, raised on patching."""
    if mode == "hooks" and not HAS_HOOKS:
        pytest.skip(needs_hooks.kwargs["reason"])
    monkeypatch.setattr(torch.cuda, "CUDAGraph", EagerCUDAGraph)
    monkeypatch.setenv(INJECTION, "/opt/recorder.so")
    listener = Listener(fail_at="")
    with observe_captures(
        listener, real_graphs=False, before_begin=lambda: refuse_other_clients("Engine bs=4"), mode=mode
    ) as observer:
        graph = torch.cuda.CUDAGraph()
        if mode == "hooks":
            graph.capture_begin()  # torch swallowed the refusal
        else:
            with pytest.raises(CuptiConflictError):
                graph.capture_begin()
    assert listener.calls == []  # the listener never heard of a capture that was refused
    with pytest.raises(CuptiConflictError, match=f"Engine bs=4: another CUPTI client .*{INJECTION}=/opt/recorder.so"):
        observer.raise_kept()


@needs_hooks
def test_the_stand_in_fires_the_hooks_where_torchs_own_graph_class_does() -> None:
    """torch's CUDAGraph, read: start hooks in capture_begin, end hooks in capture_end before its
    instantiate() (keep_graph=False), instantiate hooks in instantiate; the stand-in follows that order."""
    import inspect

    graph_class = torch.cuda.graphs.CUDAGraph

    def body(name: str) -> str:
        return inspect.getsource(getattr(graph_class, name))

    assert "_run_global_hooks(_global_capture_start_hooks, self)" in body("capture_begin")
    end = body("capture_end")
    assert (
        end.index("self.capture_end_pre()") < end.index("_global_capture_end_hooks") < end.index("self.instantiate()")
    )
    assert "_run_global_hooks(_global_instantiate_hooks, self)" in body("instantiate")
    order: list[str] = []
    handles = [
        torch.cuda.graphs.register_graph_capture_start_hook(lambda g: order.append("start")),
        torch.cuda.graphs.register_graph_capture_end_hook(lambda g: order.append("end")),
        torch.cuda.graphs.register_graph_instantiate_hook(lambda g: order.append("instantiate")),
    ]
    try:
        kept = EagerCUDAGraph(keep_graph=True)
        kept.capture_begin()
        kept.capture_end()
        assert order == ["start", "end"]  # keep_graph=True: instantiated later, by replay() if not before
        kept.replay()
        assert order == ["start", "end", "instantiate"]
        order.clear()
        plain = EagerCUDAGraph()
        plain.capture_begin()
        plain.capture_end()
        assert order == ["start", "end", "instantiate"]
    finally:
        for handle in handles:
            handle.remove()


@needs_hooks
def test_an_engine_loops_summaries_take_the_kernels_read_from_the_instantiate_hook(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The readout path end to end on CPU: a backend reading each key's graph the way torch 2.15's
    get_graph_data() answers (payload shaped as torch builds it) gives the summaries their kernels."""
    from test_graph_data import two_branch_payload

    from pytest_graphcapture.engine.readout import graph_from_data

    class ReadingBackend(EagerBackend):
        def read_instantiated(self, key: CaptureKey, graph: Any) -> None:
            self.graph_readouts[key] = graph_from_data(two_branch_payload())
            self.readout_sources[key] = "graph-data"

    monkeypatch.setattr(engine_loop, "make_backend", lambda device: ReadingBackend(device))
    engine = Engine()
    result = capture_engine_loop(
        engine.capture, forward=(engine, "forward"), key=lambda bs: bs, settings=CaptureSettings(replay=False)
    )
    for key_result in result:
        summary = key_result.summary
        assert summary.kernel_source == "graph-data" and summary.topology["branches"] == 2
        assert sum(k["count"] for k in summary.kernels if k["kind"] == "kernel") == 3
