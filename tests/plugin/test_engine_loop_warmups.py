"""``graph_capture.engine(..., warmups=n)``: loops that warm each key up once (vLLM, reduce-overhead) or thrice.

The profiler waits ``warmups`` steps per key, so the one step it records is still each
key's capture: an engine doing the same work writes the same goldens whatever its warmup
count, and what only the warmups run never reaches a golden.
"""

from __future__ import annotations

import pytest
from helpers import run

GATE = """
import os

import torch

WARMUPS = int(os.environ["WARMUPS"])
GATE_WARMUPS = int(os.environ.get("GATE_WARMUPS", WARMUPS))
STEPS = os.environ["STEPS"]  # "engine": fn(profiler) steps it; "plugin": fn() is stepped for


class Engine:
    def __init__(self):
        self.device = torch.device("cpu")
        self.x = torch.ones(8, 4)
        self.w = torch.ones(4, 4)
        self.warming = False

    def forward(self, bs):
        if self.warming:
            torch.sigmoid(self.x)  # lazy set-up only the warmups run: never in a golden
        return torch.relu(torch.mm(self.x[:bs], self.w))

    def capture(self, profiler=None):
        for bs in (4, 2):
            self.warming = True
            for _ in range(WARMUPS):
                self.forward(bs)
                if profiler is not None:
                    profiler.step()
            self.warming = False
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                self.forward(bs)
            if profiler is not None:
                profiler.step()


def test_engine(graph_capture, golden):
    engine = Engine()
    fn = (lambda profiler: engine.capture(profiler)) if STEPS == "engine" else (lambda: engine.capture())
    result = graph_capture.engine(fn, forward=(engine, "forward"), key=lambda bs: bs, warmups=GATE_WARMUPS)
    golden.check(result)
"""


def _goldens(pytester: pytest.Pytester) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((pytester.path / "goldens").rglob("Engine_bs_*.json"))}


