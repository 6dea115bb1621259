"""The large synthetic trace of B2/B3, generated from a real one.

The real trace's ``traceEvents`` are written again and again, each copy shifted
past the previous one in time and with its correlation ids, External ids and
flow ids shifted too, so every event stays distinct and flows still link within
their copy.  Top-level metadata (``distributedInfo``, ``deviceProperties`` …) is
kept once, so HTA still finds the rank.  The result is gzipped; generation is
skipped when a file made from the same source with the same parameters exists.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from pathlib import Path
from typing import Any

GENERATOR_VERSION = 1
ID_ARGS = ("correlation", "External id")


def _source_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:16]


def _span(events: list) -> tuple[float, int, int]:
    """(time span, largest id in args, largest flow id) of the events."""
    lo, hi, max_arg, max_flow = float("inf"), float("-inf"), 0, 0
    for event in events:
        ts = event.get("ts")
        if isinstance(ts, (int, float)):
            end = ts + (event.get("dur") if isinstance(event.get("dur"), (int, float)) else 0)
            lo, hi = min(lo, ts), max(hi, end)
        args = event.get("args")
        if isinstance(args, dict):
            for name in ID_ARGS:
                value = args.get(name)
                if isinstance(value, int) and not isinstance(value, bool):
                    max_arg = max(max_arg, value)
        flow = event.get("id")
        if isinstance(flow, int) and not isinstance(flow, bool):
            max_flow = max(max_flow, flow)
    span = (hi - lo) if hi >= lo else 0
    return span, max_arg, max_flow


def _shifted(event: dict, copy: int, dt: Any, darg: int, dflow: int) -> dict:
    if copy == 0:
        return event
    out = dict(event)
    ts = out.get("ts")
    if isinstance(ts, (int, float)) and out.get("ph") != "M":
        out["ts"] = ts + copy * dt
    flow = out.get("id")
    if isinstance(flow, int) and not isinstance(flow, bool):
        out["id"] = flow + copy * dflow
    args = out.get("args")
    if isinstance(args, dict):
        new_args = None
        for name in ID_ARGS:
            value = args.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                new_args = new_args if new_args is not None else dict(args)
                new_args[name] = value + copy * darg
        if new_args is not None:
            out["args"] = new_args
    return out


def make_large_trace(source: Path, dest: Path, min_bytes: int) -> dict:
    """Write ``dest`` (gzip) with copies of ``source``'s events until ≥ ``min_bytes`` uncompressed.

    Returns the description ``{"source", "copies", "events", "uncompressed_bytes", ...}``,
    also stored next to the file as ``<dest>.meta.json`` to reuse it next time.
    """
    meta_path = dest.with_name(dest.name + ".meta.json")
    wanted = {
        "generator": GENERATOR_VERSION,
        "source": source.name,
        "source_sha256_16": _source_digest(source),
        "min_bytes": min_bytes,
    }
    if dest.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except ValueError:
            meta = {}
        if all(meta.get(k) == v for k, v in wanted.items()):
            return meta
    with gzip.open(source, "rb") as handle:
        trace = json.load(handle)
    events = trace.pop("traceEvents")
    span, max_arg, max_flow = _span(events)
    dt = int(span) + 1_000  # 1 ms gap between copies
    darg, dflow = max_arg + 1, max_flow + 1
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    written = 0
    copies = 0
    try:
        with gzip.open(tmp, "wb", compresslevel=6) as out:
            head = json.dumps(trace, indent=None)
            head = (head[:-1] + ', "traceEvents": [') if head != "{}" else '{"traceEvents": ['
            data = head.encode("utf-8")
            out.write(data)
            written += len(data)
            while written < min_bytes:
                chunk = ",\n".join(json.dumps(_shifted(e, copies, dt, darg, dflow)) for e in events)
                data = ((",\n" if copies else "") + chunk).encode("utf-8")
                out.write(data)
                written += len(data)
                copies += 1
            tail = b"\n]}\n"
            out.write(tail)
            written += len(tail)
        os.replace(tmp, dest)
    except BaseException:
        try:
            tmp.unlink()
        except FileNotFoundError:
            pass
        raise
    meta = dict(
        wanted,
        copies=copies,
        events=copies * len(events),
        uncompressed_bytes=written,
        compressed_bytes=dest.stat().st_size,
    )
    meta_path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta
