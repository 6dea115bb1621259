"""Shared pieces of the benchmarks: interleaved rounds, medians, rows of the final table, machine facts.

Every benchmark measures its variants *side by side in one run*: each round runs
every variant once, in an order rotated by one per round, so slow drift of the
machine (thermal, page cache, another process) hits every variant alike.  The
reported figure is the median over rounds.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional, Sequence

REPO = Path(__file__).resolve().parent.parent


def real_traces_dir() -> Path:
    """``$GRAPH_CAPTURE_REAL_TRACES``, else ``<repo>/../shared/testdata/real_traces`` (as the tests do)."""
    env = os.environ.get("GRAPH_CAPTURE_REAL_TRACES")
    return Path(env) if env else REPO.parent / "shared" / "testdata" / "real_traces"


def rotated(items: Sequence, round_index: int) -> list:
    """``items`` rotated left by ``round_index``: round r starts with variant r."""
    if not items:
        return []
    shift = round_index % len(items)
    return list(items[shift:]) + list(items[:shift])


def median(values: Sequence[float]) -> Optional[float]:
    """Median of the values, or None when there are none."""
    return statistics.median(values) if values else None


def fmt_seconds(value: Optional[float]) -> str:
    """Seconds with a unit that keeps three significant digits readable."""
    if value is None:
        return "n/a"
    if value >= 1.0:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.1f} ms"
    return f"{value * 1e6:.0f} µs"


def fmt_bytes(value: Optional[float]) -> str:
    """Bytes in MiB (or KiB when small)."""
    if value is None:
        return "n/a"
    if abs(value) >= 2**20:
        return f"{value / 2**20:.1f} MiB"
    return f"{value / 2**10:.1f} KiB"


@dataclass
class Row:
    """One line of the final table: a measured value, what it is divided by, and the target."""

    bench: str
    what: str
    value: str
    baseline: str = ""
    ratio: Optional[float] = None
    target: Optional[float] = None
    note: str = ""

    @property
    def verdict(self) -> str:
        if self.target is None or self.ratio is None:
            return ""
        return "met" if self.ratio <= self.target else "MISSED"

    def cells(self) -> list[str]:
        ratio = "" if self.ratio is None else f"{self.ratio:.2f}"
        target = "" if self.target is None else f"≤ {self.target:.2f}"
        return [self.bench, self.what, self.value, self.baseline, ratio, target, self.verdict, self.note]


HEADER = ["bench", "measurement", "median", "divided by", "ratio", "target", "verdict", "note"]


def markdown_table(rows: Sequence[Row]) -> str:
    """The rows as a GitHub Markdown table (pipes in cells escaped)."""

    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cell(c) for c in row.cells()) + " |" for row in rows]
    return "\n".join(lines)


def text_table(rows: Sequence[Row]) -> str:
    """The rows as an aligned plain-text table for the terminal."""
    table = [HEADER] + [row.cells() for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(HEADER))]
    out = []
    for index, r in enumerate(table):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


@dataclass
class Section:
    """A benchmark's rows plus free-text notes (skips, failures, configuration)."""

    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_total() -> str:
    """Total memory from /proc/meminfo, or 'unknown'."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    kib = int(line.split()[1])
                    return f"{kib / 2**20:.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return "unknown"


def machine_description(device: str) -> list[str]:
    """What the figures were measured on: cores, CPU, memory, Python, torch, device."""
    import torch

    gpu = ""
    if device.startswith("cuda") and torch.cuda.is_available():
        gpu = f", GPU {torch.cuda.get_device_name(torch.device(device))}"
    return [
        f"cores (nproc): {os.cpu_count()}",
        f"CPU: {cpu_model()}",
        f"memory: {memory_total()}",
        f"OS: {platform.system()} {platform.release()}",
        f"Python: {platform.python_version()} ({sys.executable})",
        f"torch: {torch.__version__}",
        f"capture device: {device}{gpu}",
    ]


@contextlib.contextmanager
def stderr_to(path: Path) -> Iterator[None]:
    """Send file descriptor 2 to ``path`` for the block.

    Kineto's C++ side prints a line per profiler start/stop on stderr; that would
    bury the benchmark's own output.  Python-level writes go there as well, so
    the file is kept for inspection.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "ab") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def progress(message: str) -> None:
    """A progress line on stdout, flushed at once (runs take minutes)."""
    print(message, flush=True)
