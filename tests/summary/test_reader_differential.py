"""The sliced reader and the whole-file reader give one verdict on any input: the same summary or the same error.

Mutated traces go through both: the shared real traces (cut to their first events, so the test stays
fast) and a synthetic one, changed by byte flips, truncations, injected invalid UTF-8, deep nesting,
huge integers and wrong types for the fields a summary reads.  The sliced reader runs with small
slices, so the cuts land everywhere.  A seeded generator
makes every case reproducible: a failure names the base, the seed and the mutations.
"""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from typing import Any

import pytest
from helpers import real_traces_dir

from pytest_graphcapture.errors import TraceFormatError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import files
from pytest_graphcapture.summary import tracefile as stream
from pytest_graphcapture.summary.files import summarize_trace_file

KEY = CaptureKey("Runner", 32)
SEED = 20261201
SLICES = (64, 200, 1000, 4096)

#: Bytes Python's UTF-8 decoder refuses: invalid start, overlong NUL, UTF-16 surrogate, above U+10FFFF, cut short.
BAD_UTF8 = (b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe2\x82")

#: What a byte flip writes: JSON structure, escapes, digits, and bytes that are not UTF-8 on their own.
FLIP_BYTES = b'"\\{}[],:0 9-.eE\xff\xc0\x80'

#: Values of the wrong type (or shape) for the fields a summary reads; the placeholders become raw JSON text.
WRONG = (
    [1],
    {"a": 1},
    7,
    1.5,
    None,
    True,
    "oops",
    "\ud800",
    [],
    [[2, 3], "x"],
    [[True]],
    [[-1, 0]],
    [[[2, 3], []]],
    "@@INF@@",
    "@@HUGE@@",
    "@@BIG@@",
    "capture_bs=@@DIGITS@@_DECODE",
)
RAW = {
    '"@@INF@@"': b"1e999",
    '"@@HUGE@@"': b"7" * 5000,
    '"@@BIG@@"': b"9" * 4300,
    '"@@BAD@@"': b'"\xc0\x80"',
    "@@DIGITS@@": b"7" * 5000,
}
#: Nesting depths of an injected value: with the event's levels and the field's own, 99 to 102, and far beyond.
DEPTHS = (96, 97, 98, 99, 985)
RAW.update({f'"@@DEEP{depth}@@"': b"[" * depth + b"]" * depth for depth in DEPTHS})

#: Top-level fields a summary reads (platform, environment, rank), as paths into the trace.
TOP_FIELDS = (
    ("deviceProperties", 0, "name"),
    ("deviceProperties", 0, "gcnArchName"),
    ("deviceProperties", 0, "computeMajor"),
    ("deviceProperties", 0, "computeMinor"),
    ("deviceProperties",),
    ("distributedInfo", "rank"),
    ("distributedInfo", "backend"),
    ("distributedInfo",),
    ("cuda_runtime_version",),
    ("hip_runtime_version",),
    ("metadata", "torch_version"),
    ("torch_version",),
    ("record_shapes",),
)

#: Categories of the events a summary reads (mutations go mostly to these).
READ_CATS = ("cpu_op", "cuda_runtime", "cuda_driver", "kernel", "gpu_memcpy", "gpu_memset", "user_annotation")

#: Fields a summary reads, as paths into an event.
FIELDS = (
    ("cat",),
    ("name",),
    ("ts",),
    ("dur",),
    ("tid",),
    ("args",),
    ("args", "Input Dims"),
    ("args", "Input type"),
    ("args", "correlation"),
    ("args", "kernel"),
    ("args", "grid"),
    ("args", "graph node id"),
    ("args", "skipped"),
    ("skipped",),
)


def _synthetic() -> dict:
    """A capture of a few ops and launches whose text holds false cuts (``},{`` in strings and nested lists)."""
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "ts": 100, "dur": 1, "tid": 7},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "ts": 900, "dur": 1, "tid": 7},
        {"ph": "X", "cat": "user_annotation", "name": "capture_32_DECODE", "ts": 99, "dur": 802, "tid": 7},
    ]
    for i in range(24):
        ts = 110 + i * 30
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": ["aten::mm", "aten::cat", 'aten::odd"},{"x'][i % 3],
                "ts": ts,
                "dur": 10,
                "tid": 7,
                "args": {
                    "Input Dims": [[[i % 4 + 1, 8], [8]], []] if i % 3 == 1 else [[i % 4 + 1, 64], [64, 64]],
                    "Input type": ["TensorList", "Scalar"] if i % 3 == 1 else ["float", "float"],
                    "Concrete Inputs": ["}, {", "},\n{", '\\"},{', "ünï"],
                    "nested": [{"a": [{"b": 1}, {"c": "},{"}]}],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "hipLaunchKernel",
                "ts": ts + 2,
                "dur": 1,
                "tid": 7,
                "args": {
                    "correlation": 1000 + i,
                    "kernel": f"k{i % 4}<{{}},{{}}>",
                    "grid": [1, 2, 3],
                    "block": [4, 1, 1],
                },
            },
            {
                "ph": "X",
                "cat": "kernel",
                "name": f"k{i % 4}",
                "ts": 5000 + i,
                "dur": 3,
                "args": {"correlation": 1000 + i},
            },
            {"ph": "X", "cat": "python_function", "name": "model.py(1): forward", "ts": ts, "dur": 5, "tid": 7},
        ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X", "gcnArchName": "gfx942"}],
        "traceEvents": events,
        "devices": [{"id": n, "name": "},{", "props": [{"a": n}]} for n in range(4)],
        "distributedInfo": {"rank": 0},
    }


