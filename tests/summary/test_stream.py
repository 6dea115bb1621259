"""Summaries of trace files read in slices: equal to the whole-file read, bounded memory, same errors."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Callable

import pytest
from helpers import REPO_ROOT, real_traces_dir

from pytest_graphcapture.errors import TraceFormatError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import summarize_trace_file
from pytest_graphcapture.summary import tracefile as stream
from pytest_graphcapture.summary.platform import environment_from_trace, platform_from_trace
from pytest_graphcapture.summary.scan import Scan, build_summary, summarize_events
from pytest_graphcapture.summary.tracefile import MAX_NESTING, load_trace, too_deep

KEY = CaptureKey("Runner", 32)
LEVELS = ("name", "exact")
# Slice sizes: smaller than one event (every event needs the buffer to grow), a few events, and the default.
SLICES = (64, 2048, stream.SLICE_BYTES)


def _whole_file(path: Path, level: str) -> str:
    """The summary the whole-file reader gives (load everything, then summarize the events)."""
    return _whole_file_levels(path, (level,))[level]


def _whole_file_levels(path: Path, levels: tuple[str, ...] = LEVELS) -> dict[str, str]:
    """:func:`_whole_file`'s summary at each of ``levels``, the file loaded once (summarizing leaves the events be)."""
    trace = load_trace(path)
    platform, environment = platform_from_trace(trace), environment_from_trace(trace)
    return {
        level: summarize_events(
            trace["traceEvents"], key=KEY, platform=platform, level=level, environment=environment
        ).to_json()
        for level in levels
    }


def _sliced(path: Path, level: str) -> str:
    """The summary from the slice reader; it raises Unusual rather than silently reading the file whole."""
    scan = Scan()
    top = stream.stream_trace(path, scan)
    assert "traceEvents" not in top
    return build_summary(scan, KEY, platform_from_trace(top), level, environment_from_trace(top)).to_json()


def _real_traces() -> list[Path]:
    folder = real_traces_dir()
    found = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    if not found:
        pytest.skip(f"no real traces in {folder}; set GRAPH_CAPTURE_REAL_TRACES to the shared real_traces folder")
    return found


@pytest.mark.slow
def test_every_real_trace_summarizes_byte_identically_in_slices(monkeypatch):
    for path in _real_traces():
        whole = _whole_file_levels(path)
        for slice_bytes in (4096, stream.SLICE_BYTES):
            monkeypatch.setattr(stream, "SLICE_BYTES", slice_bytes)
            scan = Scan()  # one read per slice size: what is read does not depend on the level
            top = stream.stream_trace(path, scan)
            assert "traceEvents" not in top
            for level in LEVELS:
                sliced = build_summary(
                    scan, KEY, platform_from_trace(top), level, environment_from_trace(top)
                ).to_json()
                assert sliced == whole[level], (path.name, slice_bytes, level)


def _tricky_trace() -> dict:
    """Events whose text holds every false cut: ``},{`` in strings, lists of objects in args, odd fields."""
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamBeginCapture", "ts": 100, "dur": 1, "tid": 7},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamEndCapture", "ts": 900, "dur": 1, "tid": 7},
    ]
    for i in range(40):
        ts = 110 + i * 19
        events += [
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm" if i % 3 else 'aten::weird"},{"name',
                "ts": ts,
                "dur": 10,
                "tid": 7,
                "args": {
                    "Input Dims": [[i % 4 + 1, 64], [64, 64]] if i % 5 else None,
                    "Input type": ["float", "float"],
                    "Concrete Inputs": ["}, {", "},\n  {", "}]", '\\"},{'],
                    "nested": [{"a": {"b": [{"c": 1}, {"d": 2}]}}, {"e": "},{"}],
                },
            },
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "hipLaunchKernel" if i % 2 else "cudaLaunchKernel",
                "ts": ts + 2,
                "dur": 1,
                "tid": 7,
                "args": {
                    "correlation": 1000 + i,
                    "kernel": f"k{i % 3}<{{}},{{}}>",
                    "grid": [1, 2, 3],
                    "block": [4, 1, 1],
                },
            },
            {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 1000 + i, "ts": ts + 2, "bp": "e"},
            {"ph": "X", "cat": "python_function", "name": "x.py(1): f", "ts": ts, "dur": 5, "tid": 7, "args": {}},
        ]
    events += [
        {"ph": "X", "cat": "cpu_op", "name": 5, "ts": 200, "dur": 1, "tid": 7},  # a non-string name is skipped
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 300, "tid": [1, 2], "args": None},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 300.5, "dur": 2, "tid": 7, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "capture_32_DECODE", "ts": 105, "dur": 800, "tid": 7},
        {"ph": "X", "cat": "kernel", "name": "k1", "ts": 5000, "dur": 3, "args": {"correlation": 1001}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 120, "args": {"Bytes": 4}},
    ]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X", "gcnArchName": "gfx942"}],
        "traceEvents": events,
        # After the events: more "},{" than a slice tries before giving up (devices of an 8-GPU node).
        "devices": [{"id": n, "name": "},{", "props": [{"a": n}, {"b": n}]} for n in range(8)],
        "traceName": "tricky, with a } and a ] in it",
        "distributedInfo": {"rank": 3},
    }


