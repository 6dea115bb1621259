"""``graph_capture.engine`` on an engine whose forward captures its graphs inside itself (pieces), on CPU stand-ins."""

from __future__ import annotations

import pytest
from helpers import run

from pytest_graphcapture.golden import store

#: A piecewise engine written the way vLLM's PIECEWISE mode runs: per key, the forward's pieces are
#: captured as graphs, the attention between them run eagerly.  PIECES / HIDDEN / SIZES / MERGE vary it.
ENGINE = """
import os

import torch

PIECES = int(os.environ.get("PIECES", "3"))
HIDDEN = int(os.environ.get("HIDDEN", "4"))
SIZES = tuple(int(s) for s in os.environ.get("SIZES", "4,2,1").split(","))
MERGE = os.environ.get("MERGE") == "1"
ORIGINAL = (torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.CUDAGraph.capture_begin, torch.cuda.synchronize)


class PiecewiseEngine:
    def __init__(self, mistake=None):
        self.mistake = mistake
        self.device = torch.device("cpu")
        self.x = torch.ones(8, HIDDEN)
        self.w = [torch.ones(HIDDEN, HIDDEN) for _ in range(PIECES)]
        self.capturing = False
        self.graphs = {}

    def piece(self, i, x):
        y = torch.mm(x, self.w[i])
        return torch.relu(y) if i % 2 else torch.tanh(y)

    def attention(self, x):  # run eagerly between the pieces
        return torch.softmax(x, dim=-1)

    def forward(self, bs):
        x = self.x[:bs]
        groups = [[0, 1]] + [[i] for i in range(2, PIECES)] if MERGE else [[i] for i in range(PIECES)]
        for n, group in enumerate(groups):
            if self.capturing and self.mistake == "left open" and n == 1:
                torch.cuda.CUDAGraph().capture_begin()  # never ended
            elif self.capturing:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    for i in group:
                        x = self.piece(i, x)
                    if self.mistake == "raises" and bs == 2 and n == 1:
                        raise RuntimeError("the piece ran out of workspace")
                self.graphs.setdefault(bs, []).append(graph)
            else:
                for i in group:
                    x = self.piece(i, x)
            if n < len(groups) - 1:
                x = self.attention(x)
        return x

    def capture(self):
        for bs in SIZES:
            for _ in range(2):
                self.forward(bs)
            self.capturing = self.mistake != "no pieces"
            self.forward(bs)
            self.capturing = False
"""

GATE = (
    ENGINE
    + """

RESTORED = []


def test_pieces(graph_capture, golden):
    engine = PiecewiseEngine()
    try:
        result = graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs: bs)
    finally:
        now = (torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.CUDAGraph.capture_begin, torch.cuda.synchronize)
        RESTORED.append(now == ORIGINAL and "forward" not in vars(engine))
    assert [k.batch_size for k in result.keys] == list(SIZES)
    golden.check(result)


def test_zz_torch_cuda_is_unpatched():
    assert RESTORED == [True]
"""
)


def _golden(pytester: pytest.Pytester, bs: int) -> dict:
    """The golden of ``bs`` as read back: each graph with its own entries (the file lists each entry once)."""
    (path,) = (pytester.path / "goldens").rglob(f"PiecewiseEngine_bs_{bs}.json")
    return store.read_golden(path).to_dict()


@pytest.mark.parametrize(
    ("pieces", "hidden", "sizes"),
    [("3", "4", "4,2,1"), ("2", "6", "8,3"), ("5", "3", "2")],  # the named engine, then held-out shapes
)
def test_a_piecewise_engine_records_its_pieces_and_fails_when_two_merge(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pieces: str, hidden: str, sizes: str
) -> None:
    monkeypatch.setenv("PIECES", pieces)
    monkeypatch.setenv("HIDDEN", hidden)
    monkeypatch.setenv("SIZES", sizes)
    pytester.makepyfile(test_pieces=GATE)
    run(pytester, "--update-golden", "--golden-dir=goldens", "-p", "no:randomly").assert_outcomes(passed=2)
    n = int(pieces)
    for bs in map(int, sizes.split(",")):
        stored = _golden(pytester, bs)
        assert len(stored["graphs"]) == n
        names = [[op["name"] for op in g["ops"]] for g in stored["graphs"]]
        # Each piece is its own graph, in capture order; the eager attention between them is no graph's.
        assert [("aten::relu" if i % 2 else "aten::tanh") in got for i, got in enumerate(names)] == [True] * n
        assert not any("aten::softmax" in got for got in names)
        assert "aten::softmax" not in [op["name"] for op in stored["ops"]]
    run(pytester, "--golden-dir=goldens", "-p", "no:randomly").assert_outcomes(passed=2)
    # Replayed (as on a GPU), each piece is replayed and read on its own: the key keeps its graphs.
    run(pytester, "--golden-dir=goldens", "--graph-capture-replay=on", "-p", "no:randomly").assert_outcomes(passed=2)
    monkeypatch.setenv("MERGE", "1")
    result = run(pytester, "--golden-dir=goldens", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    first = sizes.split(",")[0]
    graphs = "1 graph" if n == 2 else f"{n - 1} graphs"
    result.stdout.fnmatch_lines([f"bs={first}: {graphs}, goldens have {n} (goldens/*PiecewiseEngine_bs_{first}.json)"])


MISTAKES = (
    ENGINE
    + """


import pytest


@pytest.mark.parametrize("mistake", ["no pieces", "left open", "raises"])
def test_mistake(graph_capture, mistake):
    engine = PiecewiseEngine(mistake)
    graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs: bs)


def test_zz_torch_cuda_is_unpatched():
    now = (torch.cuda.CUDAGraph, torch.cuda.graph, torch.cuda.CUDAGraph.capture_begin, torch.cuda.synchronize)
    assert now == ORIGINAL
"""
)


def test_a_capture_forward_without_graphs_or_with_a_failed_piece_is_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_mistakes=MISTAKES)
    result = run(pytester, "-p", "no:randomly")
    result.assert_outcomes(failed=3, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*CaptureContractError: graph_capture.engine: PiecewiseEngine bs=4: capture: expected the start of the "
            "graph capture, but the loop ran a forward; *a graph around the forward, or graphs begun inside it*",
            "*CaptureContractError: graph_capture.engine: PiecewiseEngine bs=4: capture: the forward returned while "
            "a graph begun inside it was still capturing*",
            "*CaptureError: capturing PiecewiseEngine[[]bs=2, rank=0[]] failed during capture: RuntimeError: the "
            "piece ran out of workspace*",
        ]
    )
    assert "internal error" not in result.stdout.str()
