"""How ``graph_capture.engine`` fails: every failure the gate sees fails the test, once, in words that name the cause.

An engine's capture loop may catch exceptions per size, capture a graph inside another,
raise inside a graph, or hold names bound before the gate's CPU stand-ins: each of these
fails the test with one line naming the key and what happened, writes no golden and
leaves no trace of the failed key.
"""

from __future__ import annotations

import pytest
from helpers import run

#: An engine whose loop catches the failure of each size and goes on, as some engines log and skip a size.
FORGIVING = """
import pytest
import torch
from torch.cuda import CUDAGraph as BoundGraph


class Engine:
    def __init__(self, mistake, sizes=(16, 8, 4)):
        self.mistake, self.sizes = mistake, sizes
        self.out = torch.zeros(16, 4)
        self.w = torch.ones(4, 4)
        self.device = torch.device("cpu")
        self.skipped = []

    def forward(self, bs):
        if self.mistake == "forward raises" and bs == 16:
            raise RuntimeError("the attention backend ran out of workspace")
        self.out[:bs].copy_(torch.mm(self.out[:bs], self.w))

    def key(self, bs):
        if self.mistake == "key raises" and bs == 16:
            raise ValueError("no key for 16")
        return bs

    def capture_one(self, bs, profiler):
        for _ in range(3 if self.mistake == "three warmups" and bs == 16 else 2):
            self.forward(bs)
            profiler.step()
        graph = BoundGraph() if self.mistake == "bound graph" and bs == 16 else torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.forward(bs)
            if self.mistake == "step inside" and bs == 16:
                profiler.step()
        profiler.step()

    def capture(self, profiler):
        sizes = (8, 16, 4) if self.mistake == "out of order" else self.sizes
        for bs in sizes:
            try:
                self.capture_one(bs, profiler)
            except Exception as exc:  # the engine logs the size and goes on without its graph
                self.skipped.append((bs, str(exc)))


MISTAKES = ["out of order", "key raises", "forward raises", "step inside", "three warmups", "bound graph"]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_gate(graph_capture, golden, mistake):
    engine = Engine(mistake)
    golden.check(graph_capture.engine(engine.capture, forward=(engine, "forward"), key=engine.key, runner_name="E"))
"""


def test_a_failure_the_engine_catches_still_fails_the_test_and_writes_no_golden(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_forgiving=FORGIVING)
    result = run(pytester, "--update-golden", "--golden-dir=goldens", "--graph-capture-trace=per-bs")
    result.assert_outcomes(failed=6)
    caught = "(the capture function caught this error and carried on; a failure the gate saw fails the capture*"
    result.stdout.fnmatch_lines_random(
        [
            f"CaptureContractError: graph_capture.engine: E bs=16: warmup 1: captured after bs=8; keys must be "
            f"captured largest batch size first*{caught}",
            f"UsageError: graph_capture.engine: key= could not tell the key of a call Engine.forward(int): "
            f"ValueError: no key for 16*{caught}",
            f"CaptureError: capturing E[[]bs=16, rank=0[]] failed during warmup 1: RuntimeError: the attention "
            f"backend ran out of workspace {caught}",
            f"CaptureContractError: graph_capture.engine: E bs=16: capture: the profiler was stepped inside the "
            f"graph*{caught}",
            f"CaptureContractError: graph_capture.engine: E bs=16: capture: expected the start of the graph "
            f"capture, but the loop ran a forward*{caught}",
            f"UsageError: graph_capture.engine: E bs=16: the engine made a torch.cuda.CUDAGraph from a name bound "
            f"before the gate put its CPU stand-ins in place*{caught}",
        ]
    )
    assert "internal error" not in result.stdout.str()
    assert not (pytester.path / "goldens").exists() or not list((pytester.path / "goldens").rglob("*.json"))


#: Engines that go wrong inside a graph; ``fn()`` engines take no profiler (the plugin steps it).
INSIDE = """
import pytest
import torch
from torch.cuda import CUDAGraph as BoundGraph
from torch.cuda import Event as BoundEvent


class Engine:
    def __init__(self, mistake):
        self.mistake = mistake
        self.out = torch.zeros(8, 4)
        self.device = torch.device("cpu")

    def forward(self, bs):
        if self.mistake == "raises in the graph" and bs == 2 and getattr(self, "capturing", False):
            raise RuntimeError("illegal memory access in the captured forward")
        self.out[:bs].add_(1.0)

    def __call__(self, bs):
        return self.forward(bs)

    def capture(self):
        for bs in (4, 2, 1):
            timer = torch.cuda.Event(enable_timing=True) if self.mistake == "timed" else None
            if timer is not None:
                timer.record()
            for _ in range(2):
                self.forward(bs)
            if self.mistake == "bound graph":
                graph = BoundGraph()
            elif self.mistake == "bound event":
                BoundEvent(enable_timing=True)
                graph = torch.cuda.CUDAGraph()
            else:
                graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                if self.mistake == "nested" and bs == 2:
                    inner = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(inner):
                        self.forward(bs)
                self.capturing = True
                try:
                    self(bs) if self.mistake == "dunder" else self.forward(bs)
                finally:
                    self.capturing = False
            if timer is not None:
                timer.synchronize()


@pytest.mark.parametrize("mistake", ["nested", "raises in the graph", "bound graph", "bound event", "dunder"])
def test_gate(graph_capture, golden, mistake):
    engine = Engine(mistake)
    forward = (engine, "__call__") if mistake == "dunder" else (engine, "forward")
    golden.check(graph_capture.engine(engine.capture, forward=forward, key=lambda bs: bs, runner_name="E"))


def test_events_through_torch_cuda_work_off_cuda(graph_capture):
    engine = Engine("timed")
    result = graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs: bs, runner_name="E")
    assert [k.batch_size for k in result.keys] == [4, 2, 1]
"""