_WRITERS = {
    "indented": lambda t: json.dumps(t, indent=2).encode(),
    "minified": lambda t: json.dumps(t, separators=(",", ":")).encode(),
    "spaced": lambda t: json.dumps(t).encode(),
    "bom-crlf": lambda t: b"\xef\xbb\xbf" + json.dumps(t, indent=1).replace("\n", "\r\n").encode(),
    "unicode": lambda t: json.dumps(t, ensure_ascii=False).encode(),
}


@pytest.fixture(params=sorted(_WRITERS))
def tricky_file(request, tmp_path) -> Path:
    trace = _tricky_trace()
    trace["traceEvents"][2]["name"] = "aten::mm_ünïcödé"
    data = _WRITERS[request.param](trace)
    path = tmp_path / "tricky.json"
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("slice_bytes", SLICES)
def test_false_cuts_never_change_the_summary(tricky_file, slice_bytes, monkeypatch):
    monkeypatch.setattr(stream, "SLICE_BYTES", slice_bytes)
    for level in LEVELS:
        assert _sliced(tricky_file, level) == _whole_file(tricky_file, level)
    summary = summarize_trace_file(tricky_file)
    assert summary.key.batch_size == 32 and summary.key.rank == 3  # annotations and top-level fields still read


def test_gzip_members_and_padding_are_read_like_the_whole_file(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "SLICE_BYTES", 512)
    data = json.dumps(_tricky_trace(), indent=2).encode()
    half = len(data) // 2
    path = tmp_path / "members.json.gz"
    path.write_bytes(gzip.compress(data[:half]) + gzip.compress(data[half:]) + b"\0" * 16)
    assert _sliced(path, "name") == _whole_file(path, "name")


def _legacy_error(path: Path, **kwargs) -> str:
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, **kwargs)
    return str(info.value)


