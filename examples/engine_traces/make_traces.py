"""Build capture traces in sglang's and vLLM's layouts from one real sglang capture trace.

The source is a real Kineto trace of sglang capturing its bs=32 decode graph on an
MI300X (TraceLens's ``capture_traces/bs_32_rank0.json.gz``; the repository's tests find
it under ``../shared/testdata/real_traces/`` or ``$GRAPH_CAPTURE_REAL_TRACES``).  Its
one capture window (``hipStreamBeginCapture`` … ``hipStreamEndCapture``) is copied once
per shape, later in time, with every input dimension of 32 written as the shape's
batch size, and laid out the way each engine writes it:

* ``vllm``: ``capture_traces/decoder.json.gz``, one ``capture_{bs}_{mode}`` range per
  shape; a PIECEWISE shape is its window cut into pieces, an eager launch (the
  attention vLLM runs between pieces) between each two;
* ``sglang-per-bs``: ``graph_capture_profile/DecodeCudaGraphRunner_bs_{bs}_rank0.json.gz``;
* ``sglang-single``: ``graph_capture_profile/cuda_graph_capture-DecodeCudaGraphRunner-TP-0.json.gz``,
  the windows largest size first, no size marker.

``drop=(bs, mode, graph)`` leaves one kernel launch out of that graph (mode None for
sglang layouts, graph counted from 1): a regression for the gate to find.  Only the
standard library is used.  Run ``python make_traces.py OUT_DIR [SOURCE]``.
"""

from __future__ import annotations

import gzip
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

SOURCE_NAME = "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
RUNNER = "DecodeCudaGraphRunner"
#: The batch size the real capture was recorded at: its dimensions of this size are rewritten.
SOURCE_BS = 32
#: Microseconds between two copied shapes and around each piece boundary.
GAP = 100.0
_KEPT_CATS = {"cpu_op", "cuda_runtime", "cuda_driver"}
_KEPT_ARGS = ("Input Dims", "Input type", "kernel", "grid", "block", "correlation", "stream")


def source_trace() -> Path:
    """The real trace: ``$GRAPH_CAPTURE_REAL_TRACES`` or ``../shared/testdata/real_traces/`` above this repo."""
    env = os.environ.get("GRAPH_CAPTURE_REAL_TRACES")
    roots = [Path(env)] if env else []
    roots.append(Path(__file__).resolve().parents[3] / "shared" / "testdata" / "real_traces")
    for root in roots:
        if (root / SOURCE_NAME).is_file():
            return root / SOURCE_NAME
    raise FileNotFoundError(f"{SOURCE_NAME} not found under {', '.join(map(str, roots))}")


