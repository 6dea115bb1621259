"""B1 — capture cost of the embedded runner: bare loops against our capture modes.

Variants (each a full capture of every key of a fresh ``TinyDecodeRunner``, its
construction outside the timing):

* ``bare`` — the per-key sequence (2 warmups + capture, ``Backend.capture_one``
  of ``backend.make_backend(device)``) with no profiler at all;
* ``plain-profiler`` — the same loop stepping a bare ``torch.profiler.profile``
  with ``schedule(wait=2, warmup=0, active=1, repeat=0)``, ``record_shapes=True``
  and an ``on_trace_ready`` that does nothing (no export, no summary);
* ``plain-export-all`` — the same, with stack + FLOPs + memory recording and
  ``export_chrome_trace`` of every cycle: the reference engine's full-flag per-bs
  profiling, without anything of ours;
* ``ours-summary`` — ``capture_runner(..., CaptureSettings(trace="off", summarize=True))``;
* ``ours-export-shapes`` — ``CaptureSettings(trace="per-bs", summarize=True,
  profiler_flags=frozenset())`` (record_shapes only);
* ``ours-export-all`` — ``CaptureSettings(trace="per-bs", summarize=True,
  profiler_flags={"stack", "flops", "memory"})``, which is also what users get by
  default (``--graph-capture-profiler-flags`` defaults to ``all``).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from common import Row, Section, fmt_seconds, median, progress, rotated, stderr_to

ALL_FLAGS = frozenset({"stack", "flops", "memory"})

VARIANTS = ("bare", "plain-profiler", "plain-export-all", "ours-summary", "ours-export-shapes", "ours-export-all")

DESCRIPTIONS = {
    "bare": "bare loop, no profiler",
    "plain-profiler": "bare loop + plain scheduled profiler (record_shapes, no export, no summary)",
    "plain-export-all": "bare loop + plain scheduled profiler, stack+flops+memory, export per bs (reference engine)",
    "ours-summary": "ours, summary-only per-bs (trace=off, summarize)",
    "ours-export-shapes": "ours, per-bs export + summary, record_shapes only (flags=none)",
    "ours-export-all": "ours, per-bs export + summary, stack+flops+memory (= plugin default flags)",
}


class _PlainStepper:
    """Steps a bare scheduled torch profiler exactly where our wrapper would."""

    def __init__(self, prof: Any) -> None:
        self.prof = prof

    def step(self) -> None:
        self.prof.step()


def _plain_profile(device: Any, *, flags: frozenset, on_ready: Callable[[Any], None]) -> Any:
    import warnings

    from torch.profiler import profile, schedule

    from pytest_graphcapture.engine.profiling import profiler_activities

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about warmup=0; irrelevant here
        sched = schedule(wait=2, warmup=0, active=1, repeat=0)
    return profile(
        activities=profiler_activities(device),
        schedule=sched,
        on_trace_ready=on_ready,
        record_shapes=True,
        with_stack="stack" in flags,
        with_flops="flops" in flags,
        profile_memory="memory" in flags,
    )


def _bare_loop(runner: Any, backend: Any, stepper: Optional[_PlainStepper]) -> None:
    for key in runner.capture_keys(0):
        backend.capture_one(
            key,
            runner.forward_for(key),
            profiler=stepper,
            profiling=stepper is not None,
            post_warmup=runner.post_warmup,
        )


def run_variant(variant: str, batch_sizes: Sequence[int], device: str, out_dir: Path) -> float:
    """Seconds for one full capture of a fresh runner in ``variant``."""
    import warnings

    from pytest_graphcapture.engine.backend import make_backend
    from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
    from pytest_graphcapture.engine.decode_model import TinyDecodeRunner
    from pytest_graphcapture.naming import trace_file_name

    runner = TinyDecodeRunner(batch_sizes, device=device)
    backend = make_backend(device)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    platform = "cpu" if backend.device.type == "cpu" else "bench-gpu"
    keys = {k.batch_size: k for k in runner.capture_keys(0)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if variant == "bare":
            started = time.perf_counter()
            _bare_loop(runner, backend, None)
        elif variant in ("plain-profiler", "plain-export-all"):
            export = variant == "plain-export-all"
            flags = ALL_FLAGS if export else frozenset()
            order = iter(runner.capture_keys(0))

            def on_ready(prof: Any) -> None:
                key = next(order)
                if export:
                    prof.export_chrome_trace(str(out_dir / trace_file_name(key)))

            stepper = _PlainStepper(_plain_profile(backend.device, flags=flags, on_ready=on_ready))
            started = time.perf_counter()
            with stepper.prof:
                _bare_loop(runner, backend, stepper)
        else:
            settings = {
                "ours-summary": CaptureSettings(trace="off", summarize=True, out_dir=out_dir, platform=platform),
                "ours-export-shapes": CaptureSettings(
                    trace="per-bs", summarize=True, out_dir=out_dir, platform=platform, profiler_flags=frozenset()
                ),
                "ours-export-all": CaptureSettings(
                    trace="per-bs", summarize=True, out_dir=out_dir, platform=platform, profiler_flags=ALL_FLAGS
                ),
            }[variant]
            started = time.perf_counter()
            result = capture_runner(runner, backend, settings)
            if len(result) != len(keys) or any(kr.summary is None for kr in result):
                raise RuntimeError(f"B1 {variant}: capture returned {len(result)} of {len(keys)} summaries")
        backend.synchronize()
        seconds = time.perf_counter() - started
    backend.release()
    return seconds


def run(
    *, rounds: int, batch_sizes: Sequence[int], device: str, work_dir: Path, threads: Optional[int] = None
) -> Section:
    """Interleaved rounds of every variant; rows with medians and the ratios the issue asks for.

    ``threads`` sets ``torch.set_num_threads`` for the run (the embedded model is
    tiny: on a small shared CPU, intra-op threads only add scheduling jitter).
    """
    import torch

    section = Section()
    if threads:
        torch.set_num_threads(threads)
    log = work_dir / "b1_stderr.log"
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    with stderr_to(log):
        progress(f"B1: warming torch and the profiler (one untimed capture per variant), device {device}")
        for variant in VARIANTS:
            run_variant(variant, batch_sizes, device, work_dir / "b1" / variant)
        for r in range(rounds):
            for variant in rotated(VARIANTS, r):
                seconds = run_variant(variant, batch_sizes, device, work_dir / "b1" / variant)
                times[variant].append(seconds)
            progress(f"B1: round {r + 1}/{rounds}: " + ", ".join(f"{v} {times[v][-1]:.3f}s" for v in VARIANTS))
    shutil.rmtree(work_dir / "b1", ignore_errors=True)
    med = {v: median(times[v]) for v in VARIANTS}
    sizes = ",".join(str(b) for b in batch_sizes)
    section.notes.append(
        f"B1: embedded TinyDecodeRunner, batch sizes {sizes} ({len(batch_sizes)} keys), "
        f"device {device}, torch threads {torch.get_num_threads()}, {rounds} interleaved rounds, "
        f"medians; Kineto's stderr in {log}"
    )

    def ratio(a: str, b: str) -> Optional[float]:
        return med[a] / med[b] if med[a] and med[b] else None

    rows = section.rows
    rows.append(Row("B1", DESCRIPTIONS["bare"], fmt_seconds(med["bare"])))
    rows.append(
        Row(
            "B1",
            DESCRIPTIONS["plain-profiler"],
            fmt_seconds(med["plain-profiler"]),
            "bare loop",
            ratio("plain-profiler", "bare"),
        )
    )
    rows.append(
        Row(
            "B1",
            DESCRIPTIONS["plain-export-all"],
            fmt_seconds(med["plain-export-all"]),
            "bare loop",
            ratio("plain-export-all", "bare"),
            note="reference: ×1.27 (37 s → 47 s)",
        )
    )
    rows.append(
        Row(
            "B1",
            DESCRIPTIONS["ours-summary"],
            fmt_seconds(med["ours-summary"]),
            "plain scheduled profiler",
            ratio("ours-summary", "plain-profiler"),
            1.10,
        )
    )
    rows.append(
        Row(
            "B1",
            DESCRIPTIONS["ours-export-all"],
            fmt_seconds(med["ours-export-all"]),
            "reference all-flags export",
            ratio("ours-export-all", "plain-export-all"),
            1.0,
            note="what users get by default",
        )
    )
    rows.append(
        Row(
            "B1",
            DESCRIPTIONS["ours-export-shapes"],
            fmt_seconds(med["ours-export-shapes"]),
            "reference all-flags export",
            ratio("ours-export-shapes", "plain-export-all"),
            1.0,
            note="with --graph-capture-profiler-flags=none",
        )
    )
    rows.append(
        Row(
            "B1",
            "ours, per-bs export, all flags ÷ bare loop",
            fmt_seconds(med["ours-export-all"]),
            "bare loop",
            ratio("ours-export-all", "bare"),
            note="compare the reference's ×1.27",
        )
    )
    rows.append(
        Row(
            "B1",
            "ours, summary-only ÷ bare loop",
            fmt_seconds(med["ours-summary"]),
            "bare loop",
            ratio("ours-summary", "bare"),
        )
    )
    keys = len(batch_sizes)
    for ours, plain, what in (
        ("ours-summary", "plain-profiler", "summary-only vs plain profiler"),
        ("ours-export-all", "plain-export-all", "all-flags export vs reference export"),
    ):
        if med[ours] is not None and med[plain] is not None:
            extra = (med[ours] - med[plain]) / keys
            rows.append(
                Row(
                    "B1",
                    f"ours' added time per key, {what}",
                    fmt_seconds(extra) if extra >= 0 else "-" + fmt_seconds(-extra),
                    note="absolute; independent of the model's size",
                )
            )
    return section
