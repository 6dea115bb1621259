"""The README's main job: the examples pass out of the box and export one trace per batch size."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, cpu_op_names, load_trace
from warm_python import warm_python

from pytest_graphcapture.naming import TRACE_SUBDIR, trace_dir, trace_group_for

EXAMPLES = REPO_ROOT / "examples"
DEFAULT_SIZES = [1, 2, 4, 8, 12, 16, 24, 32]


def run_examples(*args: str, cwd: Path = REPO_ROOT, warm: bool = False, only: str = "") -> subprocess.CompletedProcess:
    """Run the examples as the README's main job does; ``warm``: in a Python forked warm (tests/warm_python.py).

    ``only``: one file of the examples instead of all."""
    command = [
        warm_python() if warm else sys.executable,
        "-m",
        "pytest",
        str(EXAMPLES / only),
        "-p",
        "no:cacheprovider",
        "--graph-capture-device=cpu",
        *args,
    ]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.xdist_group("gpu_check_dry_run")
def test_examples_pass_against_committed_cpu_goldens_under_w_error(
    gpu_check_dry_run: tuple[subprocess.CompletedProcess, Path],
) -> None:
    # The README's main job (-W error, --graph-capture-trace, a fresh interpreter) is the gpu_check dry
    # run's examples step, run once for this test and test_gpu_check.py (tests/e2e/conftest.py).
    _, out = gpu_check_dry_run
    log = (out / "examples.log").read_text()
    summary = (out / "summary.md").read_text()
    assert "| examples | 0 |" in summary, log[-3000:]
    captures = out / "examples"  # the step's --graph-capture-dir
    # Every key of every example passes (the examples grow: the count is not pinned here).
    checked = re.search(r"cpu: (\d+) checked, \1 passed, 0 failed", log)
    assert checked, log[-1500:]
    # One trace per checked key: tests capturing runners of the same name (MiniEngine) keep theirs apart.
    traces = sorted(captures.rglob("*.json.gz"))
    assert len(traces) == int(checked.group(1)), [p.relative_to(captures).as_posix() for p in traces]
    folder = trace_dir(captures, trace_group_for("test_decode_graphs.py::test_decode_graphs_match_goldens"))
    names = sorted(p.name for p in folder.iterdir())
    assert names == sorted(f"TinyDecodeRunner_bs_{bs}_rank0.json.gz" for bs in DEFAULT_SIZES)
    tp = trace_dir(
        captures, trace_group_for("test_tensor_parallel.py::test_tensor_parallel_decode_graphs_match_goldens")
    )
    assert sorted(p.name for p in tp.glob("TinyDecodeRunner-tp2_*")) == sorted(
        f"TinyDecodeRunner-tp2_bs_{bs}_rank{rank}.json.gz" for bs in (1, 2, 4) for rank in (0, 1)
    )
    for bs in DEFAULT_SIZES:
        trace = load_trace(folder / f"TinyDecodeRunner_bs_{bs}_rank0.json.gz")
        ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
        assert ops and all("Input Dims" in e["args"] for e in ops)
        # One decode forward embeds the tokens once: the capture, not the two warmups.
        embeddings = [e for e in ops if e["name"] == "aten::embedding"]
        assert len(embeddings) == 1, f"bs={bs}: {len(embeddings)} forwards recorded"
        assert embeddings[0]["args"]["Input Dims"][1] == [bs]
        assert cpu_op_names(trace).count("aten::argmax") == 1


def test_examples_without_trace_option_write_no_trace(tmp_path: Path) -> None:
    # One example stands for all: whether a capture exports is decided once per session, not per
    # example; the multi-rank route is checked the same way in tests/engine/test_multi_rank.py.
    done = run_examples(
        f"--graph-capture-dir={tmp_path}", warm=True, only="test_decode_graphs.py::test_decode_graphs_match_goldens"
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "cpu: 8 checked, 8 passed, 0 failed" in done.stdout, done.stdout[-1500:]
    assert not (tmp_path / TRACE_SUBDIR).exists()
