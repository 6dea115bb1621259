"""B1 — capture cost of the embedded runner: bare loops against our capture modes.

B1 runs at two sizes of the embedded decoder (:data:`MODELS`): the ``tiny`` model
the examples capture (hidden 64, 2 layers), where every per-key fixed cost is huge
next to the model's own time, and a ``realistic`` one (hidden 1024, 8 layers,
Llama-like proportions), where per-key fixed costs weigh about as they do on a
real engine.  The summary-only target (≤ 1.10 × the plain scheduled profiler)
is judged at the realistic size; the tiny model's ratio is reported beside it.

Variants (each a full capture of every key of a ``TinyDecodeRunner``, built
outside the timing: a fresh one per measurement for the tiny model; for the
realistic one a single runner reused by every measurement, since drawing its
~156 M weights takes about a second and the eager capture keeps no state):

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

import gc
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from common import Row, Section, fmt_seconds, median, progress, rotated, stderr_to

#: The decoder sizes B1 runs at: ``DecoderConfig`` fields (the rest keep their defaults).
MODELS: dict[str, dict[str, int]] = {
    "tiny": {},  # DecoderConfig's defaults: what the examples and the tests capture
    "realistic": {
        "hidden_size": 1024,
        "num_layers": 8,
        "num_heads": 16,
        "num_kv_heads": 4,
        "intermediate_size": 2816,
        "vocab_size": 32000,
        "max_seq_len": 128,
    },
}

#: The model the summary-only target is judged at.
TARGET_MODEL = "realistic"

SUMMARY_TARGET = 1.10

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


def _start() -> float:
    """Collect the garbage of earlier measurements, then start the clock.

    A finished ``torch.profiler.profile`` is a reference cycle that keeps its last
    cycle's results, and freeing them costs milliseconds.  Without this collection
    the variants that allocate little (the bare and plain loops) never set off the
    collector, and whichever variant next does would pay for their profiles too.
    """
    gc.collect()
    return time.perf_counter()


def _bare_loop(runner: Any, backend: Any, stepper: Optional[_PlainStepper]) -> None:
    for key in runner.capture_keys(0):
        backend.capture_one(
            key,
            runner.forward_for(key),
            profiler=stepper,
            profiling=stepper is not None,
            post_warmup=runner.post_warmup,
        )


def decoder_config(model: str) -> Any:
    """The ``DecoderConfig`` of one of :data:`MODELS`."""
    from pytest_graphcapture.engine.decode_model import DecoderConfig

    return DecoderConfig(**MODELS[model])


def describe_model(model: str) -> str:
    """``tiny model (hidden 64, 2 layers)``: how rows name a model size."""
    config = decoder_config(model)
    return f"{model} model (hidden {config.hidden_size}, {config.num_layers} layers)"


def make_runner(model: str, batch_sizes: Sequence[int], device: str) -> Any:
    """A ``TinyDecodeRunner`` of ``model``'s size for ``batch_sizes``."""
    from pytest_graphcapture.engine.decode_model import TinyDecodeRunner

    return TinyDecodeRunner(batch_sizes, device=device, config=decoder_config(model))


