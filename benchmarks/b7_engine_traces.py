"""B7 — ``graphcapture check`` of an engine-written trace of many keys, against ``graphcapture summarize`` of it.

Set-up (untimed): ``examples/engine_traces/make_traces.py`` lays the real sglang
capture out as vLLM writes ``capture_traces/``: FULL shapes of batch sizes 1…N and
one PIECEWISE shape of 3 graphs, each shape a ``capture_{bs}_{mode}`` range around
its capture windows (N + 1 keys).  ``graphcapture check --update`` writes the goldens.

Timed, each run in a fresh process (:mod:`child`), variants interleaved round by round:

* ``floor`` — ``gzip.open`` + ``json.load`` of the file (B2's parse floor);
* ``summarize`` — ``graphcapture summarize TRACE --out FILE``: one summary of the whole file;
* ``check`` — ``graphcapture check TRACE --golden-dir DIR``: every key split out of the
  file, read against its golden and compared (all pass);
* ``summarize both`` — ``graphcapture summarize TRACE COPY``: the two files ``diff`` reads;
* ``diff`` — ``graphcapture diff TRACE COPY`` (COPY: the same trace in another file), key by key;
* ``show`` — ``graphcapture show DIR`` of the folder holding TRACE.

Rows: check ÷ summarize time, target ≤ 1.3 (one pass over the file, not one per key);
check's peak memory (peak RSS during the command minus before it) ÷ the parse floor's,
target ≤ 1.25 — the bound B2 holds summaries to — and ÷ summarize's, shown.  diff ÷
summarize of the same two files and show ÷ summarize, in time and in memory, target ≤ 1.3
each: every command reads a trace with the one streaming loader.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from common import REPO, Row, Section, fmt_bytes, fmt_seconds, median, progress, real_traces_dir, rotated

TIME_TARGET = 1.3
MEMORY_TARGET = 1.25
#: diff and show ÷ summarize of the same files, in time and in memory.
LOADER_TARGET = 1.3
SOURCE = "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
CHILD = Path(__file__).resolve().parent / "child.py"


def _make_traces():
    path = REPO / "examples" / "engine_traces" / "make_traces.py"
    spec = importlib.util.spec_from_file_location("make_traces", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _child(mode: str, trace: Path, *extra: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(CHILD), mode, str(trace), *extra], capture_output=True, text=True, timeout=1200
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]}
    return json.loads(lines[-1])


def run(*, keys: int, rounds: int, work_dir: Path) -> Section:
    section = Section()
    source = real_traces_dir() / SOURCE
    if not source.is_file():
        section.notes.append(f"B7 skipped: {SOURCE} not in {real_traces_dir()} (set GRAPH_CAPTURE_REAL_TRACES)")
        return section
    folder = work_dir / "b7"
    trace = folder / "vllm" / "capture_traces" / "decoder.json.gz"
    sizes = tuple(range(keys - 1, 0, -1))
    progress(f"B7: writing a vLLM-layout trace of {keys} keys from {SOURCE}")
    make = _make_traces()
    make.build("vllm", folder / "vllm", sizes=sizes, piecewise=(4, 3), source=source)
    goldens = folder / "goldens"
    from pytest_graphcapture.tools.cli import main

    with contextlib.redirect_stdout(io.StringIO()):
        if main(["check", str(trace), "--golden-dir", str(goldens), "--update"]) != 0:
            section.notes.append("B7: writing the goldens failed")
            return section
    copy = folder / "copy" / trace.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(trace, copy)
    runs = {
        "floor": ("floor", trace, ""),
        "summarize": ("summarize", trace, str(folder / "summary.json")),
        "check": ("check", trace, str(goldens)),
        "summarize both": ("cli", "summarize", str(trace), str(copy), "--out", str(folder / "both.json")),
        "diff": ("cli", "diff", str(trace), str(copy)),
        "show": ("cli", "show", str(trace.parent)),
    }
    results: dict = {mode: [] for mode in runs}
    for r in range(rounds):
        progress(f"B7: round {r + 1} of {rounds}")
        for mode in rotated(list(results), r):
            results[mode].append(_child(*runs[mode]))
    errors = [m.get("error") for ms in results.values() for m in ms if "error" in m]
    if errors:
        section.notes.append(f"B7: a measurement failed: {errors[0]}")
        return section
    t = {mode: median([m["seconds"] for m in ms]) for mode, ms in results.items()}
    peak = {mode: median([m["peak_delta"] for m in ms]) for mode, ms in results.items()}
    size = trace.stat().st_size
    what = f"{keys} keys ({keys - 1} FULL, 1 PIECEWISE of 3 graphs), {fmt_bytes(size)} gz"
    section.rows += [
        Row(
            "B7",
            f"graphcapture check of a vLLM capture trace of {what}, {rounds} runs",
            fmt_seconds(t["check"]),
            f"graphcapture summarize of the file {fmt_seconds(t['summarize'])}",
            t["check"] / t["summarize"],
            TIME_TARGET,
            f"parse floor {fmt_seconds(t['floor'])}; every key read against its golden (all pass)",
        ),
        Row(
            "B7",
            f"peak memory of graphcapture check ({keys} keys)",
            fmt_bytes(peak["check"]),
            f"parse floor {fmt_bytes(peak['floor'])}",
            peak["check"] / peak["floor"],
            MEMORY_TARGET,
            f"graphcapture summarize of the file: {fmt_bytes(peak['summarize'])} "
            f"(check ÷ summarize {peak['check'] / max(peak['summarize'], 1):.2f})",
        ),
    ]
    for mode, against, what in (
        ("diff", "summarize both", "graphcapture diff TRACE COPY (the same trace in two files), key by key"),
        ("show", "summarize", "graphcapture show of the trace's folder"),
    ):
        section.rows += [
            Row(
                "B7",
                f"{what} ({keys} keys), {rounds} runs",
                fmt_seconds(t[mode]),
                f"graphcapture {'summarize TRACE COPY' if mode == 'diff' else 'summarize TRACE'} "
                f"{fmt_seconds(t[against])}",
                t[mode] / t[against],
                LOADER_TARGET,
                "the same bytes read; one streaming loader for every command",
            ),
            Row(
                "B7",
                f"peak memory of graphcapture {mode} ({keys} keys)",
                fmt_bytes(peak[mode]),
                f"graphcapture {'summarize TRACE COPY' if mode == 'diff' else 'summarize TRACE'} "
                f"{fmt_bytes(peak[against])}",
                peak[mode] / max(peak[against], 1),
                LOADER_TARGET,
                f"parse floor {fmt_bytes(peak['floor'])}",
            ),
        ]
    section.notes.append(
        "B7: each run in a fresh process; time = the command alone (imports excluded); peak memory = peak RSS "
        "during it minus before it; the trace: examples/engine_traces/make_traces.py, vLLM layout"
    )
    return section
