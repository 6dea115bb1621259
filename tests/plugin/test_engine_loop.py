"""``graph_capture.engine(fn, forward=..., key=...)``: an engine's own capture loop under the gate (CPU stand-ins)."""

from __future__ import annotations

import pytest
from helpers import run

#: A capture loop written the way serving engines write theirs, with no adapter; ``mistake`` breaks it.
ENGINE = '''
import enum

import pytest
import torch


class Mode(enum.Enum):
    DECODE = 1
    DRAFT = 2


def library_op(x):
    """A library inside the forward that captures its own small graph (not one of the engine's keys)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = x * 2
    return y


class Engine:
    def __init__(self, mistake=None, modes=(None,), hidden=4, sizes=(4, 2, 1)):
        self.mistake, self.modes, self.sizes = mistake, modes, sizes
        self.out = torch.zeros(8, hidden)
        self.w = torch.ones(hidden, hidden)
        self.graphs = {}
        self.device = torch.device("cpu")

    def forward(self, bs, mode=None):
        y = torch.mm(self.out[:bs], self.w)
        if mode is Mode.DRAFT:
            y = torch.relu(y)
        if self.mistake == "library graph":
            y = library_op(y)
        self.out[:bs].copy_(y)

    def capture(self, profiler=None):
        sizes = sorted(self.sizes) if self.mistake == "smallest first" else sorted(self.sizes, reverse=True)
        pool, stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
        for bs in sizes:
            for mode in self.modes:
                for _ in range(2):
                    torch.cuda.synchronize()
                    with torch.cuda.stream(stream):
                        self.forward(bs, mode)
                    if self.mistake == "raises" and bs == 2:
                        raise RuntimeError("the attention backend ran out of workspace")
                    if profiler is not None and self.mistake != "never steps":
                        profiler.step()
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    if self.mistake != "empty graph" or bs != 2:
                        self.forward(bs, mode)
                    if self.mistake == "step inside":
                        profiler.step()
                if profiler is not None and self.mistake != "step inside":
                    profiler.step()
                self.graphs[(bs, mode)] = graph
'''

GATE = (
    ENGINE
    + """

ORIGINAL = (torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.CUDAGraph.capture_begin, torch.cuda.synchronize)
RESTORED = []


def gate(graph_capture, engine, fn):
    try:
        return graph_capture.engine(
            fn, forward=(engine, "forward"), key=lambda bs, mode=None: (bs, mode), runner_name="Engine"
        )
    finally:
        now = (torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.CUDAGraph.capture_begin, torch.cuda.synchronize)
        RESTORED.append(now == ORIGINAL and "forward" not in vars(engine))


@pytest.mark.parametrize("mistake", [None, "never steps", "step inside", "smallest first", "raises", "empty graph"])
def test_gate(graph_capture, golden, mistake):
    engine = Engine(mistake)
    golden.check(gate(graph_capture, engine, engine.capture))


def test_zz_every_patch_was_restored():
    assert len(RESTORED) == 6 and all(RESTORED)
"""
)


def _goldens(pytester: pytest.Pytester) -> list[str]:
    return sorted(p.name for p in (pytester.path / "goldens").rglob("*.json"))


def test_a_contract_violation_or_a_raising_loop_fails_naming_key_and_stage_and_writes_no_golden(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_gate=GATE)
    result = run(pytester, "--update-golden", "--golden-dir=goldens", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=5)
    result.stdout.fnmatch_lines(
        [
            "*CaptureContractError: graph_capture.engine: Engine bs=4: profiler step after warmup 1: expected a "
            "profiler step, but the loop ran a forward; per key the loop must run 2 warmup forwards*",
            "*CaptureContractError: graph_capture.engine: Engine bs=4: capture: the profiler was stepped inside the "
            "graph*",
            "*CaptureContractError: graph_capture.engine: Engine bs=2: warmup 1: captured after bs=1; keys must be "
            "captured largest batch size first*",
            "*CaptureError: capturing Engine[[]bs=2, rank=0[]] failed during warmup 1: RuntimeError: the attention "
            "backend ran out of workspace*",
            "*CaptureContractError: graph_capture.engine: Engine bs=2: capture: a graph after bs=4 ran no forward of "
            "the method given as forward=, so its key cannot be told*",
        ]
    )
    assert "internal error" not in result.stdout.str()
    # Only the loop that kept the contract wrote goldens; no failing loop left a golden (or a partial one).
    assert _goldens(pytester) == ["Engine_bs_1.json", "Engine_bs_2.json", "Engine_bs_4.json"]
    assert [p.name for p in (pytester.path / "goldens" / "cpu" / "test_gate.py").iterdir()] == [
        "test_gate_None-02978498"
    ]


CHANGE = (
    ENGINE
    + """

import os


def test_engine_graphs(graph_capture, golden):
    engine = Engine(hidden=int(os.environ.get("HIDDEN", "4")), modes=(Mode.DECODE, Mode.DRAFT))
    result = graph_capture.engine(
        lambda profiler: engine.capture(profiler=profiler), forward=(engine, "forward"),
        key=lambda bs, mode: (bs, mode), runner_name="Engine",
    )
    assert [(k.batch_size, k.variant) for k in result.keys] == [
        (bs, mode) for bs in (4, 2, 1) for mode in (Mode.DECODE, Mode.DRAFT)
    ]
    golden.check(result)
"""
)