def _real_bases() -> list[tuple[str, dict]]:
    """Each shared real trace with its top-level fields and its first events (up to about 80 KB of JSON)."""
    folder = real_traces_dir()
    found = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    if not found:
        pytest.skip(
            f"no real traces in {folder} (see SOURCES.md there); set GRAPH_CAPTURE_REAL_TRACES to the shared "
            "real_traces folder to run the differential test on them"
        )
    bases = []
    for path in found:
        trace = json.loads(gzip.decompress(path.read_bytes()))
        kept, size = [], 0
        for event in trace["traceEvents"]:
            size += len(json.dumps(event))
            if size > 80_000:
                break
            kept.append(event)
        trace["traceEvents"] = kept
        bases.append((path.name, trace))
    return bases


def _set(event: dict, field: tuple, value: object) -> None:
    if len(field) == 2:
        if not isinstance(event.get("args"), dict):
            event["args"] = {}
        event["args"][field[1]] = value
    else:
        event[field[0]] = value


def _set_top(trace: dict, field: tuple, value: object) -> None:
    """Set ``trace[field[0]][field[1]]...`` to ``value``, making the containers the path needs."""
    *path, last = field
    where: Any = trace
    for step, following in zip(path, field[1:]):
        fresh: Any = [{}] if isinstance(following, int) else {}
        try:
            inner = where[step]
        except (KeyError, IndexError):
            inner = None
        if type(inner) is not type(fresh) or not inner and isinstance(fresh, list):
            where[step] = inner = fresh
        where = inner
    where[last] = value


def _encode(trace: dict, rnd: random.Random) -> bytes:
    text = json.dumps(trace, indent=rnd.choice((None, 1)), ensure_ascii=rnd.random() < 0.5)
    data = text.encode("utf-8", "surrogatepass")  # a lone surrogate stays a \ud800 escape with ensure_ascii
    for placeholder, raw in RAW.items():
        data = data.replace(placeholder.encode(), raw)
    return data


