"""A torch.compile'd runner's goldens do not depend on which other batch sizes were captured (pytester)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import REPO_ROOT, run, use_this_checkout

from pytest_graphcapture.golden.store import CI_VARIABLES

EXAMPLES = REPO_ROOT / "examples"

CONFTEST = f"""
import os
import sys

import pytest
import torch._inductor.config

sys.path.insert(0, {str(EXAMPLES)!r})
from test_compiled_decode import CompiledDecodeRunner

from pytest_graphcapture import DecoderConfig

# Compile in this process: inductor's pool of compile workers is fresh Pythons that import torch
# (most of the test's CPU time); which process compiles a kernel changes nothing in the graphs.
torch._inductor.config.compile_threads = 1

class SomeSizes(CompiledDecodeRunner):
    # Static buffers sized for bs=2 in every run (their size shows in the slicing ops' shapes), as the
    # example's; only the captured sizes change.
    def batch_sizes(self):
        return [int(s) for s in os.environ["COMPILED_SIZES"].split(",")]


@pytest.fixture
def decode_runner():
    return SomeSizes([1, 2], device="cpu", config=DecoderConfig(num_layers=1))
"""

TEST = """
import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_decode(graph_capture, golden):
    golden.check(graph_capture())
"""


def _goldens(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (root / "goldens").rglob("*.json")}


@pytest.mark.slow
# The model and sizes of examples/test_compiled_decode.py, on the worker that runs the examples (the gpu_check
# dry run): inductor compiles each kernel once for both, the later run finds it in inductor's cache.
@pytest.mark.xdist_group("gpu_check_dry_run")
def test_adding_a_batch_size_keeps_the_goldens_of_the_others(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        pytest.skip(f"torch.compile (inductor) on CPU needs a C++ compiler; {compiler} not found: install g++")
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    use_this_checkout(monkeypatch)  # inductor registers itself once per process: each run is a subprocess
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_model=TEST)
    monkeypatch.setenv("COMPILED_SIZES", "1")
    run(pytester, "--update-golden", subprocess=True, warm=True).assert_outcomes(passed=1)
    before = _goldens(pytester.path)
    assert sorted(before) == ["SomeSizes_bs_1.json"]
    assert b'"Torch-Compiled Region"' in before["SomeSizes_bs_1.json"]
    # bs=2 is captured first now, so dynamo numbers the compilation of bs=1 differently.
    monkeypatch.setenv("COMPILED_SIZES", "1,2")
    result = run(pytester, subprocess=True, warm=True)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["graph capture of SomeSizes has no golden for bs=2 (*, 1 of 2 keys)"])
    run(pytester, "--update-golden=new", subprocess=True, warm=True).assert_outcomes(passed=1)
    after = _goldens(pytester.path)
    assert {name: after[name] for name in before} == before
