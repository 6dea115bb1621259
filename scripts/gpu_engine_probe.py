"""The engine-loop gate on this machine: how it sees captures, and the one-CUPTI-client refusal, answered into files.

    python scripts/gpu_engine_probe.py hooks OUT.json [--device cuda|cpu]
    python scripts/gpu_engine_probe.py cupti OUT.json [--device cuda|cpu]
    python scripts/gpu_engine_probe.py pieces OUT.json [--device cuda|cpu]
    python scripts/gpu_engine_probe.py compiled OUT.json [--device cuda|cpu]

``hooks`` runs an engine's own capture loop (two batch sizes, two warmups each, the
capture under ``torch.cuda.graph``) under ``graph_capture.engine``'s function and
answers: does this torch have the global capture hooks, which path observed the loop
(``hooks``: torch's hooks, nothing patched; ``patch``: ``CUDAGraph.capture_begin/_end``
wrapped), was the graph class patched while the loop ran, is ``torch.cuda`` as it was
afterwards, and where each key's kernels came from (``kernel_source``: ``graph-data``,
``graph`` or ``replay``; none on CPU).

``cupti`` sets ``CUDA_INJECTION64_PATH`` after CUDA is initialised (so nothing is
loaded, but the gate sees another CUPTI client) and answers whether a runner capture
and an engine-loop capture are refused in one line naming it; on a GPU with torch's
annotation config, it also captures with ``annotation_config={"backend": "cupti"}`` and
answers how that capture ended (it must end without a result).  On CPU nothing profiles
GPU kernels, so nothing may be refused.

``pieces`` runs an engine whose forward captures three piece graphs per batch size (an
eager softmax between them, as vLLM's PIECEWISE mode runs attention) under the same gate
and answers: how many graphs each key holds (three), whether every piece's kernels were
read on a GPU (its kernel source), and whether ``torch.cuda`` is as it was afterwards.

``compiled`` gates a ``torch.compile(mode="reduce-overhead")`` model's loop (two batch
sizes, one warmup call each, then the call that records the size's graph inside the
compiled callable) with ``warmups=1`` and answers: was it refused (and the line), the
keys, the graphs each key holds (one: the recorded graph, not the tree's priming one),
their kernels and kernel source.  On a GPU it must be gated; on CPU inductor captures no
graph, so it must be refused in one line saying so.
Used by scripts/gpu_check.sh.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import torch

from pytest_graphcapture.engine.backend import detect_platform, make_backend
from pytest_graphcapture.engine.capture import INJECTION, CaptureSettings, CuptiConflictError, capture_runner
from pytest_graphcapture.engine.decode_model import TinyDecodeRunner
from pytest_graphcapture.engine.loop import capture_engine_loop
from pytest_graphcapture.engine.observe import EagerCUDAGraph, observation_mode
from pytest_graphcapture.summary.platform import graph_hooks


class Engine:
    """An engine's start-up loop: per batch size two warmups, then the capture; largest first."""

    def __init__(self, device: torch.device, graph_options: Optional[dict] = None) -> None:
        self.device = device
        self.weight = torch.randn(64, 64, device=device)
        self.inputs = torch.randn(8, 64, device=device)
        self.graph_options = graph_options or {}
        self.patched_during: list[bool] = []

    def forward(self, batch_size: int) -> torch.Tensor:
        return torch.relu(self.inputs[:batch_size] @ self.weight) + 1

    def capture(self) -> None:
        graph_class = torch.cuda.CUDAGraph
        for bs in (4, 2):
            for _ in range(2):
                self.forward(bs)
            graph = torch.cuda.CUDAGraph()
            self.patched_during.append(_wrapped(graph_class))
            with torch.cuda.graph(graph, **self.graph_options):
                self.forward(bs)


#: Each graph class's own capture_begin (torch's; the CPU stand-in's), before any loop ran.
_OWN_BEGIN = {cls: vars(cls).get("capture_begin") for cls in (torch.cuda.CUDAGraph, EagerCUDAGraph)}


def _wrapped(graph_class: type) -> bool:
    """Whether ``graph_class.capture_begin`` is not the class's own (the patching path wrapped it)."""
    return vars(graph_class).get("capture_begin") is not _OWN_BEGIN.get(graph_class)


def _settings(folder: str, device: torch.device) -> CaptureSettings:
    platform = detect_platform(device) if device.type == "cuda" else "cpu"
    return CaptureSettings(out_dir=Path(folder), platform=platform)


def _run_engine(device: torch.device, folder: str, engine: Engine) -> Any:
    return capture_engine_loop(
        engine.capture,
        forward=(engine, "forward"),
        key=lambda bs: bs,
        device=device,
        settings=_settings(folder, device),
    )


