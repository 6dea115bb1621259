"""B2 (summarize throughput and memory) and B3 (HTA as the peer) over the same trace files.

For each file, each round runs — in a rotated order — the parse floor (gzip +
stdlib ``json.load``), our ``summarize_trace_file`` and, when HTA is available,
HTA's ``Trace(trace_dir=…).parse_traces()``; each in its own fresh process
(``child.py``), which reports the seconds of the load alone and its peak memory.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

from common import REPO, Row, Section, fmt_bytes, fmt_seconds, median, progress, rotated

CHILD = Path(__file__).resolve().parent / "child.py"
CHILD_TIMEOUT_S = 1800


@dataclass
class TraceFile:
    """A trace to measure: its path, a short label, its sizes and how many rounds it gets."""

    path: Path
    label: str
    rounds: int
    compressed: int = 0
    uncompressed: int = 0
    results: dict = field(default_factory=dict)  # mode -> list of child results
    errors: dict = field(default_factory=dict)  # mode -> first error
    modes: tuple = ("floor", "ours", "hta")  # what is measured on it
    max_bytes: Optional[int] = None  # the size cap for our summarize, when the file is over the default


#: B3's target: our summarize ÷ HTA's load.
B3_TARGET = 0.20
#: Peak RSS allowed for summarizing the ≥ 2 GiB synthetic trace.
HUGE_PEAK_TARGET = 1024**3


def uncompressed_size(path: Path) -> int:
    """Bytes after gunzip (streamed; the file is not held in memory)."""
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    if not gz:
        return path.stat().st_size
    total = 0
    with gzip.open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            total += len(block)
    return total


def _hta_dir(work_dir: Path, trace: TraceFile) -> Path:
    """A folder holding only this trace (HTA reads every trace in its trace_dir): a symlink, else a copy."""
    folder = work_dir / "hta_dirs" / trace.path.name.split(".")[0]
    target = folder / trace.path.name
    if target.exists() or target.is_symlink():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    try:
        os.symlink(trace.path.resolve(), target)
    except OSError:
        shutil.copyfile(trace.path, target)
    return folder


def _run_child(python: Path, mode: str, trace: TraceFile, hta_dir: Optional[Path]) -> dict:
    argv = [str(python), str(CHILD), mode, str(trace.path)] + ([str(hta_dir)] if hta_dir else [])
    env = dict(os.environ)
    if mode == "hta":
        env.pop("PYTHONPATH", None)  # nothing of ours (or of our venv) leaks into HTA's interpreter
    else:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    if trace.max_bytes:
        env["GRAPH_CAPTURE_MAX_TRACE_BYTES"] = str(trace.max_bytes)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    lines = [line for line in done.stdout.strip().splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()
        return {"error": f"exit {done.returncode}: {tail[-1] if tail else 'no output'}"}
    return json.loads(lines[-1])


def measure(traces: Sequence[TraceFile], *, hta_python: Optional[Path], work_dir: Path) -> None:
    """Run every (file, mode) the file's number of rounds, interleaved; fill ``results``/``errors``."""
    for index, trace in enumerate(traces):
        modes = [m for m in trace.modes if m != "hta" or hta_python]
        trace.compressed = trace.path.stat().st_size
        trace.uncompressed = uncompressed_size(trace.path)
        hta_dir = _hta_dir(work_dir, trace) if hta_python else None
        for r in range(trace.rounds):
            for mode in rotated(modes, r + index):
                if mode in trace.errors:
                    continue
                python = hta_python if mode == "hta" else Path(sys.executable)
                result = _run_child(python, mode, trace, hta_dir if mode == "hta" else None)
                if "error" in result:
                    trace.errors[mode] = result["error"]
                    continue
                trace.results.setdefault(mode, []).append(result)
            done = ", ".join(f"{m} {trace.results[m][-1]['seconds']:.3f}s" for m in modes if trace.results.get(m))
            progress(f"B2/B3: {trace.label} round {r + 1}/{trace.rounds}: {done}")


def _med(trace: TraceFile, mode: str, field_name: str) -> Optional[float]:
    return median([r[field_name] for r in trace.results.get(mode, [])])


