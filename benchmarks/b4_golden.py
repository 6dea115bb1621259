"""B4 — the golden check of the reference engine's 36 batch sizes against reading their files.

Set-up (untimed): the embedded runner is captured on CPU at
``default_batch_sizes(256)`` (1, 2, 4, 8, 12, 16, 24, …, 256: 36 sizes) in
summary-only mode, and each summary is written as its golden the way
``--update-golden`` writes it (normalized to the check level, ``golden.write_golden``
at ``golden.golden_path``), into a temporary golden dir.

Timed, interleaved:

* ``read`` — for the 36 files: ``Path.read_bytes`` + ``json.loads``: the floor;
* ``check`` — the golden gate itself, :func:`pytest_graphcapture.golden.gate.check_result`,
  the function the ``golden`` fixture calls (no update, no out-dir, no postprocess
  hook): per key the level check, ``normalized(level)``, ``to_dict()``, the golden
  path, ``parse_golden_file`` (regular-file check, duplicate-key detection), the
  equal-content fast path and the launch budget (every key matches; the benchmark
  asserts it).  The gate keeps the cyclic GC off while it checks a key; the floor
  runs as any caller's ``json.loads`` would, with the GC on.

Calling the gate rather than a pytester run keeps pytest's own start-up and
collection (hundreds of ms, very noisy on 2 cores) out of a measurement of a few ms.
"""

from __future__ import annotations

import json
import shutil
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from common import Row, Section, fmt_seconds, median, progress, rotated, stderr_to

NODEID = "tests/test_decode.py::test_decode_graphs"
LEVEL = "name"  # the default of --golden-level


def build_goldens(batch_sizes: Sequence[int], golden_dir: Path, work_dir: Path) -> tuple[Any, list[Path]]:
    """Capture the runner at ``batch_sizes`` and write each key's golden; return the result and the paths."""
    from pytest_graphcapture.engine.backend import make_backend
    from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
    from pytest_graphcapture.engine.decode_model import TinyDecodeRunner
    from pytest_graphcapture.golden import store

    if golden_dir.exists():
        shutil.rmtree(golden_dir)
    runner = TinyDecodeRunner(batch_sizes, device="cpu")
    with stderr_to(work_dir / "b4_stderr.log"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = capture_runner(
            runner, make_backend("cpu"), CaptureSettings(trace="off", summarize=True, platform="cpu", level="exact")
        )
    paths = []
    for key_result in result:
        summary = key_result.summary
        path = store.golden_path(golden_dir, "cpu", NODEID, summary.key)
        store.write_golden(path, summary.normalized(LEVEL).to_dict())
        paths.append(path)
    return result, paths


def time_read(paths: Sequence[Path]) -> float:
    """Seconds to read and parse every golden file (the floor)."""
    started = time.perf_counter()
    for path in paths:
        json.loads(path.read_bytes())
    return time.perf_counter() - started


def time_check(result: Any, golden_dir: Path) -> float:
    """Seconds for the golden gate to check every key against its matching golden."""
    from pytest_graphcapture.golden.gate import CheckOptions, check_result
    from pytest_graphcapture.golden.store import golden_folder

    started = time.perf_counter()
    outcome = check_result(
        result,
        golden_dir=golden_dir,
        folder=golden_folder(golden_dir, "cpu", NODEID),
        options=CheckOptions(level=LEVEL),
    )
    seconds = time.perf_counter() - started
    if outcome.failed:
        raise RuntimeError(f"B4: keys do not match their own goldens: {[k.lines for k in outcome.failed]}")
    return seconds


def run(*, rounds: int, batch_sizes: Sequence[int], work_dir: Path) -> Section:
    """Interleaved rounds of read vs check; one row with the ratio."""
    section = Section()
    golden_dir = work_dir / "b4_goldens"
    progress(f"B4: capturing the embedded runner at {len(batch_sizes)} batch sizes and writing goldens")
    result, paths = build_goldens(batch_sizes, golden_dir, work_dir)
    total_bytes = sum(p.stat().st_size for p in paths)
    time_read(paths)
    time_check(result, golden_dir)  # warm imports and caches once
    times: dict[str, list[float]] = {"read": [], "check": []}
    for r in range(rounds):
        for variant in rotated(("read", "check"), r):
            times[variant].append(time_read(paths) if variant == "read" else time_check(result, golden_dir))
    read_s, check_s = median(times["read"]), median(times["check"])
    progress(f"B4: read {fmt_seconds(read_s)}, check {fmt_seconds(check_s)} (medians of {rounds})")
    shutil.rmtree(golden_dir, ignore_errors=True)
    section.notes.append(
        f"B4: {len(paths)} goldens ({total_bytes / 1024:.0f} KiB in all; batch sizes "
        f"{batch_sizes[0]}…{batch_sizes[-1]}), level {LEVEL}, {rounds} interleaved rounds, medians"
    )
    section.rows.append(
        Row(
            "B4",
            f"golden check of {len(paths)} keys (all equal)",
            fmt_seconds(check_s),
            f"read + json.loads {fmt_seconds(read_s)}",
            check_s / read_s if read_s else None,
            2.0,
        )
    )
    return section