def run_variant(
    variant: str,
    batch_sizes: Sequence[int],
    device: str,
    out_dir: Path,
    *,
    model: str = "tiny",
    runner: Any = None,
) -> float:
    """Seconds for one full capture in ``variant``, of ``runner`` or else a fresh runner of ``model``."""
    import warnings

    from pytest_graphcapture.engine.backend import make_backend
    from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
    from pytest_graphcapture.naming import trace_file_name

    if runner is None:
        runner = make_runner(model, batch_sizes, device)
    backend = make_backend(device)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    platform = "cpu" if backend.device.type == "cpu" else "bench-gpu"
    keys = {k.batch_size: k for k in runner.capture_keys(0)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if variant == "bare":
            started = _start()
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
            started = _start()
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
            started = _start()
            result = capture_runner(runner, backend, settings)
            if len(result) != len(keys) or any(kr.summary is None for kr in result):
                raise RuntimeError(f"B1 {variant}: capture returned {len(result)} of {len(keys)} summaries")
        backend.synchronize()
        seconds = time.perf_counter() - started
    backend.release()
    return seconds


def measure(
    model: str, *, rounds: int, batch_sizes: Sequence[int], device: str, work_dir: Path
) -> dict[str, Optional[float]]:
    """Interleaved rounds of every variant at one model size; the median seconds of each."""
    reuse = make_runner(model, batch_sizes, device) if model != "tiny" else None
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    scratch = work_dir / "b1"

    def once(variant: str) -> float:
        return run_variant(variant, batch_sizes, device, scratch / variant, model=model, runner=reuse)

    progress(f"B1 {model}: warming torch and the profiler (one untimed capture per variant), device {device}")
    for variant in VARIANTS:
        once(variant)
    for r in range(rounds):
        for variant in rotated(VARIANTS, r):
            times[variant].append(once(variant))
        progress(f"B1 {model}: round {r + 1}/{rounds}: " + ", ".join(f"{v} {times[v][-1]:.3f}s" for v in VARIANTS))
    shutil.rmtree(scratch, ignore_errors=True)
    return {v: median(times[v]) for v in VARIANTS}


def run(
    *,
    plans: Sequence[tuple[str, Sequence[int], int]],
    device: str,
    work_dir: Path,
    threads: Optional[int] = None,
) -> Section:
    """B1 at each ``(model, batch sizes, rounds)`` of ``plans``: rows with medians and the ratios the issue asks for.

    ``threads`` sets ``torch.set_num_threads`` for the run (on a small shared CPU,
    intra-op threads only add scheduling jitter).  The summary-only target is set on
    the :data:`TARGET_MODEL` rows; every other size's ratio is reported beside it.
    """
    import torch

    section = Section()
    if threads:
        torch.set_num_threads(threads)
    log = work_dir / "b1_stderr.log"
    measured: dict[str, dict[str, Optional[float]]] = {}
    with stderr_to(log):
        for model, batch_sizes, rounds in plans:
            measured[model] = measure(model, rounds=rounds, batch_sizes=batch_sizes, device=device, work_dir=work_dir)
            config = decoder_config(model)
            sizes = ",".join(str(b) for b in batch_sizes)
            runner_note = "one runner reused" if model != "tiny" else "a fresh runner per measurement"
            section.notes.append(
                f"B1 {describe_model(model)}: heads {config.num_heads} (KV {config.num_kv_heads}), "
                f"MLP {config.intermediate_size}, vocab {config.vocab_size}, max seq {config.max_seq_len}; "
                f"batch sizes {sizes} ({len(batch_sizes)} keys), {rounds} interleaved rounds, medians, "
                f"{runner_note}"
            )
    section.notes.append(f"B1: device {device}, torch threads {torch.get_num_threads()}; Kineto's stderr in {log}")
    summary_ratios = {model: _ratio(med, "ours-summary", "plain-profiler") for model, med in measured.items()}
    for (model, batch_sizes, _), med in zip(plans, measured.values()):
        others = [f"{describe_model(m)}: {r:.2f}" for m, r in summary_ratios.items() if m != model and r is not None]
        section.rows += _rows(model, med, len(batch_sizes), others)
    return section


def _ratio(med: dict[str, Optional[float]], a: str, b: str) -> Optional[float]:
    x, y = med[a], med[b]
    return x / y if x and y else None


def _rows(model: str, med: dict[str, Optional[float]], keys: int, others: list[str]) -> list[Row]:
    """The B1 rows of one model size; ``others`` names the other sizes' summary-only ratios."""
    label = describe_model(model)

    def row(what: str, value: Optional[float], *rest: Any, **kw: Any) -> Row:
        return Row("B1", f"{label}: {what}", fmt_seconds(value), *rest, **kw)

    def ratio(a: str, b: str) -> Optional[float]:
        return _ratio(med, a, b)

    if model == TARGET_MODEL:
        summary_target, summary_note = SUMMARY_TARGET, "; ".join(others)
    else:
        summary_target = None
        summary_note = f"reported only: the ≤ {SUMMARY_TARGET:.2f} target is judged at the {TARGET_MODEL} size"
    rows = [
        row(DESCRIPTIONS["bare"], med["bare"]),
        row(DESCRIPTIONS["plain-profiler"], med["plain-profiler"], "bare loop", ratio("plain-profiler", "bare")),
        row(
            DESCRIPTIONS["plain-export-all"],
            med["plain-export-all"],
            "bare loop",
            ratio("plain-export-all", "bare"),
            note="reference: ×1.27 (37 s → 47 s)",
        ),
        row(
            DESCRIPTIONS["ours-summary"],
            med["ours-summary"],
            "plain scheduled profiler",
            ratio("ours-summary", "plain-profiler"),
            summary_target,
            note=summary_note,
        ),
        row(
            DESCRIPTIONS["ours-export-all"],
            med["ours-export-all"],
            "reference all-flags export",
            ratio("ours-export-all", "plain-export-all"),
            1.0,
            note="what users get by default",
        ),
        row(
            DESCRIPTIONS["ours-export-shapes"],
            med["ours-export-shapes"],
            "reference all-flags export",
            ratio("ours-export-shapes", "plain-export-all"),
            1.0,
            note="with --graph-capture-profiler-flags=none",
        ),
        row(
            "ours, per-bs export, all flags ÷ bare loop",
            med["ours-export-all"],
            "bare loop",
            ratio("ours-export-all", "bare"),
            note="compare the reference's ×1.27",
        ),
        row("ours, summary-only ÷ bare loop", med["ours-summary"], "bare loop", ratio("ours-summary", "bare")),
    ]
    for ours, plain, what in (
        ("ours-summary", "plain-profiler", "summary-only vs plain profiler"),
        ("ours-export-all", "plain-export-all", "all-flags export vs reference export"),
    ):
        a, b = med[ours], med[plain]
        if a is not None and b is not None:
            extra = (a - b) / keys
            rows.append(
                Row(
                    "B1",
                    f"{label}: ours' added time per key, {what}",
                    fmt_seconds(extra) if extra >= 0 else "-" + fmt_seconds(-extra),
                    note="absolute; grows with the ops recorded per key (the layers), not with the width",
                )
            )
    return rows