def same_attributes(before: dict, after: dict) -> bool:
    """Every attribute of ``before`` is the same object ``after``; new ones are only submodules torch imported lazily."""
    if any(after.get(name, before) is not value for name, value in before.items()):
        return False
    return all(isinstance(after[name], type(torch)) for name in after.keys() - before.keys())


def hooks(device: torch.device) -> tuple[dict, bool]:
    cuda_before = dict(vars(torch.cuda))
    graph_class_before = dict(vars(torch.cuda.CUDAGraph))
    engine = Engine(device)
    with tempfile.TemporaryDirectory() as folder:
        result = _run_engine(device, folder, engine)
    unpatched = same_attributes(cuda_before, dict(vars(torch.cuda)))
    unpatched = unpatched and dict(vars(torch.cuda.CUDAGraph)) == graph_class_before
    available = graph_hooks(torch) is not None
    mode = observation_mode(real_graphs=device.type == "cuda")
    sources = {str(k.key): k.summary.kernel_source if k.summary is not None else None for k in result}
    answers = {
        "torch": torch.__version__,
        "hooks_available": available,
        "mode": mode,
        "graph_class_patched_during_the_loop": any(engine.patched_during),
        "torch_cuda_unpatched_after": unpatched,
        "keys": len(result.keys),
        "kernel_source": sources,
    }
    ok = unpatched and len(result.keys) == 2 and (mode == "hooks") == available
    ok = ok and (not any(engine.patched_during) if mode == "hooks" else True)
    if device.type == "cuda":
        ok = ok and all(source in ("graph-data", "graph", "replay") for source in sources.values())
    return answers, ok