class Capture:
    """The real trace's top-level fields and the events of its one capture window, in time order."""

    def __init__(self, path: Path) -> None:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            trace = json.load(f)
        events = trace.pop("traceEvents")
        self.top = trace
        begin = next(e for e in events if e.get("name") == "hipStreamBeginCapture")
        end = next(e for e in events if e.get("name") == "hipStreamEndCapture")
        self.start, self.end = begin["ts"], end["ts"] + end.get("dur", 0)
        self.events = sorted(
            (_slim(e) for e in events if e.get("cat") in _KEPT_CATS and self.start <= e.get("ts", -1) <= self.end),
            key=lambda e: e["ts"],
        )
        self._sized: tuple = (self.events, {})  # per batch size: each event's args, dimensions resized

    def _sized_args(self, bs: int) -> list:
        """Each event's args with its input dimensions of ``SOURCE_BS`` written as ``bs``, made once per size."""
        if self._sized[0] is not self.events:  # events replaced (a slimmed copy): resize them anew
            self._sized = (self.events, {})
        made = self._sized[1]
        if bs not in made:
            made[bs] = [
                {**e["args"], "Input Dims": _resized(e["args"]["Input Dims"], bs)}
                if isinstance(e["args"].get("Input Dims"), list)
                else e["args"]
                for e in self.events
            ]
        return made[bs]

    def shape(self, bs: int, at: float, pieces: int = 1, drop: Optional[int] = None) -> tuple[list, float]:
        """The window's events for batch size ``bs`` from time ``at``, cut into ``pieces`` graphs; (events, end).

        ``drop``: the graph (from 1) that loses its first kernel launch.
        """
        shift = at - self.start
        launches = [i for i, e in enumerate(self.events) if e["name"] == "hipLaunchKernel"]
        cuts = [launches[len(launches) * k // pieces] for k in range(1, pieces)]
        out: list = []
        graph, extra, dropped = 1, 0.0, False
        for i, (event, args) in enumerate(zip(self.events, self._sized_args(bs), strict=True)):
            if i in cuts:
                last = out[-1]["ts"]
                out.append(_call("hipStreamEndCapture", last + 1, event))
                out.append(_eager_attention(last + GAP / 2, event))
                extra += GAP  # every later event moves on by GAP, so none comes before this Begin
                out.append(_call("hipStreamBeginCapture", last + GAP * 0.9, event))
                graph += 1
            if drop == graph and not dropped and event["name"] == "hipLaunchKernel":
                dropped = True
                continue
            out.append({**event, "ts": event["ts"] + shift + extra, "args": args})  # args shared: never changed
        return out, self.end + shift + extra


def _slim(event: dict) -> dict:
    args = event.get("args") or {}
    kept = {k: event[k] for k in ("ph", "cat", "name", "pid", "tid", "ts", "dur") if k in event}
    kept["args"] = {k: args[k] for k in _KEPT_ARGS if k in args}
    return kept


def _resized(dims: list, bs: int) -> list:
    return [_resized(d, bs) if isinstance(d, list) else (bs if d == SOURCE_BS else d) for d in dims]


def _call(name: str, ts: float, like: dict) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": name, "pid": like["pid"], "tid": like["tid"], "ts": ts, "dur": 1}


def _eager_attention(ts: float, like: dict) -> dict:
    """A launch between two pieces: vLLM runs attention eagerly there, so it is no graph's kernel."""
    args = {"kernel": "eager_paged_attention_kernel", "grid": [32, 1, 1], "block": [256, 1, 1]}
    return {**_call("hipLaunchKernel", ts, like), "args": args}


def _annotation(name: str, start: float, end: float, like: dict) -> dict:
    pid, tid = like["pid"], like["tid"]
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": pid, "tid": tid, "ts": start, "dur": end - start}


def _write(path: Path, top: dict, events: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as f:  # level 1: quickest to write
        f.write(json.dumps({**top, "traceEvents": events}))  # dumps encodes in C, dump in Python
    return path


def build(
    layout: str,
    out_dir: Path,
    *,
    sizes: Sequence[int] = (8, 4, 2),
    piecewise: Optional[tuple[int, int]] = (4, 3),
    drop: Optional[tuple] = None,
    capture: Optional[Capture] = None,
    source: Optional[Path] = None,
) -> list[Path]:
    """Write traces of ``layout`` under ``out_dir``; the paths written.

    ``sizes`` are the FULL (vLLM) or captured (sglang) batch sizes, largest first as
    engines capture them; ``piecewise`` ``(bs, pieces)`` adds a PIECEWISE shape (vLLM only).
    """
    capture = capture or Capture(source or source_trace())
    out_dir = Path(out_dir)
    at = capture.end + GAP
    like = capture.events[0]

    def shape(bs: int, mode: Optional[str], pieces: int = 1) -> tuple[list, float, float]:
        nonlocal at
        graph = drop[2] if drop and drop[0] == bs and drop[1] == mode else None
        start = at
        events, end = capture.shape(bs, start, pieces, graph)
        at = end + GAP
        return events, start, end

    if layout == "vllm":
        events: list = []
        shapes = [(bs, "FULL", 1) for bs in sizes] + ([(piecewise[0], "PIECEWISE", piecewise[1])] if piecewise else [])
        for bs, mode, pieces in shapes:
            body, start, end = shape(bs, mode, pieces)
            events.append(_annotation(f"capture_{bs}_{mode}", start - 1, end + 1, like))
            events += body
        return [_write(out_dir / "capture_traces" / "decoder.json.gz", capture.top, events)]
    if layout == "sglang-per-bs":
        folder = out_dir / "graph_capture_profile"
        return [_write(folder / f"{RUNNER}_bs_{bs}_rank0.json.gz", capture.top, shape(bs, None)[0]) for bs in sizes]
    if layout == "sglang-single":
        events = [event for bs in sizes for event in shape(bs, None)[0]]
        name = f"cuda_graph_capture-{RUNNER}-TP-0.json.gz"
        return [_write(out_dir / "graph_capture_profile" / name, capture.top, events)]
    raise ValueError(f"layout must be vllm, sglang-per-bs or sglang-single, got {layout!r}")


def main(argv: Sequence[str]) -> int:
    if not argv:
        print("usage: python make_traces.py OUT_DIR [SOURCE_TRACE]", file=sys.stderr)
        return 2
    capture = Capture(Path(argv[1]) if len(argv) > 1 else source_trace())
    for layout in ("vllm", "sglang-per-bs", "sglang-single"):
        for path in build(layout, Path(argv[0]) / layout, capture=capture):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
