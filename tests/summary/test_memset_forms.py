"""A graph memset is one golden entry whatever the profiler mode shows: Kineto's ``Memset (Device)``, torch 2.15
Cuspy's ``Memset`` record, CUPTI instrumentation mode's kernel ``memset32``; on every route (issue 41, point 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import real_trace, real_traces_dir

from pytest_graphcapture.golden import store
from pytest_graphcapture.golden.gate import check_result
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.summary.files import load_summary_file
from pytest_graphcapture.summary.graph import CapturedGraph, GraphNode
from pytest_graphcapture.summary.replay import graph_node_records
from pytest_graphcapture.summary.scan import kernel_entries, replay_kernels_from_events
from pytest_graphcapture.tools.cli import main

#: A real A100 trace whose replayed CUDA graphs hold memsets (Kineto: ``Memset (Device)``, ``Memset (Unknown)``).
HTA = real_traces_dir() / "hta_negative_queue_length_values_check__rank0.json.gz"
KEY = CaptureKey("dlrm", 1)
NODEID = "tests/test_dlrm.py::test_graphs"


def _cuspy(event: dict) -> dict:
    """torch 2.15's Cuspy export: a plain name, the memory kind as CUPTI's number, value and flags, no bandwidth."""
    args = {k: v for k, v in event["args"].items() if k != "memory bandwidth (GB/s)"}
    args.update({"memory kind": 3 if event["name"] == "Memset (Device)" else 0, "value": 0, "flags": 0})
    return {**event, "name": "Memset", "args": args}


def _instrumented(event: dict) -> dict:
    """CUPTI instrumentation mode: the driver's memset kernel, with a launch shape of its own."""
    args = {**event["args"], "grid": [1 + event["args"]["bytes"] // 1024, 1, 1], "block": [256, 1, 1]}
    return {**event, "cat": "kernel", "name": "memset32", "args": args}


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The summary files ``graphcapture summarize`` writes of the real trace (read in place),
    of its memsets in the other forms and of one real change; derived once."""
    if not HTA.is_file():
        pytest.skip(f"real trace {HTA.name} not found in {HTA.parent}; set GRAPH_CAPTURE_REAL_TRACES to the shared one")
    trace = real_trace(HTA)  # shared, read once per process: left unchanged
    events = [e for e in trace["traceEvents"] if e.get("cat") != "ac2g"]  # flow arrows: no summary reads them
    first = next(i for i, e in enumerate(events) if e.get("cat") == "gpu_memset")
    user_kernel = {**_instrumented(events[first]), "name": "fused_memset_kernel"}  # a user's, not the driver's
    derived = {
        "cuspy": [_cuspy(e) if e.get("cat") == "gpu_memset" else e for e in events],
        "memset32": [_instrumented(e) if e.get("cat") == "gpu_memset" else e for e in events],
        "changed": [*events[:first], user_kernel, *events[first + 1 :]],
    }
    folder = tmp_path_factory.mktemp("memset_forms")
    paths = {"kineto": HTA}
    for name, form in derived.items():
        paths[name] = folder / name / HTA.name.replace(".gz", "")  # the key's runner is named after the file
        paths[name].parent.mkdir()
        paths[name].write_text(json.dumps({**trace, "traceEvents": form}))
    out = {}
    for name, path in paths.items():
        out[name] = folder / f"{name}.summary.json"
        assert main(["summarize", str(path), "--batch-size", "1", "--out", str(out[name])]) == 0
    return out


def _gate(tmp_path: Path, summaries: dict, update: str | None = None) -> dict[str, tuple[list[str], bytes]]:
    """Each summary through the pytest gate (golden.check's): outcomes and the golden it wrote or was checked with."""
    out = {}
    for name, summary in summaries.items():
        golden_dir = tmp_path / (name if update else "one")
        folder = store.golden_folder(golden_dir, "cuda-sm80", NODEID)
        result = CaptureResult("dlrm", "cuda-sm80")
        result.keys[KEY] = KeyResult(KEY, summary=summary)
        outcome = check_result(result, golden_dir=golden_dir, folder=folder, update=update)
        golden = store.golden_path(golden_dir, "cuda-sm80", NODEID, KEY)
        out[name] = ([k.outcome for k in outcome.keys], golden.read_bytes())
    return out


def test_every_memset_form_is_one_entry_in_the_cli(printed: dict[str, Path], capsys: pytest.CaptureFixture) -> None:
    text = {name: path.read_bytes() for name, path in printed.items()}
    assert text["cuspy"] == text["kineto"] == text["memset32"] != text["changed"]
    memsets = [k for k in json.loads(text["kineto"])["kernels"] if k["kind"] == "memset"]
    assert {k["name"] for k in memsets} == {"Memset"} and not any("grid" in k for k in memsets)
    assert sum(k["count"] for k in memsets) == 277  # SOURCES.md: 269 Memset (Device), 8 Memset (Unknown)
    assert main(["diff", str(printed["kineto"]), str(printed["memset32"])]) == 0
    assert main(["diff", str(printed["kineto"]), str(printed["changed"])]) == 1
    out = capsys.readouterr().out
    assert "fused_memset_kernel" in out and "Memset (memset)" in out, out


def test_every_memset_form_writes_one_golden_and_old_goldens_hold(printed: dict[str, Path], tmp_path: Path) -> None:
    summaries = {name: load_summary_file(path) for name, path in printed.items()}
    written = _gate(tmp_path, {k: v for k, v in summaries.items() if k != "changed"}, update="all")
    assert written["kineto"][1] == written["cuspy"][1] == written["memset32"][1]
    # A golden written before memsets had one name holds Kineto's: every form still passes against it.
    old = written["kineto"][1].replace(b'"name": "Memset"', b'"name": "Memset (Device)"')
    assert old != written["kineto"][1]
    store.write_golden(store.golden_path(tmp_path / "one", "cuda-sm80", NODEID, KEY), json.loads(old))
    checked = _gate(tmp_path, summaries)
    assert {name: outcomes for name, (outcomes, _) in checked.items()} == {
        "kineto": ["passed"],
        "cuspy": ["passed"],
        "memset32": ["passed"],
        "changed": ["failed"],
    }


@pytest.mark.parametrize(
    "record", [{"cat": "gpu_memset", "name": "Memset (Unknown)"}, {"cat": "kernel", "name": "memset32"}]
)
def test_the_readout_names_a_memset_node_as_a_replay_names_its_record(record: dict) -> None:
    launch = {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": "cudaGraphLaunch",
        "ts": 1,
        "dur": 1,
        "args": {"correlation": 7},
    }
    gpu = {"ph": "X", **record, "ts": 2, "dur": 1, "args": {"correlation": 7, "grid": [4, 1, 1], "block": [256, 1, 1]}}
    replayed = kernel_entries(replay_kernels_from_events([launch, gpu]), "name")
    graph = CapturedGraph(nodes=[GraphNode("graph.0", "memset")])
    assert (
        kernel_entries(graph_node_records(graph), "name")
        == replayed
        == [{"name": "Memset", "kind": "memset", "count": 1}]
    )
