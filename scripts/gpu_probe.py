"""What a GPU machine should tell us about the profiler and CUDA graphs, answered into files.

    python scripts/gpu_probe.py probe   OUT.json [--device cuda|cpu]
    python scripts/gpu_probe.py timings OUT.json [--device cuda|cpu] [--repeat 3] [--batch-sizes 1,2,4]
    python scripts/gpu_probe.py agree   OUT.json --goldens DIR --traces DIR
    python scripts/gpu_probe.py graph   OUT.json [--device cuda|cpu] [--batch-sizes 1,2,4]
    python scripts/gpu_probe.py memset  OUT.json [--device cuda|cpu]
    python scripts/gpu_probe.py ports   OUT.json [--device cuda|cpu]

``probe`` captures a small graph (a GEMM, an elementwise op and a memset) and
replays it under the profiler, twice in the same process, and answers: are there
kernel events for captured-only kernels? do replay kernels share the graph launch's
correlation id? do capture launches and replay kernels carry graph node ids? how do
memsets appear in a replay? how many streams do replay kernels use? does a second
profiler session still link replay kernels to their launch?

``agree`` compares the live summaries harvested as goldens with the summaries of the same
captures' per-bs trace files (ops and launches): they must be equal.

``timings`` captures the embedded decoder with profiling off, summary only and
per-bs trace export (median of ``--repeat`` runs each), gives the ratios, and the
per-key metrics (warmup/capture/replay time, graph memory) of one summarized run.

``graph`` captures the examples' runners (the embedded decoder; on a GPU also its compiled
variant) with summaries and the profiled replay, reading each captured graph in process
(cuda-bindings): per key, whether the readout and the replay's kernel multisets are equal,
the share of kernels named with their op, and the readout's time.

``memset`` captures a graph with memset nodes and profiles one replay with Kineto and, where torch has it
(2.15+), with its Cuspy backend (CUPTI HES), each in a fresh process (one CUPTI client per process):
the memset records each shows, the replay's summary entries (memset-kineto.json, memset-cuspy.json beside
OUT) and whether the two agree.

``ports`` says which cuda-bindings is installed, whether its edge data (ports) is trusted (13.3.0+,
12.9.7+ on 12.x), and on a trusted one what torch's ``get_graph_data()`` answers for a captured graph's edges.

On CPU (``scripts/gpu_check.sh --dry-run``) both run the same code on the eager
stand-in, and the GPU-only answers say "no GPU".  Used by scripts/gpu_check.sh.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.profiler import profile

from pytest_graphcapture.engine.backend import detect_platform, environment_from_device, make_backend
from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
from pytest_graphcapture.engine.decode_model import TinyDecodeRunner
from pytest_graphcapture.engine.profiling import profiler_activities
from pytest_graphcapture.engine.readout import bindings_version, edge_data_trusted
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.scan import kernel_entries, replay_kernels_from_events

GPU_CATS = ("kernel", "gpu_memset", "gpu_memcpy")
LAUNCH = ("cudaLaunchKernel", "cudaGraphLaunch", "hipLaunchKernel", "hipGraphLaunch", "hipExtModuleLaunchKernel")


def _events(prof: profile) -> list[dict]:
    """The exported Chrome trace events of ``prof`` (what users' trace files hold)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        prof.export_chrome_trace(str(path))
        return json.loads(path.read_text()).get("traceEvents", [])


def _graph_ids(events: list[dict]) -> list[str]:
    """Argument names that look like graph node / graph ids, over all events."""
    return sorted({name for e in events for name in e.get("args", {}) if "graph" in name.lower()})


class SmallGraph:
    """A GEMM, an elementwise op and a memset (``zero_``) on static buffers."""

    def __init__(self, device: torch.device) -> None:
        self.x = torch.randn(64, 64, device=device)
        self.w = torch.randn(64, 64, device=device)
        self.out = torch.empty(64, 64, device=device)

    def __call__(self) -> None:
        self.out.zero_()
        self.out.add_(torch.relu(self.x @ self.w))


def probe(device: torch.device) -> dict:
    gpu = device.type == "cuda"
    backend = make_backend(device)
    forward = SmallGraph(device)
    activities = profiler_activities(device)
    for _ in range(2):
        backend.run_forward(forward)
    backend.synchronize()
    with profile(activities=activities) as capture_prof:
        with backend.graph_context(None, forward) as graph:  # type: ignore[arg-type]
            backend.run_forward(forward)
        backend.synchronize()
    capture = _events(capture_prof)
    sessions = []
    for _ in range(2):  # the second session answers the last question
        backend.synchronize()
        with profile(activities=activities) as prof:
            backend.replay(graph)
            backend.synchronize()
        sessions.append(_events(prof))
    answers: dict[str, Any] = {"device": str(device), "platform": detect_platform(device)}
    answers["environment"] = environment_from_device(device)
    answers["capture"] = {
        "launch_events": sum(1 for e in capture if e.get("name", "").split("_v")[0] in LAUNCH),
        "gpu_events": sum(1 for e in capture if e.get("cat") in GPU_CATS),
        "graph_id_args": _graph_ids(capture),
    }
    answers["replays"] = [_replay_answers(events) for events in sessions]
    first, second = answers["replays"]
    questions = {
        "kernel events for captured-only kernels": answers["capture"]["gpu_events"] > 0,
        "replay kernels share the graph launch's correlation id": first["share_launch_correlation"],
        "capture launches carry graph node ids": bool(answers["capture"]["graph_id_args"]),
        "replay kernels carry graph node ids": bool(first["graph_id_args"]),
        "memsets in a replay appear as": first["memset_names"] or "no memset events",
        "streams used by replay kernels": first["streams"],
        "a second profiler session still links replay kernels to their launch": second["share_launch_correlation"],
    }
    answers["answers"] = questions if gpu else {q: "no GPU (dry run)" for q in questions}
    return answers


def _replay_answers(events: list[dict]) -> dict:
    launches = [e for e in events if e.get("name", "").split("_v")[0] in ("cudaGraphLaunch", "hipGraphLaunch")]
    gpu = [e for e in events if e.get("cat") in GPU_CATS]
    launch_ids = {e.get("args", {}).get("correlation") for e in launches}
    linked = [e for e in gpu if e.get("args", {}).get("correlation") in launch_ids]
    return {
        "graph_launches": len(launches),
        "gpu_events": len(gpu),
        "kernels": sorted({e["name"] for e in gpu if e.get("cat") == "kernel"}),
        "linked_to_launch": len(linked),
        "share_launch_correlation": bool(gpu) and len(linked) == len(gpu),
        "graph_id_args": _graph_ids(gpu),
        "memset_names": sorted({f"{e['cat']}: {e['name']}" for e in gpu if "memset" in (e["cat"] + e["name"]).lower()}),
        "streams": len({e.get("args", {}).get("stream") for e in gpu}),
    }


def _median_seconds(run: Callable[[], Any], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def timings(device: torch.device, repeat: int, batch_sizes: list[int]) -> dict:
    platform = detect_platform(device)
    runner = TinyDecodeRunner(batch_sizes, device=device)
    modes = {
        "off": dict(trace="off", summarize=False),
        "summary-only": dict(trace="off", summarize=True),
        "per-bs export": dict(trace="per-bs", summarize=True),
    }
    medians = {}
    with tempfile.TemporaryDirectory() as folder:
        # One untimed run first: lazy initialisation (kernels, profiler libraries) is not a mode's cost.
        capture_runner(runner, make_backend(device), CaptureSettings(out_dir=folder, platform=platform))
        for name, values in modes.items():
            settings = CaptureSettings(out_dir=Path(folder) / name.split()[0], platform=platform, **values)

            def run(settings: CaptureSettings = settings) -> Any:
                backend = make_backend(device)
                try:
                    return capture_runner(runner, backend, settings)
                finally:
                    backend.release()

            medians[name] = _median_seconds(run, repeat)
        result = capture_runner(runner, make_backend(device), CaptureSettings(out_dir=folder, platform=platform))
    base = medians["off"] or float("nan")
    return {
        "device": str(device),
        "platform": platform,
        "batch_sizes": batch_sizes,
        "repeat": repeat,
        "median_seconds": medians,
        "ratio_to_off": {name: value / base for name, value in medians.items()},
        "per_key_metrics": {str(kr.key): kr.metrics.to_dict() for kr in result},
    }


def agree(goldens: Path, traces: Path, platform: str) -> dict:
    """Do the live summaries (harvested goldens) and the per-bs trace files of the same captures agree?

    The trace holds the capture step only (the replay is profiled apart), so ops and launches are
    compared, not kernels.  Only the goldens of this run's ``platform`` come from its live captures;
    those of another platform were read from recorded traces (the examples' engine-trace gate reads
    an MI300X capture) and have no capture of this run to agree with: they are counted apart.
    """
    from pytest_graphcapture.naming import trace_file_name
    from pytest_graphcapture.summary import load_summary_file, summarize_trace_file

    keys: dict = {}
    recorded = sorted(
        path.relative_to(goldens).as_posix()
        for path in goldens.rglob("*.json")
        if path.relative_to(goldens).parts[0] != platform
    )
    for golden_path in sorted((goldens / platform).rglob("*.json")):
        golden = load_summary_file(golden_path)
        # Keyed by the golden's path: two tests may hold goldens of the same runner and key.
        stem = golden_path.relative_to(goldens).as_posix()[: -len(".json")]
        # A test's traces are in the folder mirroring its golden folder below the platform (a named
        # check's goldens are one folder deeper than the test's traces).
        folder = Path(*golden_path.relative_to(goldens).parent.parts[1:])
        found = [
            traces / up / trace_file_name(golden.key)
            for up in (folder, *folder.parents)
            if (traces / up / trace_file_name(golden.key)).is_file()
        ]
        if not found:
            keys[stem] = "no trace"
            continue
        from_file = summarize_trace_file(found[0], key=golden.key, level=golden.level)
        differ = [part for part in ("ops", "launches") if getattr(from_file, part) != getattr(golden, part)]
        keys[stem] = "agree" if not differ else f"differ in {', '.join(differ)}"
    answers = {
        "agree": sum(v == "agree" for v in keys.values()),
        "keys": len(keys),
        "from recorded traces": len(recorded),
    }
    return {"answers": answers, "per_key": keys, "from_recorded_traces": recorded}


def _example_runners(device: torch.device, batch_sizes: list[int]) -> list[Any]:
    """The examples' runners: the embedded decoder, and on a GPU its compiled variant (examples/)."""
    runners = [TinyDecodeRunner(batch_sizes, device=device)]
    if device.type == "cuda":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
        from test_compiled_decode import CompiledDecodeRunner  # the examples' own runner

        from pytest_graphcapture.engine.decode_model import DecoderConfig

        runners.append(CompiledDecodeRunner([1, 2], device=device, config=DecoderConfig(num_layers=1)))
    return runners


def graph(device: torch.device, batch_sizes: list[int]) -> dict:
    """Graph readout against the profiled replay, per example key: equal kernel multisets, attribution, time."""
    from pytest_graphcapture.summary.scan import attributed_share

    platform = detect_platform(device)
    keys: dict = {}
    named = total = 0
    with tempfile.TemporaryDirectory() as folder:
        for runner in _example_runners(device, batch_sizes):
            backend = make_backend(device)
            try:
                result = capture_runner(runner, backend, CaptureSettings(out_dir=folder, platform=platform))
            finally:
                backend.release()
            for key_result in result:
                summary, key = key_result.summary, key_result.key
                readout = backend.graph_readouts.get(key)
                if readout is None:
                    keys[str(key)] = {"read": False, "kernel_source": summary.kernel_source}
                    continue
                kernel_named, kernel_total = attributed_share(k for k in summary.kernels if k["kind"] == "kernel")
                named, total = named + kernel_named, total + kernel_total
                keys[str(key)] = {
                    "read": True,
                    "graph_nodes": sum(readout.node_counts().values()),
                    "topology": summary.topology,
                    "replay_equal": summary.complete,
                    "incomplete_reason": summary.incomplete_reason,
                    "attributed": f"{kernel_named}/{kernel_total}",
                    "unattributed": summary.unattributed,
                    "readout_ms": round(backend.readout_seconds[key] * 1e3, 3),
                }
    read = [v for v in keys.values() if v["read"]]
    if device.type != "cuda":
        answers: dict = {"readout": "no GPU (dry run)", "keys": len(keys)}
    elif not read:
        answers = {"readout": "no key was read (cuda-bindings missing or torch < 2.8: see the warnings)"}
    else:
        answers = {
            "keys": len(keys),
            "read": len(read),
            "replay_equal": sum(1 for v in read if v["replay_equal"]),
            "attribution_share": round(named / total, 4) if total else None,
            "readout_ms_max": max(v["readout_ms"] for v in read),
        }
    return {"device": str(device), "platform": platform, "answers": answers, "per_key": keys}


class MemsetGraph(SmallGraph):
    """SmallGraph and a column sum tall enough that its reduction memsets its semaphores."""

    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.tall = torch.randn(65536, 64, device=device)
        self.col = torch.empty(64, device=device)

    def __call__(self) -> None:
        super().__call__()
        torch.sum(self.tall, dim=0, out=self.col)


PROFILERS = ("kineto", "cuspy")


def _profiler_options(name: str) -> tuple[dict, str | None]:
    """``profile()`` options selecting profiler ``name``, or the reason this torch lacks it."""
    if name == "kineto":
        return {}, None
    if importlib.util.find_spec("torch.profiler._cuspy") is None:
        return {}, f"torch {torch.__version__} has no Cuspy profiler backend (torch.profiler._cuspy, torch 2.15+)"
    config = torch._C._profiler._ExperimentalConfig(custom_profiler_config=json.dumps({"backend": "cuspy"}))
    return {"experimental_config": config}, None


def _memset_graph(device: torch.device) -> tuple[Any, CaptureKey, Any]:
    """A :class:`MemsetGraph` captured after two warmups, as the plugin captures a key: (backend, key, graph)."""
    backend = make_backend(device)
    forward = MemsetGraph(device)
    for _ in range(2):
        backend.run_forward(forward)
    key = CaptureKey("MemsetGraph", 1)
    with backend.graph_context(key, forward) as graph:
        backend.run_forward(forward)
    return backend, key, graph


def memset_replay(device: torch.device, name: str) -> dict:
    """One graph with memsets, its replay profiled by ``name``: the memset records and the summary entries."""
    options, missing = _profiler_options(name)
    if missing:
        return {"skipped": missing}
    backend, key, graph = _memset_graph(device)
    backend.synchronize()
    try:
        with profile(activities=profiler_activities(device), **options) as prof:
            backend.replay(graph)
            backend.synchronize()
        events = _events(prof)
    except Exception as exc:  # a backend that does not start (libcupti < 13.3) is an answer, not a crash
        return {"skipped": f"the {name} profiler did not run: {type(exc).__name__}: {exc}".splitlines()[0]}
    readout = backend.graph_readouts.get(key)
    return {
        "graph_nodes": readout.node_counts() if readout is not None else "not read (no cuda-bindings)",
        "memset_records": sorted({f"{e.get('cat')}: {e.get('name')}" for e in events if "memset" in json.dumps(e)}),
        "summary": kernel_entries(replay_kernels_from_events(events), "name"),
    }


def memset(device: torch.device, out: Path) -> dict:
    """:func:`memset_replay` per profiler, each in a fresh process; whether their summaries agree."""
    if device.type != "cuda":
        return {"answers": {"memset": "no GPU (dry run)"}}
    found = {}
    for name in PROFILERS:
        path = out.parent / f"memset-{name}.json"
        command = [sys.executable, __file__, "memset-replay", str(path), "--profiler", name, "--device", "cuda"]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=25)
        except subprocess.TimeoutExpired:
            found[name] = {"skipped": f"the {name} replay took over 25 s"}
            continue
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        found[name] = json.loads(path.read_text()) if done.returncode == 0 else {"skipped": last}
    ran = [found[name]["summary"] for name in PROFILERS if "summary" in found[name]]
    agree = ran[0] == ran[1] if len(ran) == 2 else f"{len(ran)} of the 2 profilers ran"
    answers = {f"{name} memsets": found[name].get("memset_records", found[name].get("skipped")) for name in PROFILERS}
    return {"answers": {**answers, "summaries agree": agree}, "per_profiler": found}


def ports(device: torch.device) -> dict:
    """The installed cuda-bindings, whether its edge data is trusted, and torch's get_graph_data() edges there."""
    version = bindings_version()
    if version is None:
        return {
            "answers": {"ports": "skipped: cuda-bindings is not installed (pip install 'pytest-graphcapture[cuda]')"}
        }
    trusted = edge_data_trusted(version)
    answers: dict[str, Any] = {"cuda-bindings": version, "edge data trusted": trusted}
    if device.type != "cuda":
        return {"answers": {**answers, "ports": "no GPU (dry run)"}}
    if not callable(getattr(torch.cuda.CUDAGraph, "get_graph_data", None)):
        return {"answers": {**answers, "ports": f"skipped: torch {torch.__version__} has no CUDAGraph.get_graph_data"}}
    backend, key, graph = _memset_graph(device)
    answers["kernel_source"] = backend.readout_sources.get(key)
    if not trusted:  # torch would read them from freed memory: the plugin does not ask, nor does this
        return {"answers": {**answers, "ports": "left out: get_graph_data() not asked"}}
    edges = graph.get_graph_data()["edges"]
    kept = [{k: e.get(k) for k in ("from", "to", "from_port", "to_port", "type")} for e in edges]
    return {"answers": {**answers, "ports": "read by torch; the summary holds none"}, "edges": kept}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("probe", "timings", "agree", "graph", "memset", "memset-replay", "ports"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32")
    parser.add_argument("--goldens", type=Path, help="agree: the harvested goldens")
    parser.add_argument("--traces", type=Path, help="agree: the per-bs traces of the same run")
    parser.add_argument("--profiler", choices=PROFILERS, default="kineto", help="memset-replay: the profiler")
    args = parser.parse_args(argv)
    if args.what == "agree":
        answers = agree(args.goldens, args.traces, detect_platform(torch.device(args.device)))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(answers, indent=2, sort_keys=True) + "\n")
        print(json.dumps(answers["answers"]))
        return 0 if answers["answers"]["agree"] == answers["answers"]["keys"] else 1
    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            f"gpu_probe.py: no GPU visible to torch {torch.__version__}; use --device cpu for a dry run",
            file=sys.stderr,
        )
        return 2
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    sizes = [int(part) for part in args.batch_sizes.split(",") if part]
    if args.what == "graph":
        answers = graph(device, sizes)
    elif args.what in ("memset", "memset-replay", "ports"):
        what = args.what
        answers = memset(device, args.out) if what == "memset" else ports(device) if what == "ports" else {}
        answers = memset_replay(device, args.profiler) if what == "memset-replay" else answers
    else:
        answers = probe(device) if args.what == "probe" else timings(device, args.repeat, sizes)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(answers, indent=2, sort_keys=True, default=str) + "\n")
    print(json.dumps(answers.get("answers", answers.get("ratio_to_off")), indent=2, default=str))
    if args.what == "memset" and answers["answers"].get("summaries agree") is False:
        return 1  # a golden that flips with the profiler: a finding the summary must show
    if args.what == "graph" and answers["answers"].get("read"):
        # A graph read whose replay lost kernels is a finding: the step fails so the summary shows it.
        return 0 if answers["answers"]["replay_equal"] == answers["answers"]["read"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
