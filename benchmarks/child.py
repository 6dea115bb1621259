"""One trace-load measurement in a fresh process: ``python child.py MODE TRACE [HTA_DIR]``.

Modes:

* ``floor`` — the parse floor: ``gzip.open`` + stdlib ``json.load`` of the file;
* ``ours`` — ``pytest_graphcapture.summary.summarize_trace_file`` (explicit key);
* ``summarize`` — ``graphcapture summarize TRACE --out OUT_FILE`` (the CLI, in process);
* ``check`` — ``graphcapture check TRACE --golden-dir GOLDEN_DIR`` (its output discarded);
* ``cli`` — ``graphcapture ARGS...`` (``TRACE`` is the first argument; output discarded, exit 0 expected);
* ``hta`` — Holistic Trace Analysis: ``Trace(trace_dir=HTA_DIR).parse_traces(...)``,
  run with the HTA virtual environment's Python (this file imports nothing of
  ours in that mode).

Prints one JSON line: ``seconds`` (only the load itself: imports and interpreter
start are excluded), ``peak_delta`` (bytes: peak RSS after the load minus the
peak RSS before it, i.e. the memory the load itself needed) and ``peak_rss``.
A fresh process per measurement keeps peaks independent of each other.
"""

from __future__ import annotations

import gzip
import json
import os
import resource
import sys
import time


def _max_rss() -> int:
    """Peak resident set size of this process so far, in bytes.

    Linux: ``VmHWM`` of /proc/self/status, the high-water mark of this program's
    own address space.  ``ru_maxrss`` is not used there because a child started
    by fork + exec inherits its parent's value (a large parent would hide the
    child's peak).  Elsewhere ``ru_maxrss`` is the best there is.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def _floor(path: str) -> int:
    with open(path, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gz else open
    with opener(path, "rb") as handle:
        trace = json.load(handle)
    return len(trace["traceEvents"])


def _ours(path: str) -> int:
    from pytest_graphcapture.keys import CaptureKey
    from pytest_graphcapture.summary.files import summarize_trace_file

    summary = summarize_trace_file(path, key=CaptureKey("bench", 1))
    return summary.op_count() + summary.kernel_count()


def _cli(argv: list) -> int:
    import contextlib
    import io

    from pytest_graphcapture.tools.cli import main

    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        code = main(argv)
    if code not in (0,):
        raise RuntimeError(f"graphcapture {argv[0]} exited {code}: {out.getvalue()[-300:]}")
    return code


def _hta_prepare() -> None:
    import logging

    import hta  # noqa: F401  (import cost excluded from the timing)
    from hta.common.trace import Trace  # noqa: F401

    logging.disable(logging.WARNING)  # HTA logs a warning per parse; keep the output clean


def _hta(trace_dir: str) -> int:
    from hta.common.trace import Trace

    trace = Trace(trace_dir=trace_dir)
    # Single rank: no multiprocessing; HTA's optional tracemalloc profiling off (it only slows it down).
    trace.parse_traces(max_ranks=1, use_multiprocessing=False, use_memory_profiling=False)
    if not trace.traces:
        raise RuntimeError("HTA parsed no rank")
    return sum(len(df) for df in trace.traces.values())


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in ("floor", "ours", "summarize", "check", "cli", "hta"):
        print(
            "usage: child.py floor|ours|summarize|check|hta TRACE [HTA_DIR | OUT_FILE | GOLDEN_DIR] | cli ARGS...",
            file=sys.stderr,
        )
        return 2
    mode, path = argv[0], argv[1]
    if mode in ("ours", "summarize", "check", "cli"):
        import pytest_graphcapture.summary  # noqa: F401  (import cost excluded)
        import pytest_graphcapture.tools.cli  # noqa: F401
    elif mode == "hta":
        _hta_prepare()
    before = _max_rss()
    started = time.perf_counter()
    try:
        if mode == "floor":
            items = _floor(path)
        elif mode == "ours":
            items = _ours(path)
        elif mode == "summarize":
            items = _cli(["summarize", path, "--out", argv[2]])
        elif mode == "check":
            items = _cli(["check", path, "--golden-dir", argv[2]])
        elif mode == "cli":
            items = _cli(argv[1:])
        else:
            items = _hta(argv[2] if len(argv) > 2 else os.path.dirname(path))
    except Exception as exc:  # reported as a result row, never a traceback
        print(json.dumps({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}))
        return 0
    seconds = time.perf_counter() - started
    peak = _max_rss()
    print(json.dumps({"seconds": seconds, "peak_delta": max(0, peak - before), "peak_rss": peak, "items": items}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