def test_the_recorded_step_is_the_capture_whatever_the_warmup_count(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_engine=GATE)
    monkeypatch.setenv("WARMUPS", "2")
    monkeypatch.setenv("STEPS", "engine")
    run(pytester, "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
    written = _goldens(pytester)
    assert sorted(written) == ["Engine_bs_2.json", "Engine_bs_4.json"]
    assert all(b"aten::relu" in text and b"aten::sigmoid" not in text for text in written.values())
    for warmups, steps in (("1", "engine"), ("3", "plugin"), ("1", "plugin")):
        monkeypatch.setenv("WARMUPS", warmups)
        monkeypatch.setenv("STEPS", steps)
        run(pytester, "--golden-dir=goldens").assert_outcomes(passed=1)  # checked against the 2-warmup goldens
        run(pytester, "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
        assert _goldens(pytester) == written, (warmups, steps)  # byte for byte


@pytest.mark.parametrize(("engine", "gate", "line"), [("2", "1", "1 warmup forward, followed by"), ("1", "3", "3")])
def test_a_loop_warming_up_more_or_less_than_warmups_says_is_one_line(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, engine: str, gate: str, line: str
) -> None:
    pytester.makepyfile(test_engine=GATE)
    monkeypatch.setenv("WARMUPS", engine)
    monkeypatch.setenv("GATE_WARMUPS", gate)
    monkeypatch.setenv("STEPS", "engine")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    if engine > gate:  # the forward the gate took for the capture ran outside any graph
        stage = f"capture: expected the start of the graph capture, but the loop ran a forward; per key the loop must run {line}"
    else:  # the graph came while the gate still counted warmups
        stage = "warmup 2: expected a forward, but the loop ran the start of the graph capture; per key the loop must run 3 warmup forwards"
    result.stdout.fnmatch_lines([f"*CaptureContractError: graph_capture.engine: Engine bs=4: {stage}*"])


@pytest.mark.parametrize("bad", ["-1", "'2'", "True"])
def test_warmups_that_is_not_a_count_is_refused_naming_it(pytester: pytest.Pytester, bad: str) -> None:
    pytester.makepyfile(
        test_engine=f"""
def test_engine(graph_capture):
    graph_capture.engine(lambda: None, forward=(object(), "__str__"), key=lambda bs: bs, warmups={bad})
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*graph_capture.engine: warmups= must be the number of warmup forwards*got *"])


#: A CPU stand-in of a torch.compile(mode="reduce-overhead") model as inductor's cudagraph trees run it: the
#: first call of a size warms it up (the very first also captures the tree's empty priming graph), the second
#: records its graph inside the call, later calls replay it.
RECORDS_ON_SECOND_CALL = """
import os

import torch

GATE_WARMUPS = int(os.environ["GATE_WARMUPS"])


class CompiledModel:
    def __init__(self):
        self.device = torch.device("cpu")
        self.x, self.w = torch.ones(8, 4), torch.ones(4, 4)
        self.calls, self.graphs, self.primed = {}, {}, False

    def body(self, bs):
        return torch.relu(torch.mm(self.x[:bs], self.w))

    def forward(self, bs):
        n = self.calls[bs] = self.calls.get(bs, 0) + 1
        if not self.primed:
            self.primed = True
            with torch.cuda.graph(torch.cuda.CUDAGraph()):
                pass
        if n == 1:
            return self.body(bs)
        if n == 2:
            self.graphs[bs] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graphs[bs]):
                out = self.body(bs)
            return out
        self.graphs[bs].replay()


def test_compiled(graph_capture, golden):
    model = CompiledModel()

    def capture(profiler):  # a loop of the shape vLLM's runs: per size its warmups, then the capture call
        for bs in (4, 2):
            for _ in range(GATE_WARMUPS if GATE_WARMUPS < 2 else 2):
                model.forward(bs)
                profiler.step()
            model.forward(bs)
            profiler.step()

    result = graph_capture.engine(capture, forward=(model, "forward"), key=lambda bs: bs, warmups=GATE_WARMUPS)
    assert [r.graph for r in result] == [(model.graphs[4],), (model.graphs[2],)]  # the recorded graphs, not the priming one
    golden.check(result)
"""


def test_a_loop_recording_a_warmup_early_is_told_the_warmups_to_pass(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_compiled=RECORDS_ON_SECOND_CALL)
    monkeypatch.setenv("GATE_WARMUPS", "2")  # two warmups: the second call recorded, the capture call replays
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*CaptureContractError: graph_capture.engine: CompiledModel bs=4: capture: the capture forward ran with no "
            "graph around it and began none inside it, but the forward of warmup 2 began one: this loop records its "
            "graph after 1 warmup forward, not 2; pass warmups=1 to graph_capture.engine*"
        ]
    )
    monkeypatch.setenv("GATE_WARMUPS", "1")  # the priming graph in warmup 1 is the library's; the record is the key's
    run(pytester, "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
    stored = [p.read_text() for p in sorted((pytester.path / "goldens").rglob("CompiledModel_bs_*.json"))]
    assert len(stored) == 2 and all('"aten::relu"' in text for text in stored)
    run(pytester, "--golden-dir=goldens").assert_outcomes(passed=1)


@pytest.mark.parametrize("absurd", ["1001", "10**9", "2**63"])
def test_an_absurd_warmup_count_is_refused_in_one_line_naming_the_option_and_the_bound(
    pytester: pytest.Pytester, absurd: str
) -> None:
    pytester.makepyfile(
        test_engine=f"""
def test_engine(graph_capture):
    graph_capture.engine(lambda: None, forward=(object(), "__str__"), key=lambda bs: bs, warmups={absurd})
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["UsageError: graph_capture.engine: warmups= must be the number of warmup forwards * from 0 to 1000*got *"]
    )


def test_a_loop_of_many_warmups_writes_the_goldens_of_two(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_engine=GATE)
    monkeypatch.setenv("STEPS", "plugin")
    monkeypatch.setenv("WARMUPS", "2")
    run(pytester, "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
    written = _goldens(pytester)
    monkeypatch.setenv("WARMUPS", "1000")  # the most warmups= accepts
    run(pytester, "--golden-dir=goldens").assert_outcomes(passed=1)
    run(pytester, "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
    assert _goldens(pytester) == written
