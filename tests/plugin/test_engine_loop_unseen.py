"""A forward the gate saw run but the profile holds nothing of: refused, never an empty golden marked complete.

torch's profiler records the ops of the thread it was started on: a capture loop run on
a worker thread would leave each key's profile empty, and a forward that skips its work
at the capture (a cached output) likewise.  Either is refused in one line naming the key
and what to do; no golden is written, so a changed forward can never pass against one.
"""

from __future__ import annotations

import pytest
from helpers import run

ENGINE = """
import concurrent.futures
import os
import threading

import torch

ARRANGEMENT = os.environ["ARRANGEMENT"]
WIDTH = int(os.environ.get("WIDTH", "4"))


class Engine:
    def __init__(self):
        self.device = torch.device("cpu")
        self.x, self.w = torch.ones(8, WIDTH), torch.ones(WIDTH, WIDTH)
        self.cache = {}

    def forward(self, bs):
        if ARRANGEMENT == "cached" and bs in self.cache:
            return self.cache[bs]  # the capture forward does no work: nothing for the profiler to see
        if ARRANGEMENT == "inner thread":  # the forward runs on this thread, its work on a worker thread
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                return pool.submit(self.body, bs).result()
        return self.body(bs)

    def body(self, bs):
        self.cache[bs] = out = torch.relu(torch.mm(self.x[:bs], self.w))
        return out

    def capture_one(self, bs, profiler):
        for _ in range(2):
            self.forward(bs)
            if profiler is not None:
                profiler.step()
        graph = torch.cuda.CUDAGraph()
        if ARRANGEMENT == "capture thread":  # only the capture forward runs on a worker thread
            def capture():
                with torch.cuda.graph(graph):
                    self.forward(bs)
            worker = threading.Thread(target=capture)
            worker.start()
            worker.join()
        else:
            with torch.cuda.graph(graph):
                self.forward(bs)
        if profiler is not None:
            profiler.step()

    def capture(self, profiler=None):
        for bs in (4, 2):
            self.capture_one(bs, profiler)


def run_loop(engine, profiler=None):
    if ARRANGEMENT in ("thread", "stepped thread"):  # the whole loop on a worker thread
        worker = threading.Thread(target=engine.capture, args=(profiler,))
        worker.start()
        worker.join()
    elif ARRANGEMENT == "pool":
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(engine.capture, profiler).result()
    else:
        engine.capture(profiler)


def test_engine(graph_capture, golden):
    engine = Engine()
    if ARRANGEMENT in ("stepped thread", "pool"):
        fn = lambda profiler: run_loop(engine, profiler)
    else:
        fn = lambda: run_loop(engine)
    golden.check(graph_capture.engine(fn, forward=(engine, "forward"), key=lambda bs: bs))
"""


def _goldens(pytester: pytest.Pytester) -> list[str]:
    return sorted(p.name for p in (pytester.path / "goldens").rglob("*.json"))


@pytest.mark.parametrize("arrangement", ["thread", "stepped thread", "pool", "capture thread"])
def test_a_capture_on_a_worker_thread_is_refused_in_one_line_and_writes_no_golden(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, arrangement: str
) -> None:
    pytester.makepyfile(test_engine=ENGINE)
    monkeypatch.setenv("ARRANGEMENT", arrangement)
    result = run(pytester, "--update-golden", "--golden-dir=goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*graph_capture.engine: Engine bs=4: * ran on thread *, not on the thread that called "
            "graph_capture.engine (MainThread): torch's profiler records only the ops of the thread it was "
            "started on*; run the engine's capture loop on the calling thread*"
        ]
    )
    assert _goldens(pytester) == []


@pytest.mark.parametrize("arrangement", ["cached", "inner thread"])
def test_a_capture_forward_the_profile_holds_nothing_of_is_refused_and_writes_no_golden(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, arrangement: str
) -> None:
    pytester.makepyfile(test_engine=ENGINE)
    monkeypatch.setenv("ARRANGEMENT", arrangement)
    result = run(pytester, "--update-golden", "--golden-dir=goldens")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*graph_capture.engine: Engine bs=4: capture: the profile holds nothing of the capture forward*"]
    )
    assert _goldens(pytester) == []


def test_goldens_of_the_calling_thread_gate_a_changed_forward(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_engine=ENGINE)
    monkeypatch.setenv("ARRANGEMENT", "plain")
    run(pytester, "--update-golden", "--golden-dir=goldens").assert_outcomes(passed=1)
    assert _goldens(pytester) == ["Engine_bs_2.json", "Engine_bs_4.json"]
    monkeypatch.setenv("WIDTH", "6")  # a changed forward: other shapes
    run(pytester, "--golden-dir=goldens").assert_outcomes(failed=1)
    for arrangement in (
        "thread",
        "cached",
        "inner thread",
    ):  # the same change on a capture the profile cannot see: never a pass
        monkeypatch.setenv("ARRANGEMENT", arrangement)
        run(pytester, "--golden-dir=goldens").assert_outcomes(failed=1)
