"""A run narrowed by ``--graph-capture-batch-sizes`` captures, for each size it selects, what a full run captures.

Narrowing is like ``-k`` deselection: the sizes left out are not captured, and those
selected are checked against the same goldens a full run wrote and passes.
"""

from __future__ import annotations

import pytest
import torch
from helpers import run

from pytest_graphcapture.engine.decode_model import TinyDecodeRunner
from pytest_graphcapture.engine.ranks.capture import tensor_parallel_decode_runner
from pytest_graphcapture.engine.ranks.supervisor import RankContext

TEST = """
def test_decode(graph_capture, golden):
    golden.check(graph_capture())
"""


def test_a_narrowed_run_of_the_embedded_runner_passes_against_the_goldens_a_full_run_wrote(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_model=TEST)
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    written = {p: p.read_bytes() for p in (pytester.path / "goldens").rglob("*.json")}
    assert len(written) == len(TinyDecodeRunner().batch_sizes())
    for sizes in ("2,4", "1", "32,8"):
        result = run(pytester, f"--graph-capture-batch-sizes={sizes}")
        result.assert_outcomes(passed=1)
        result.stdout.fnmatch_lines(
            [f"cpu: {len(sizes.split(','))} checked, {len(sizes.split(','))} passed, 0 failed*"]
        )
    # Its --update-golden leaves every golden of the full run as it was.
    run(pytester, "--graph-capture-batch-sizes=2,4", "--update-golden").assert_outcomes(passed=1)
    assert {p: p.read_bytes() for p in (pytester.path / "goldens").rglob("*.json")} == written


def test_the_default_rank_factory_builds_the_full_runner_whatever_sizes_the_run_selects() -> None:
    narrowed = tensor_parallel_decode_runner(RankContext(0, 1, "cpu", "gloo", batch_sizes=(2, 4)))
    full = tensor_parallel_decode_runner(RankContext(0, 1, "cpu", "gloo"))
    assert narrowed.batch_sizes() == full.batch_sizes()
    assert narrowed.k_cache.shape == full.k_cache.shape


def test_the_embedded_runner_serves_decode_from_the_sizes_a_narrowed_capture_holds() -> None:
    from pytest_graphcapture.engine.backend import make_backend
    from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner

    runner = TinyDecodeRunner(device="cpu")
    backend = make_backend("cpu")
    result = capture_runner(runner, backend, CaptureSettings(summarize=False, batch_sizes=(2, 4)))
    runner.use_graphs(result, backend)
    assert [runner.padded_batch_size(n) for n in (1, 2, 3, 4)] == [2, 2, 4, 4]
    with pytest.raises(ValueError, match=r"batch of 5 does not fit the captured sizes \[2, 4\]"):
        runner.padded_batch_size(5)
    tokens, _ = runner.decode(torch.tensor([3]), torch.tensor([2]))
    assert tokens.shape == (1,)