def test_an_engine_loop_with_enum_variants_creates_passes_and_fails_on_a_shape_change(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_change=CHANGE)
    run(pytester, "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
    assert "Engine_bs_4_DRAFT.json" in _goldens(pytester) and len(_goldens(pytester)) == 6
    run(pytester, "--golden-dir=goldens").assert_outcomes(passed=1)
    monkeypatch.setenv("HIDDEN", "6")
    result = run(pytester, "--golden-dir=goldens")
    result.assert_outcomes(failed=1)
    # a width shared by most lines leads, naming the ops (the GEMM first); the diff file keeps each line
    result.stdout.fnmatch_lines(["*variant=DRAFT bs=1,2,4 differ*", "*shape changed: 4 → 6 in * ops (*mm*; below:*"])


SAME = (
    ENGINE
    + """

from pytest_graphcapture import CaptureKey, GraphRunner


class Adapter(GraphRunner):
    runner_name = "Engine"

    def __init__(self, engine):
        self.engine, self.device = engine, engine.device

    def batch_sizes(self):
        return self.engine.sizes

    def variants(self):
        return self.engine.modes

    def forward_for(self, key):
        return lambda: self.engine.forward(key.batch_size, key.variant)


def summaries(result):
    return {key: kr.summary.to_dict() for key, kr in result.keys.items()}


def test_every_way_gives_the_same_summaries(graph_capture):
    modes = (Mode.DECODE, Mode.DRAFT)
    adapter = summaries(graph_capture(Adapter(Engine(modes=modes))))
    stepping = Engine(modes=modes)
    engine_steps = graph_capture.engine(
        stepping.capture, forward=(stepping, "forward"), key=lambda bs, mode: (bs, mode), runner_name="Engine"
    )
    silent = Engine(modes=modes)
    plugin_steps = graph_capture.engine(
        lambda: silent.capture(), forward=(silent, "forward"), key=lambda bs, mode: (bs, mode), runner_name="Engine"
    )
    assert list(adapter) == [CaptureKey("Engine", bs, m) for bs in (4, 2, 1) for m in modes]
    assert summaries(engine_steps) == adapter
    assert summaries(plugin_steps) == adapter
    # The stand-in graphs replay the captured forward, as the engine's decode would.
    stepping.out.zero_()
    stepping.out[:4] = 1.0
    engine_steps.keys[CaptureKey("Engine", 4, Mode.DECODE)].graph.replay()
    assert stepping.out[0, 0].item() == 4.0


def test_a_library_graph_inside_the_forward_is_not_a_key(graph_capture):
    engine = Engine("library graph")
    result = graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs, mode: bs)
    assert [(k.runner, k.batch_size) for k in result.keys] == [("Engine", 4), ("Engine", 2), ("Engine", 1)]
    ops = [op["name"] for op in result.keys[CaptureKey("Engine", 2)].summary.to_dict()["ops"]]
    assert "aten::mul" in ops  # the library's work is part of the engine's graph, as on a GPU
"""
)


def test_adapter_engine_stepped_and_plugin_stepped_captures_agree_key_for_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_same=SAME)
    run(pytester).assert_outcomes(passed=2)


SIZES = (
    ENGINE
    + """

def test_sizes(graph_capture):
    engine = Engine()
    result = graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs, mode: bs)
    print("captured:", [k.batch_size for k in result.keys])
"""
)


def test_the_batch_size_option_cuts_an_engine_loop_and_names_a_size_it_does_not_capture(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_sizes=SIZES)
    run(pytester, "-s", "--graph-capture-batch-sizes=2,4").stdout.fnmatch_lines(["*captured: [[]4, 2[]]"])
    result = run(pytester, "--graph-capture-batch-sizes=3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*UsageError: --graph-capture-batch-sizes asks for batch size 3, which the capture loop of Engine did not "
            "capture (it captured 1, 2, 4)"
        ]
    )


MISUSE = (
    ENGINE
    + """

ORIGINAL = (torch.cuda.CUDAGraph, torch.cuda.CUDAGraph.capture_begin, torch.cuda.synchronize)
ENGINES = []


def test_bad_key(graph_capture):
    engine = Engine()
    ENGINES.append(engine)
    graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs, mode: "four")


def test_bad_forward(graph_capture):
    engine = Engine()
    graph_capture.engine(engine.capture, forward=(engine, "forward_decode"), key=lambda bs, mode: bs)


def test_zz_nothing_left_patched():
    assert (torch.cuda.CUDAGraph, torch.cuda.CUDAGraph.capture_begin, torch.cuda.synchronize) == ORIGINAL
    assert "forward" not in vars(ENGINES[0])
"""
)


def test_a_key_function_or_forward_that_does_not_fit_is_one_line_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_misuse=MISUSE)
    result = run(pytester, "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "UsageError: graph_capture.engine: key= could not tell the key of a call Engine.forward(int, NoneType): "
            "ValueError: invalid literal for int() with base 10: 'four'; it must return a CaptureKey, a batch size "
            "or (batch size, variant)",
            "UsageError: graph_capture.engine: forward=: Engine has no method 'forward_decode'",
        ]
    )