def rows(traces: Sequence[TraceFile], *, hta_note: str) -> Section:
    """B2 and B3 rows for every file; the files measured alone (``modes == ("ours",)``) get scale rows."""
    section = Section()
    b3: list[Row] = []
    reference: Optional[TraceFile] = None
    for trace in traces:
        size = f"{fmt_bytes(trace.compressed)} gz, {fmt_bytes(trace.uncompressed)} JSON"
        floor_s, ours_s, hta_s = (_med(trace, m, "seconds") for m in ("floor", "ours", "hta"))
        ours_peak, floor_peak, hta_peak = (_med(trace, m, "peak_delta") for m in ("ours", "floor", "hta"))
        n = len(trace.results.get("ours", []))
        if ours_s is None:
            section.rows.append(
                Row("B2", f"summarize {trace.label} ({size})", "failed", note=trace.errors.get("ours", "no result"))
            )
            continue
        if "floor" not in trace.modes:
            section.rows += _scale_rows(trace, reference, size, n)
            continue
        reference = trace if reference is None or trace.uncompressed > reference.uncompressed else reference
        section.rows.append(
            Row(
                "B2",
                f"summarize_trace_file {trace.label} ({size}), {n} runs",
                fmt_seconds(ours_s),
                f"parse floor {fmt_seconds(floor_s)}",
                ours_s / floor_s if floor_s else None,
                1.25,
                trace.errors.get("floor", ""),
            )
        )
        hta_ratio = f"; HTA {hta_peak / trace.uncompressed:.2f}× the JSON size" if hta_peak else ""
        section.rows.append(
            Row(
                "B2",
                f"peak memory of summarize {trace.label}",
                fmt_bytes(ours_peak),
                f"parse floor {fmt_bytes(floor_peak)}" if floor_peak else "parse floor: no result",
                ours_peak / floor_peak if floor_peak and ours_peak is not None else None,
                1.25,
                f"{ours_peak / trace.uncompressed:.2f}× the JSON size (floor "
                f"{(floor_peak or 0) / trace.uncompressed:.2f}×{hta_ratio})",
            )
        )
        if "hta" in trace.errors or (hta_s is None and hta_note):
            reason = trace.errors.get("hta") or hta_note
            b3.append(
                Row(
                    "B3",
                    f"ours ÷ HTA load, {trace.label}",
                    fmt_seconds(ours_s),
                    "HTA: no result",
                    None,
                    B3_TARGET,
                    reason,
                )
            )
        elif hta_s is not None:
            b3.append(
                Row(
                    "B3",
                    f"ours ÷ HTA load, {trace.label}",
                    fmt_seconds(ours_s),
                    f"HTA {fmt_seconds(hta_s)}",
                    ours_s / hta_s,
                    B3_TARGET,
                )
            )
    section.rows += b3
    return section


def _scale_rows(trace: TraceFile, reference: Optional[TraceFile], size: str, n: int) -> list[Row]:
    """Time, peak RSS and growth of a file too large for the whole-file floor, next to the largest other file."""
    ours_s = _med(trace, "ours", "seconds")
    peak_rss = _med(trace, "ours", "peak_rss")
    peak_delta = _med(trace, "ours", "peak_delta")
    out = []
    ref_s = _med(reference, "ours", "seconds") if reference else None
    growth = trace.uncompressed / reference.uncompressed if reference else None
    out.append(
        Row(
            "B2",
            f"summarize_trace_file {trace.label} ({size}), {n} runs",
            fmt_seconds(ours_s),
            f"{reference.label} × {growth:.1f} (its size ratio)" if reference and ref_s else "",
            ours_s / (ref_s * growth) if reference and ref_s else None,
            note="time per byte against the smaller trace: 1.00 = linear. No floor: a whole-file "
            "json.load of this file needs about 6× its size in memory",
        )
    )
    out.append(
        Row(
            "B2",
            f"peak RSS of summarize {trace.label} (whole process)",
            fmt_bytes(peak_rss),
            "1 GiB",
            peak_rss / HUGE_PEAK_TARGET if peak_rss else None,
            1.0,
            f"the load itself added {fmt_bytes(peak_delta)}; the size cap raised to "
            f"{fmt_bytes(trace.max_bytes or 0)} for this file (GRAPH_CAPTURE_MAX_TRACE_BYTES)",
        )
    )
    ref_peak = _med(reference, "ours", "peak_delta") if reference else None
    if ref_peak and peak_delta is not None:
        out.append(
            Row(
                "B2",
                f"memory growth, {trace.label} ÷ {reference.label}",
                fmt_bytes(peak_delta),
                f"{fmt_bytes(ref_peak)} for {fmt_bytes(reference.uncompressed)} of JSON",
                peak_delta / ref_peak,
                note=f"the file is {growth:.1f}× larger; the summary keeps a few dozen bytes per op, launch "
                "and kernel, nothing of the other events",
            )
        )
    return out
