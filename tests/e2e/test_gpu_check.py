"""scripts/gpu_check.sh --dry-run: the GPU check's own plumbing, on CPU, as CI runs it.

Every step runs (gpu-marked tests, the examples with traces and a golden harvest,
the profiler probe, the capture timings, the live-vs-file agreement, the graph readout,
the engine loop's capture observation, the CUPTI refusal, the pieces, the reduce-overhead
model, the memset forms and the get_graph_data ports), and every file the GPU run is read for
is written: the summary, the harvested goldens, the probe's answers, the timings
with their ratios and per-key metrics, and the copied traces.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from warm_python import warm_python

SCRIPT = REPO_ROOT / "scripts" / "gpu_check.sh"


@pytest.mark.slow
@pytest.mark.xdist_group("gpu_check_dry_run")
def test_the_dry_run_runs_every_step_on_cpu_and_writes_every_answer(
    gpu_check_dry_run: tuple[subprocess.CompletedProcess, Path],
) -> None:
    done, out = gpu_check_dry_run  # run once for this test and test_examples.py (tests/e2e/conftest.py)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = (out / "summary.md").read_text()
    assert "dry run on CPU" in summary and "platform: cpu" in summary and '"torch_version"' in summary
    steps = ("gpu-tests", "examples", "probe", "timings", "agree", "graph", "hooks", "cupti", "pieces", "compiled")
    steps += ("memset", "ports")
    for step in steps:
        assert f"| {step} | 0 |" in summary, summary
    probe = json.loads((out / "probe.json").read_text())
    assert len(probe["answers"]) == 7 and set(probe["answers"].values()) == {"no GPU (dry run)"}
    assert probe["capture"]["gpu_events"] == 0 and len(probe["replays"]) == 2
    timings = json.loads((out / "timings.json").read_text())
    assert set(timings["median_seconds"]) == {"off", "summary-only", "per-bs export"}
    assert timings["ratio_to_off"]["off"] == 1.0
    assert all(m["capture_seconds"] > 0 for m in timings["per_key_metrics"].values())
    harvested = sorted(p.relative_to(out / "goldens").as_posix() for p in (out / "goldens").rglob("*.json"))
    live = [name for name in harvested if name.startswith("cpu/")]  # this run's captures
    recorded = [name for name in harvested if not name.startswith("cpu/")]  # the engine-trace gate's (MI300X)
    assert live and all(name.startswith("rocm-gfx942/engine_traces/") for name in recorded), recorded
    assert len(list((out / "traces").rglob("*.json.gz"))) == 3
    agree = json.loads((out / "agree.json").read_text())  # live summaries and trace files of each capture
    graph = json.loads((out / "graph.json").read_text())  # no graph on CPU: every key says so
    assert graph["answers"] == {"readout": "no GPU (dry run)", "keys": 2} and graph["platform"] == "cpu"
    assert all(v == {"read": False, "kernel_source": None} for v in graph["per_key"].values())
    assert agree["answers"] == {"agree": len(live), "keys": len(live), "from recorded traces": len(recorded)}, agree[
        "per_key"
    ]
    assert agree["from_recorded_traces"] == recorded
    hooks = json.loads((out / "hooks.json").read_text())  # the engine loop seen through hooks or patching
    assert hooks["keys"] == 2 and hooks["torch_cuda_unpatched_after"] is True
    assert hooks["mode"] == ("hooks" if hooks["hooks_available"] else "patch")
    assert hooks["graph_class_patched_during_the_loop"] is (hooks["mode"] == "patch")
    cupti = json.loads((out / "cupti.json").read_text())["answers"]  # on CPU nothing profiles GPU kernels
    assert cupti["runner"] == cupti["engine_loop"] == {"refused": False, "captured": True}
    assert cupti["cupti_annotations"] == "no GPU (dry run)"
    pieces = json.loads((out / "pieces.json").read_text())  # graphs begun inside the forward: three per key
    assert pieces["keys"] == 2 and pieces["torch_cuda_unpatched_after"] is True
    assert [v["graphs"] for v in pieces["per_key"].values()] == [3, 3], pieces
    assert all(all(n > 0 for n in v["ops_per_graph"]) for v in pieces["per_key"].values()), pieces
    compiled = json.loads((out / "compiled.json").read_text())  # reduce-overhead on CPU: inductor captures no graph
    assert compiled["refused"] is True and compiled["warmups"] == 1, compiled
    assert "CompiledEngine bs=4: capture: the capture forward ran with no graph around it" in compiled["message"]
    assert 'torch.compile(mode="reduce-overhead") captures no graph on CPU' in compiled["message"]
    memset = json.loads((out / "memset.json").read_text())  # no graph on CPU, so no replay to profile
    assert memset["answers"] == {"memset": "no GPU (dry run)"}
    ports = json.loads((out / "ports.json").read_text())["answers"]  # the bindings' version where installed
    assert ports["ports"] in (
        "no GPU (dry run)",
        "skipped: cuda-bindings is not installed (pip install 'pytest-graphcapture[cuda]')",
    ), ports


def test_without_a_gpu_the_real_run_is_refused_with_one_line(tmp_path: Path) -> None:
    # Forked warm: CUDA reads CUDA_VISIBLE_DEVICES when torch first asks for devices, after the fork.
    env = dict(os.environ, PYTHON=warm_python(), CUDA_VISIBLE_DEVICES="")
    done = subprocess.run(
        ["bash", str(SCRIPT), "--out", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "torch sees no GPU here; run it on a GPU machine, or pass --dry-run" in done.stderr


def test_the_examples_step_options_go_with_the_dry_run_only(tmp_path: Path) -> None:
    # Refused before any Python starts: the GPU run's examples step is the one the script names.
    done = subprocess.run(
        ["bash", str(SCRIPT), "--out", str(tmp_path), "--examples-opt", "-Werror"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--examples-python and --examples-opt go with --dry-run only" in done.stderr