BAD = {
    "truncated": lambda text: text[: len(text) // 2],
    "nan": lambda text: text.replace('"ts": 110', '"ts": NaN', 1),
    "event-not-object": lambda text: text.replace('"traceEvents": [', '"traceEvents": [17, ', 1),
    "trailing-garbage": lambda text: text + " {}",
    "events-not-list": lambda text: text.replace('"traceEvents": [', '"traceEvents": {"x": [', 1)[:-1] + "}}",
    "no-events": lambda text: '{"schemaVersion": 1}',
    "top-level-list": lambda text: "[" + text + "]",
    "empty": lambda text: "",
    "missing-comma": lambda text: text.replace("},\n    {", "}\n    {", 3),
}


@pytest.mark.parametrize("damage", sorted(BAD))
def test_a_damaged_file_fails_with_the_whole_file_readers_one_line_error(damage, tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "SLICE_BYTES", 700)
    text = BAD[damage](json.dumps(_tricky_trace(), indent=2))
    for name, data in (("bad.json", text.encode()), ("bad.json.gz", gzip.compress(text.encode()))):
        path = tmp_path / name
        path.write_bytes(data)
        expected = _legacy_error(path)
        with pytest.raises(TraceFormatError) as info:
            summarize_trace_file(path, key=KEY)
        assert str(info.value) == expected
        assert "\n" not in expected and path.name in expected


def test_invalid_utf8_and_bad_gzip_name_the_problem(tmp_path):
    raw = json.dumps(_tricky_trace()).encode().replace(b"aten::mm", b"aten::\xff\xfe", 1)
    cases = {"latin.json": raw, "cut.json.gz": gzip.compress(raw)[:-20], "garbage.json.gz": b"\x1f\x8b" + b"x" * 64}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(TraceFormatError) as info:
            summarize_trace_file(path, key=KEY)
        assert str(info.value) == _legacy_error(path)


def test_odd_but_valid_fields_are_read_like_the_whole_file(tmp_path):
    """Non-object args and numbers beyond a double are legal JSON: the result equals the whole-file read."""
    trace = _tricky_trace()
    trace["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::odd", "ts": 150, "dur": 1, "args": [1]})
    trace["traceEvents"].append({"ph": "X", "cat": "kernel", "name": "k9", "ts": 10**30, "args": {"correlation": 1}})
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(trace), encoding="utf-8")
    with pytest.raises(stream.Unusual):
        _sliced(path, "name")
    assert summarize_trace_file(path, key=KEY).to_json() == _whole_file(path, "name")


def test_the_size_cap_still_guards_a_sliced_read(tmp_path):
    path = tmp_path / "big.json.gz"
    path.write_bytes(gzip.compress(json.dumps(_tricky_trace()).encode()))
    expected = _legacy_error(path, max_bytes=1000)
    with pytest.raises(TraceFormatError) as info:
        summarize_trace_file(path, key=KEY, max_bytes=1000)
    assert str(info.value) == expected and "GRAPH_CAPTURE_MAX_TRACE_BYTES" in expected