def test_failures_inside_a_graph_and_names_bound_too_early_say_what_happened(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_inside=INSIDE)
    result = run(pytester, "--golden-dir=goldens", "--update-golden", "--graph-capture-trace=per-bs")
    result.assert_outcomes(failed=5, passed=1)
    placeholder = (
        "UsageError: graph_capture.engine: E bs=4: the engine made a torch.cuda.{0} from a name bound before the "
        "gate put its CPU stand-ins in place (as `from torch.cuda import {0}` at import does), so it got torch's "
        "CPU placeholder; look it up as torch.cuda.{0} where it is called (docs/adapting.md*"
    )
    result.stdout.fnmatch_lines_random(
        [
            "CaptureContractError: graph_capture.engine: E bs=2: capture: a graph was begun inside another graph "
            "(before that graph's capture ended); capture one graph at a time",
            "CaptureError: capturing E[[]bs=2, rank=0[]] failed during capture: RuntimeError: illegal memory access "
            "in the captured forward",
            placeholder.format("CUDAGraph"),
            placeholder.format("Event"),
            "UsageError: graph_capture.engine: forward=(Engine, '__call__') cannot be observed: Python looks special "
            "methods such as __call__ up on the class, never on the object; name the method __call__ runs*",
        ]
    )
    out = result.stdout.str()
    assert "ran no forward" not in out and "trace export" not in out and "dummy base class" not in out
    # The key that failed inside its graph left no trace; the key captured before it kept its own.
    traces = sorted(p.name for p in pytester.path.rglob("*.json.gz") if "raises_in_the_graph" in str(p))
    assert traces and not [name for name in traces if "_bs_2" in name]
    assert [name for name in traces if "_bs_4" in name]
    assert not list((pytester.path / "goldens").rglob("*.json")) if (pytester.path / "goldens").exists() else True


ELSEWHERE = """
import pytest
import torch


class Engine:
    def __init__(self):
        self.out = torch.zeros(4, 4)
        self.device = torch.device("cpu")

    def forward(self, bs):
        self.out[:bs].add_(1.0)

    def capture(self, profiler):
        for bs in (2, 1):
            for _ in range(2):
                self.forward(bs)
                profiler.step()
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                self.forward(bs)
            profiler.step()


def gate(graph_capture):
    engine = Engine()
    return graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs: bs)


@pytest.mark.graph_capture_ranks(2)
def test_on_ranks(graph_capture):
    gate(graph_capture)


@pytest.mark.graph_capture_isolated
def test_isolated(graph_capture):
    gate(graph_capture)


def test_plain(graph_capture):
    assert [k.batch_size for k in gate(graph_capture).keys] == [2, 1]
"""


def test_an_engine_loop_asked_to_capture_isolated_or_on_ranks_is_refused_naming_the_setting(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_elsewhere=ELSEWHERE)
    result = run(pytester)
    result.assert_outcomes(passed=1, failed=2)
    refused = (
        "*{0}: graph_capture.engine cannot capture {1}: it runs the engine's loop in the test process (the "
        "function, the engine and the key function cannot be sent to another process)*"
    )
    result.stdout.fnmatch_lines_random(
        [
            refused.format("@pytest.mark.graph_capture_ranks", "on spawned ranks"),
            refused.format("@pytest.mark.graph_capture_isolated", "in a fresh subprocess"),
        ]
    )
    for option in ("--graph-capture-isolate=on", "--graph-capture-isolate"):
        result = run(pytester, option, "-k", "plain")
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines([refused.format("--graph-capture-isolate=on", "in a fresh subprocess")])
    result = run(pytester, "-k", "plain", "-o", "graph_capture_isolate=on")
    result.stdout.fnmatch_lines([refused.format("ini key graph_capture_isolate=on", "in a fresh subprocess")])
    assert "Traceback" not in result.stdout.str()