def _mutate(trace: dict, rnd: random.Random) -> tuple[list[str], bytes]:
    """One to three mutations of ``trace``: first on its events (types, nesting, numbers), then on its bytes."""
    trace = json.loads(json.dumps(trace))
    events = trace["traceEvents"]
    read = [i for i, event in enumerate(events) if event.get("cat") in READ_CATS]
    done = []
    for _ in range(rnd.randint(1, 3)):
        kind = rnd.choice(("wrong type", "wrong type", "wrong type", "top-level", "nesting", "bad UTF-8 in a field"))
        if kind == "top-level":
            field = rnd.choice(TOP_FIELDS)
            value = rnd.choice(WRONG)
            _set_top(trace, field, value)
            done.append(f"{kind} {field}={json.dumps(value)[:40]}")
        elif events:
            index = rnd.choice(read) if read and rnd.random() < 0.8 else rnd.randrange(len(events))
            field = rnd.choice(FIELDS)
            if kind == "wrong type":
                value = rnd.choice(WRONG)
            elif kind == "nesting":
                value = f"@@DEEP{rnd.choice(DEPTHS)}@@"
            else:
                value = "@@BAD@@"
            _set(events[index], field, value)
            done.append(f"{kind} {'.'.join(field)}={json.dumps(value)[:40]} in event {index}")
    data = _encode(trace, rnd)
    for _ in range(rnd.randint(0, 2)):
        kind = rnd.choice(("flip", "flip", "truncate", "bad UTF-8 anywhere", "none", "none", "none"))
        if kind == "flip" and data:
            at = rnd.randrange(len(data))
            data = data[:at] + bytes([rnd.choice(FLIP_BYTES)]) + data[at + 1 :]
        elif kind == "truncate" and data:
            at = rnd.randrange(len(data))
            data = data[:at]
        elif kind == "bad UTF-8 anywhere":
            quotes = [i for i in range(len(data)) if data[i] == 0x22]
            at = rnd.choice(quotes) + 1 if quotes else 0
            data = data[:at] + rnd.choice(BAD_UTF8) + data[at:]
        else:
            continue
        done.append(f"{kind} at byte {at}")
    return done, data


def _verdict(path: Path) -> str:
    """The summary JSON (which must encode as UTF-8), or the one-line error; anything else fails the test."""
    try:
        text = summarize_trace_file(path, key=KEY).to_json()
    except TraceFormatError as exc:
        message = str(exc)
        assert "\n" not in message and message.startswith(str(path)), message
        return f"error: {message}"
    text.encode("utf-8")
    return text


def _whole_file(monkeypatch: pytest.MonkeyPatch, path: Path) -> str:
    def whole_file_only(*args: object, **kwargs: object) -> dict:
        raise stream.Unusual("the whole-file reader is the reference")

    with monkeypatch.context() as patch:
        patch.setattr(files, "stream_trace", whole_file_only)
        return _verdict(path)


def _sliced(monkeypatch: pytest.MonkeyPatch, path: Path, slice_bytes: int) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(stream, "SLICE_BYTES", slice_bytes)
        return _verdict(path)


def _differential(bases: list, cases: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(SEED)
    outcomes = set()
    for name, trace in bases:
        for case in range(cases):
            done, data = _mutate(trace, rnd)
            gz = rnd.random() < 0.3
            path = tmp_path / f"case{case}.json{'.gz' if gz else ''}"
            path.write_bytes(gzip.compress(data, compresslevel=1) if gz else data)
            expected = _whole_file(monkeypatch, path)
            outcomes.add(expected.startswith("error: "))
            slice_bytes = rnd.choice(SLICES)
            got = _sliced(monkeypatch, path, slice_bytes)
            assert got == expected, f"{name}, seed {SEED}, case {case}, slices of {slice_bytes} bytes: {done}"

    assert outcomes == {True, False}, "the mutations should give both summaries and errors"


def test_mutated_synthetic_traces_get_one_verdict_from_both_readers(tmp_path, monkeypatch):
    _differential([("synthetic", _synthetic())], 100, tmp_path, monkeypatch)


def test_mutated_real_traces_get_one_verdict_from_both_readers(tmp_path, monkeypatch):
    _differential(_real_bases(), 20, tmp_path, monkeypatch)