def _noisy_trace(path: Path, copies: int) -> int:
    """A gzip trace where almost every byte is an event a summary ignores (stacks, flows, memory)."""
    base = _tricky_trace()
    filler = [
        {"ph": "X", "cat": "python_function", "name": f"model.py({n}): forward", "ts": 1e6 + n, "dur": 1, "tid": 7}
        for n in range(200)
    ] + [{"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 2e6, "args": {"Total Allocated": 1}}] * 50
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as out:
        out.write('{"traceEvents": [' + json.dumps(base["traceEvents"])[1:-1])
        for _ in range(copies):
            out.write(", " + json.dumps(filler)[1:-1])
        out.write("]}")
    with gzip.open(path, "rb") as handle:
        return len(handle.read())


def test_memory_does_not_grow_with_the_events_a_summary_ignores(tmp_path, monkeypatch):
    """Peak traced memory stays a small fixed amount while the ignored part of the file grows tenfold."""
    monkeypatch.setattr(stream, "SLICE_BYTES", 256 * 1024)
    peaks = []
    for copies in (20, 200):
        path = tmp_path / f"noisy{copies}.json.gz"
        size = _noisy_trace(path, copies)
        tracemalloc.start()
        try:
            summary = summarize_trace_file(path, key=KEY)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert summary.op_count() > 0
        peaks.append((size, peak))
    (small_size, small_peak), (big_size, big_peak) = peaks
    assert big_size > 9 * small_size
    assert big_peak < 4 * 1024**2, f"{big_peak} bytes traced for a {big_size}-byte trace"
    assert big_peak < 2 * small_peak + 1024**2


#: Byte sequences Python's UTF-8 decoder refuses (the whole-file reader's check).
BAD_UTF8 = {
    "invalid start byte": b"\xff",
    "overlong NUL": b"\xc0\x80",
    "UTF-16 surrogate": b"\xed\xa0\x80",
    "above U+10FFFF": b"\xf4\x90\x80\x80",
}


#: Where the bad bytes go: a field the fast parser skips, and the op shapes it keeps as unparsed JSON text.
BAD_PLACES = {
    "skipped field": {"ph": "i", "cat": "x", "name": "y", "note": "BAD"},
    "Input type": {"ph": "X", "cat": "cpu_op", "name": "aten::zz", "ts": 1, "args": {"Input type": ["BAD"]}},
    "Input Dims": {"ph": "X", "cat": "cpu_op", "name": "aten::zz", "ts": 1, "args": {"Input Dims": [[2], "BAD"]}},
}


@pytest.mark.parametrize("place", sorted(BAD_PLACES))
@pytest.mark.parametrize("bad", sorted(BAD_UTF8))
def test_invalid_utf8_is_refused_whatever_the_file_size(bad, place, tmp_path):
    """The fast parser looks into few fields, yet the file is refused as the whole-file reader refuses it."""
    for filler in (0, 3000):  # the bad event first, or after ~300 KiB of events
        trace = _tricky_trace()
        events = [
            {"ph": "X", "cat": "python_function", "name": f"model.py({n}): forward", "ts": 1e6 + n, "dur": 1}
            for n in range(filler)
        ]
        trace["traceEvents"] = events + trace["traceEvents"] + [BAD_PLACES[place]]
        raw = json.dumps(trace).encode().replace(b"BAD", BAD_UTF8[bad])
        for name, data in ((f"t{filler}.json", raw), (f"t{filler}.json.gz", gzip.compress(raw))):
            path = tmp_path / name
            path.write_bytes(data)
            expected = _legacy_error(path)
            assert "not UTF-8" in expected
            with pytest.raises(TraceFormatError) as info:
                summarize_trace_file(path, key=KEY)
            assert str(info.value) == expected, (name, len(raw))


def test_a_real_trace_with_one_byte_changed_in_a_skipped_field_is_refused(tmp_path):
    source = min(_real_traces(), key=lambda path: path.stat().st_size)
    data = gzip.decompress(source.read_bytes())
    phase = data.rindex(b'"X"', 0, len(data) - 1000)  # the "ph" of a late event: a field no summary reads
    assert phase > 64 * 1024
    path = tmp_path / source.name
    path.write_bytes(gzip.compress(data[: phase + 1] + b"\xff" + data[phase + 2 :]))
    with pytest.raises(TraceFormatError) as info:
        summarize_trace_file(path, key=KEY)
    assert str(info.value) == _legacy_error(path) and "not UTF-8" in str(info.value)


def _nested_trace(tmp_path: Path, depth: int) -> Path:
    """A trace whose deepest value nests ``depth`` levels (top-level object 1, traceEvents 2, an event 3)."""
    text = json.dumps(_tricky_trace()).replace('"ph": "i"', '"ph": ' + "[" * (depth - 3) + "]" * (depth - 3), 1)
    path = tmp_path / f"deep{depth}.json"
    path.write_text(text, encoding="utf-8")
    return path


def _verdict(path: Path) -> str:
    try:
        return summarize_trace_file(path, key=KEY).to_json()
    except TraceFormatError as exc:
        return str(exc)


def _on_a_deep_stack(frames: int, call: Callable[[], str]) -> str:
    return call() if frames == 0 else _on_a_deep_stack(frames - 1, call)


def test_one_nesting_limit_for_both_readers_whatever_the_call_stack(tmp_path, monkeypatch):
    monkeypatch.setattr(stream, "SLICE_BYTES", 512)
    within, beyond, far = (_nested_trace(tmp_path, depth) for depth in (MAX_NESTING, MAX_NESTING + 1, 985))
    assert _sliced(within, "name") == _whole_file(within, "name") == _verdict(within)
    for path in (beyond, far):
        with pytest.raises(stream.Unusual):
            _sliced(path, "name")
        assert _verdict(path) == _legacy_error(path) == f"{path}: {too_deep()}"
    for path in (within, beyond, far):
        assert _on_a_deep_stack(500, lambda path=path: _verdict(path)) == _verdict(path)


def test_the_documented_nesting_limit_is_the_one_the_readers_apply():
    concepts = (REPO_ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    assert f"nested deeper than **{MAX_NESTING} levels** of arrays and objects" in concepts