def _refusal(run: Any) -> dict:
    try:
        run()
    except CuptiConflictError as exc:
        return {"refused": True, "message": str(exc)}
    except Exception as exc:  # any other ending is an answer too
        return {"refused": False, "ended_with": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
    return {"refused": False, "captured": True}


def cupti(device: torch.device) -> tuple[dict, bool]:
    if device.type == "cuda":
        torch.cuda.init()  # the driver is up before the variable is set: nothing is injected
    answers: dict = {}
    previous = os.environ.get(INJECTION)
    os.environ[INJECTION] = "/nonexistent/libkernel_recorder.so"
    try:
        with tempfile.TemporaryDirectory() as folder:
            settings = _settings(folder, device)
            answers["runner"] = _refusal(
                lambda: capture_runner(TinyDecodeRunner((1, 2), device=device), make_backend(device), settings)
            )
            answers["engine_loop"] = _refusal(lambda: _run_engine(device, folder, Engine(device)))
    finally:
        if previous is None:
            os.environ.pop(INJECTION, None)
        else:
            os.environ[INJECTION] = previous
    refused = device.type == "cuda"
    ok = all(answers[name]["refused"] is refused for name in ("runner", "engine_loop"))
    if refused:
        ok = ok and all(INJECTION in answers[name]["message"] for name in ("runner", "engine_loop"))
        if "annotation_config" in inspect.signature(torch.cuda.graph).parameters:
            options = {"enable_annotations": True, "annotation_config": {"backend": "cupti"}}
            with tempfile.TemporaryDirectory() as folder:
                ended = _refusal(lambda: _run_engine(device, folder, Engine(device, options)))
            answers["cupti_annotations"] = ended
            ok = ok and not ended.get("captured", False)  # never a result, whichever line ended it
        else:
            answers["cupti_annotations"] = f"torch {torch.__version__} has no annotation_config"
    else:
        answers["cupti_annotations"] = "no GPU (dry run)"
    return {"device": str(device), "answers": answers}, ok


class PiecewiseEngine:
    """An engine whose forward holds its graphs: per batch size, three pieces captured inside the forward."""

    PIECES = 3

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.inputs = torch.randn(8, 64, device=device)
        self.weights = [torch.randn(64, 64, device=device) for _ in range(self.PIECES)]
        self.capturing = False
        self.graphs: list[Any] = []  # kept alive, as an engine keeps its graphs

    def forward(self, batch_size: int) -> torch.Tensor:
        x = self.inputs[:batch_size]
        for i, weight in enumerate(self.weights):
            if self.capturing:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    x = torch.relu(x @ weight)
                self.graphs.append(graph)
            else:
                x = torch.relu(x @ weight)
            if i < self.PIECES - 1:
                x = torch.softmax(x, dim=-1)  # run eagerly between the pieces
        return x

    def capture(self) -> None:
        for bs in (4, 2):
            for _ in range(2):
                self.forward(bs)
            self.capturing = True
            self.forward(bs)
            self.capturing = False


def pieces(device: torch.device) -> tuple[dict, bool]:
    cuda_before = dict(vars(torch.cuda))
    graph_class_before = dict(vars(torch.cuda.CUDAGraph))
    engine = PiecewiseEngine(device)
    with tempfile.TemporaryDirectory() as folder:
        result = capture_engine_loop(
            engine.capture,
            forward=(engine, "forward"),
            key=lambda bs: bs,
            device=device,
            settings=_settings(folder, device),
        )
    unpatched = same_attributes(cuda_before, dict(vars(torch.cuda)))
    unpatched = unpatched and dict(vars(torch.cuda.CUDAGraph)) == graph_class_before
    per_key = {}
    for key_result in result:
        summary = key_result.summary
        graphs = summary.graphs if summary is not None and summary.graphs else []
        per_key[str(key_result.key)] = {
            "graphs": len(graphs),
            "kernel_source": summary.kernel_source if summary is not None else None,
            "kernels_per_graph": [len(graph.kernels) for graph in graphs],
            "ops_per_graph": [len(graph.ops) for graph in graphs],
        }
    answers = {
        "torch": torch.__version__,
        "keys": len(result.keys),
        "per_key": per_key,
        "torch_cuda_unpatched_after": unpatched,
    }
    ok = unpatched and len(result.keys) == 2 and all(v["graphs"] == PiecewiseEngine.PIECES for v in per_key.values())
    ok = ok and all(all(n > 0 for n in v["ops_per_graph"]) for v in per_key.values())
    if device.type == "cuda":
        ok = ok and all(all(n > 0 for n in v["kernels_per_graph"]) for v in per_key.values())
    return answers, ok


class CompiledEngine:
    """A decode engine whose model is ``torch.compile(mode="reduce-overhead")``: per size one warmup call, then the capture call."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.inputs = torch.randn(8, 64, device=device)
        self.weight = torch.randn(64, 64, device=device)
        # On CPU the matmul alone: inductor emits no C++ kernel, so no compiler is needed for the dry run.
        body = (
            (lambda x: torch.relu(x @ self.weight)) if device.type == "cuda" else (lambda x: torch.mm(x, self.weight))
        )
        self.model = torch.compile(body, mode="reduce-overhead", dynamic=False)

    def forward(self, batch_size: int) -> torch.Tensor:
        return self.model(self.inputs[:batch_size])

    def capture(self, profiler: Any) -> None:
        for bs in (4, 2):
            self.forward(bs)  # inductor's warmup call (the first on a device also primes the tree's pool)
            profiler.step()
            self.forward(bs)  # the call that records the size's graph
            profiler.step()


def compiled(device: torch.device) -> tuple[dict, bool]:
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1  # no pool of compile workers to start inside a 30 s step
    engine = CompiledEngine(device)
    answers: dict = {"torch": torch.__version__, "warmups": 1}
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        try:
            result = capture_engine_loop(
                engine.capture,
                forward=(engine, "forward"),
                key=lambda bs: bs,
                device=device,
                settings=_settings(folder, device),
                warmups=1,
            )
        except Exception as exc:
            answers.update(refused=True, message=f"{type(exc).__name__}: {str(exc).splitlines()[0][:500]}")
            result = None
    if result is not None:
        per_key = {}
        for key_result in result:
            summary = key_result.summary
            graphs = key_result.graph if isinstance(key_result.graph, tuple) else (key_result.graph,)
            per_key[str(key_result.key)] = {
                "graphs": len(graphs),
                "kernel_source": summary.kernel_source if summary is not None else None,
                "kernels": sum(k["count"] for k in summary.kernels) if summary is not None else 0,
            }
        answers.update(refused=False, keys=len(result.keys), per_key=per_key)
    if device.type == "cuda":
        ok = not answers["refused"] and answers["keys"] == 2
        ok = ok and all(
            v["graphs"] == 1 and v["kernels"] > 0 and v["kernel_source"] in ("graph-data", "graph", "replay")
            for v in answers["per_key"].values()
        )
    else:  # inductor keeps CPU graphs out of CUDA graphs: the capture forward holds none, refused saying so
        ok = answers["refused"] and "captures no graph on CPU" in answers["message"]
    return answers, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=("hooks", "cupti", "pieces", "compiled"))
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"gpu_engine_probe.py: no GPU visible to torch {torch.__version__}; use --device cpu", file=sys.stderr)
        return 2
    device = torch.device("cuda", torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    answers, ok = {"hooks": hooks, "cupti": cupti, "pieces": pieces, "compiled": compiled}[args.what](device)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(answers, indent=2, sort_keys=True, default=str) + "\n")
    print(json.dumps(answers, indent=2, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
