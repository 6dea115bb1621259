"""Smoke test of the benchmark command: it runs end to end and prints its table.

Timings are never asserted here (targets are what the benchmarks show, not what
a timed test could check on a shared CI machine); this only guards the
documented command against breaking.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from warm_python import warm_python

REPO = REPO_ROOT
RUN = REPO / "benchmarks" / "run.py"


def _real_traces() -> Path:
    env = os.environ.get("GRAPH_CAPTURE_REAL_TRACES")
    return Path(env) if env else REPO.parent / "shared" / "testdata" / "real_traces"


def _run(args: list[str], tmp_path: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [warm_python(), str(RUN), *args], cwd=tmp_path, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_quick_run_prints_and_writes_the_table(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    done = _run(["--quick", "--skip-hta", "--out", str(out), "--work-dir", str(tmp_path / "work")], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table_start = done.stdout.index("bench  measurement")
    table = done.stdout[table_start:]
    assert "B1" in table and "B4" in table and "B5" in table
    assert "parse a 5000-node graph dump" in table
    assert "ours, summary-only per-bs" in table and "golden check of 7 keys" in table
    # B1 runs at both model sizes; the summary-only target is judged at the realistic one
    assert "tiny model (hidden 64, 2 layers): ours, summary-only" in table
    realistic = [
        line
        for line in table.splitlines()
        if "realistic model (hidden 1024, 8 layers): ours, summary-only per-bs" in line
    ]
    assert len(realistic) == 1 and "≤ 1.10" in realistic[0] and "tiny model (hidden 64, 2 layers): " in realistic[0]
    if sorted(_real_traces().glob("*.json.gz")):
        assert "summarize_trace_file" in table
        assert "graphcapture check of a vLLM capture trace of 4 keys" in table  # B7 at the quick size
    else:
        assert "B2/B3 skipped" in done.stdout
    assert "B3" not in table  # --skip-hta
    markdown = out.read_text(encoding="utf-8")
    assert "| bench | measurement | median |" in markdown
    assert "Machine:" in markdown and "torch:" in markdown
    # The table is the last thing printed.
    assert "engine's own loop, summary-only, 6 keys" in table  # B6 at the quick sizes 1,2,4
    # B7 comes last where the real traces are found (it builds its trace from one of them).
    last = "B7" if (_real_traces() / "tracelens_sglang_decode_capture__bs_32_rank0.json.gz").is_file() else "B6"
    assert done.stdout.rstrip().splitlines()[-1].startswith(last)


def test_unknown_b1_model_is_a_one_line_usage_error(tmp_path: Path) -> None:
    done = _run(["--only", "B1", "--b1-models", "tiny,huge"], tmp_path, timeout=60)
    assert done.returncode == 2
    assert "--b1-models: unknown size(s) huge" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_benchmark_is_a_one_line_usage_error(tmp_path: Path) -> None:
    done = _run(["--only", "B1,B9"], tmp_path, timeout=60)
    assert done.returncode == 2
    assert "--only: unknown benchmark(s) B9" in done.stderr
    assert "Traceback" not in done.stderr
