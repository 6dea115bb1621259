"""B6 — gating an engine's own capture loop against gating it through an adapter.

The same engine (``examples/adapter/mini_engine.py``: the embedded decoder behind an
engine-style graph runner, every batch size in two variants) is captured two ways,
summary-only (``CaptureSettings(trace="off", summarize=True)``), interleaved round by round
in this process:

* ``adapter`` — ``capture_runner(EngineAdapter(engine), make_backend(device), settings)``:
  the plugin's own capture loop over the bodies the adapter hands it;
* ``engine-loop`` — ``capture_engine_loop(lambda profiler: engine.capture(use_graphs=True,
  profiler=profiler), forward=(engine, "forward_decode"), key=...)``: the engine's own loop,
  observed (forward and graph capture calls wrapped, the step contract checked per call; on
  CPU the CUDA calls on eager stand-ins).

Each measurement gets a fresh engine built outside the timing.  Target: engine-loop ÷ adapter
≤ 1.05 (the observer costs next to nothing beside the profiled forwards).
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from common import REPO, Row, Section, fmt_seconds, median, progress, rotated, stderr_to

TARGET = 1.05


def _variants(device: str, batch_sizes: Sequence[int]) -> dict[str, Callable[[Any], Any]]:
    from adapter import EngineAdapter

    from pytest_graphcapture.engine.backend import make_backend
    from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
    from pytest_graphcapture.engine.loop import capture_engine_loop

    settings = CaptureSettings(trace="off", summarize=True)

    def adapter(engine: Any) -> Any:
        return capture_runner(EngineAdapter(engine), make_backend(device), settings)

    def engine_loop(engine: Any) -> Any:
        return capture_engine_loop(
            lambda profiler: engine.capture(use_graphs=True, profiler=profiler),
            forward=(engine, "forward_decode"),
            key=lambda bs, variant: (bs, variant),
            runner_name="MiniEngine",
            device=device,
            settings=settings,
        )

    return {"adapter": adapter, "engine-loop": engine_loop}


def run(
    *, rounds: int, batch_sizes: Sequence[int], device: str, work_dir: Path, threads: Optional[int] = None
) -> Section:
    """Time both ways of capturing the example engine, ``rounds`` interleaved rounds; medians.

    ``threads`` sets ``torch.set_num_threads`` as for B1; Kineto's stderr lines go to a log in ``work_dir``.
    """
    import torch

    sys.path.insert(0, str(REPO / "examples" / "adapter"))
    from mini_engine import MiniEngineGraphRunner

    if threads:
        torch.set_num_threads(threads)
    with stderr_to(work_dir / "b6_stderr.log"):
        return _measure(MiniEngineGraphRunner, rounds=rounds, batch_sizes=batch_sizes, device=device)


def _measure(engine_class: Any, *, rounds: int, batch_sizes: Sequence[int], device: str) -> Section:

    section = Section()
    variants = _variants(device, batch_sizes)

    def fresh() -> Any:
        return engine_class(device=device, capture_bs=batch_sizes)

    keys = {name: len(variant(fresh()).keys) for name, variant in variants.items()}  # warm-up, and a check
    assert len(set(keys.values())) == 1, f"the two ways captured different key counts: {keys}"
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds):
        for name in rotated(list(variants), r):
            engine = fresh()
            gc.collect()
            started = time.perf_counter()
            variants[name](engine)
            times[name].append(time.perf_counter() - started)
    adapter, loop = median(times["adapter"]), median(times["engine-loop"])
    progress(f"B6: adapter {fmt_seconds(adapter)}, engine loop {fmt_seconds(loop)}")
    what = f"{keys['adapter']} keys (bs {','.join(map(str, batch_sizes))} × 2 variants) on {device}"
    section.rows.append(
        Row(
            "B6",
            f"engine's own loop, summary-only, {what}",
            fmt_seconds(loop),
            f"adapter {fmt_seconds(adapter)}",
            loop / adapter if loop and adapter else None,
            TARGET,
            "examples/adapter/mini_engine.py captured by graph_capture.engine and by its adapter",
        )
    )
    section.notes.append(
        f"B6: {rounds} interleaved rounds in this process, a fresh engine per measurement (built outside the "
        "timing), medians, gc.collect() before each"
    )
    return section
