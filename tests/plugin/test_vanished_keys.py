"""A batch size that stops being captured fails its test, by the runner and by the engine loop; a narrowed run says what it left.

The goldens of a test's check are what its run should capture: a golden whose key the
run did not capture (the size now runs eager) is a regression, not an unused file.
"""

from __future__ import annotations

import pytest
from helpers import run

RUNNER = """
import os
from pytest_graphcapture.engine.decode_model import TinyDecodeRunner


def test_decode(graph_capture, golden):
    sizes = [int(s) for s in os.environ["SIZES"].split(",")]
    golden.check(graph_capture(TinyDecodeRunner(batch_sizes=sizes)))
"""

ENGINE = """
import os
import torch


class Engine:
    def __init__(self, sizes):
        self.sizes = sizes
        self.out = torch.zeros(8, 4)
        self.w = torch.ones(4, 4)

    def forward(self, bs):
        self.out[:bs].copy_(torch.mm(self.out[:bs], self.w))

    def capture(self, profiler=None):
        pool, stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream()
        for bs in sorted(self.sizes, reverse=True):
            for _ in range(2):
                torch.cuda.synchronize()
                with torch.cuda.stream(stream):
                    self.forward(bs)
                if profiler is not None:
                    profiler.step()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                self.forward(bs)
            if profiler is not None:
                profiler.step()


def test_engine(graph_capture, golden):
    engine = Engine([int(s) for s in os.environ["SIZES"].split(",")])
    golden.check(graph_capture.engine(engine.capture, forward=(engine, "forward"), key=lambda bs: (bs, None),
                                      runner_name="Engine"))
"""


def _goldens(pytester: pytest.Pytester) -> list[str]:
    return sorted(p.name for p in (pytester.path / "goldens").rglob("*.json"))


@pytest.mark.parametrize(
    "source, full, fewer, gone",
    [(RUNNER, "1,2,4", "1,4", "bs=2"), (RUNNER, "2,8", "2", "bs=8"), (ENGINE, "4,2,1", "4,1", "bs=2")],
    ids=["runner-middle-size", "runner-largest-size", "engine-loop"],
)
def test_a_size_no_longer_captured_fails_and_update_golden_removes_it_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, source: str, full: str, fewer: str, gone: str
) -> None:
    pytester.makepyfile(test_model=source)
    monkeypatch.setenv("SIZES", full)
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    written = _goldens(pytester)
    assert len(written) == len(full.split(","))
    monkeypatch.setenv("SIZES", fewer)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{gone} (not captured)*", f"*{gone}: not captured, but *holds its golden*"])
    assert _goldens(pytester) == written  # a failing check deletes nothing
    result = run(pytester, "--update-golden")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*deleted: goldens/*_bs_{gone[3:]}.json*"])
    assert len(_goldens(pytester)) == len(fewer.split(","))
    run(pytester).assert_outcomes(passed=1)


def test_a_run_narrowed_by_batch_sizes_or_k_passes_and_says_what_it_left_unchecked(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_model=RUNNER + "\n\ndef test_other():\n    pass\n")
    monkeypatch.setenv("SIZES", "1,2,4")
    run(pytester, "--update-golden").assert_outcomes(passed=2)
    written = {p: p.read_bytes() for p in (pytester.path / "goldens").rglob("*.json")}
    result = run(pytester, "--graph-capture-batch-sizes=2")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["*not checked: test_model.py::test_decode: 2 golden(s), --graph-capture-batch-sizes=2 left their keys out:*"]
    )
    run(pytester, "--graph-capture-batch-sizes=2", "--update-golden").assert_outcomes(passed=2)
    assert {p: p.read_bytes() for p in (pytester.path / "goldens").rglob("*.json")} == written
    result = run(pytester, "-k", "test_other", "--update-golden")
    result.assert_outcomes(passed=1, deselected=1)
    assert {p: p.read_bytes() for p in (pytester.path / "goldens").rglob("*.json")} == written
