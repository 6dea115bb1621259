"""Capture windows: BeginCapture/EndCapture paired per process and thread, each End used once, the rest flagged.

Every reader computes the windows with one rule: event dicts, trace files read in
slices or whole, and live profiles (fake Kineto events here).
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any, Optional

import pytest

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import tracefile as stream
from pytest_graphcapture.summary.files import summarize_trace_file
from pytest_graphcapture.summary.live import summarize_profile
from pytest_graphcapture.summary.model import Summary
from pytest_graphcapture.summary.scan import summarize_events
from pytest_graphcapture.summary.tracefile import Unusual

KEY = CaptureKey("decode", 8)
PLATFORM = "cpu"  # what a trace file without device properties is summarized as


def op(name: str, ts: float, *, tid: int = 1, pid: int = 1, dur: float = 3) -> dict:
    return {
        "ph": "X",
        "cat": "cpu_op",
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": {"Input Dims": [[8, 64]], "Input type": ["float"]},
    }


def rt(name: str, ts: float, corr: int, *, tid: int = 1, pid: int = 1, **args: Any) -> dict:
    return {
        "ph": "X",
        "cat": "cuda_runtime",
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": 1,
        "args": {"correlation": corr, **args},
    }


def begin(ts: float, corr: int, **kw: Any) -> dict:
    return rt("hipStreamBeginCapture", ts, corr, **kw)


def end(ts: float, corr: int, **kw: Any) -> dict:
    return rt("hipStreamEndCapture", ts, corr, **kw)


def launch(kernel: str, ts: float, corr: int, **kw: Any) -> dict:
    return rt("hipLaunchKernel", ts, corr, kernel=kernel, grid=[1, 1, 1], block=[64, 1, 1], **kw)


# ---- readers: every way a summary is built must compute the same windows


def _from_events(events: list, tmp_path: Path) -> Summary:
    return summarize_events(events, key=KEY, platform=PLATFORM)


def _write(events: list, tmp_path: Path) -> Path:
    path = tmp_path / "capture.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def _sliced(events: list, tmp_path: Path) -> Summary:
    path = _write(events, tmp_path)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stream, "SLICE_BYTES", 200)  # slice boundaries between and inside events
        return summarize_trace_file(path, key=KEY)


def _whole_file(events: list, tmp_path: Path) -> Summary:
    """The whole-file reader: what a file the slice reader refuses is read with."""
    path = _write(events, tmp_path)

    def refuse(*args: Any, **kwargs: Any) -> dict:
        raise Unusual("read whole")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("pytest_graphcapture.summary.files.stream_trace", refuse)
        return summarize_trace_file(path, key=KEY)


class _KinetoEvent:
    """A live profile's event, answering through the methods ``summary.live`` reads."""

    def __init__(self, event: dict) -> None:
        self._event = event
        self._args = event.get("args", {})

    def activity_type(self) -> str:
        return self._event["cat"]

    def name(self) -> str:
        return self._event["name"]

    def start_ns(self) -> float:
        return self._event["ts"]

    def duration_ns(self) -> float:
        return self._event.get("dur", 0)

    def device_resource_id(self) -> Optional[int]:
        return self._event.get("tid")

    def structured_input_shapes(self) -> Any:
        return self._args.get("Input Dims")

    def dtypes(self) -> Any:
        return self._args.get("Input type")

    def correlation_id(self) -> int:
        return self._args.get("correlation", 0)

    def metadata_json(self) -> str:
        meta = {k: v for k, v in self._args.items() if k in ("kernel", "grid", "block")}
        return json.dumps(meta)[1:-1]


def _live(events: list, tmp_path: Path) -> Summary:
    kineto = [_KinetoEvent(e) for e in events]
    results = type("Results", (), {"events": lambda self: kineto})()
    prof = type("Profile", (), {"profiler": type("Inner", (), {"kineto_results": results})()})()
    return summarize_profile(prof, KEY, platform=PLATFORM, environment={})


FILE_READERS = {
    "events": _from_events,
    "sliced": _sliced,
    "whole-file": _whole_file,
}
READERS = {**FILE_READERS, "live": _live}


def _summaries(events: list, tmp_path: Path, readers: dict) -> dict[str, Summary]:
    out = {}
    for name, read in readers.items():
        folder = tmp_path / name
        folder.mkdir()
        out[name] = read(events, folder)
    files = [out[name].comparable() for name in FILE_READERS if name in out]
    assert files.count(files[0]) == len(files), "the file readers disagree"
    return out


def _kernels(summary: Summary) -> list:
    return sorted((k["name"], (k.get("op") or {}).get("name")) for k in summary.kernels)


def _ops(summary: Summary) -> list:
    return sorted(o["name"] for o in summary.ops)


# ---- the cases


def test_an_unclosed_second_capture_is_incomplete_and_other_threads_eager_work_is_not_in_it(tmp_path: Path) -> None:
    events = [
        begin(10, 1),
        op("aten::mm", 11),
        launch("gemm", 12, 2),
        end(20, 3),
        begin(30, 4),  # never ended: the profiler window closed first
        op("aten::add", 40, tid=2),  # eager work on another thread meanwhile
        launch("eager_add", 41, 5, tid=2),
    ]
    for reader, summary in _summaries(events, tmp_path, READERS).items():
        assert not summary.complete, reader
        assert re.search(
            r"the BeginCapture call at ts 30 on (pid 1, )?thread 1 has no EndCapture call after it on its thread, "
            r"so its capture window is cut off by the end of the profiler window",
            summary.incomplete_reason,
        ), (reader, summary.incomplete_reason)
        assert _kernels(summary) == [("gemm", "aten::mm")], reader
        assert _ops(summary) == ["aten::mm"], reader


def test_an_end_without_its_begin_is_flagged_even_when_a_full_pair_follows(tmp_path: Path) -> None:
    events = [
        op("aten::relu", 5),
        launch("relu_kernel", 6, 1),
        end(8, 2),  # its BeginCapture ran before the profiler window opened
        begin(10, 3),
        op("aten::mm", 11),
        launch("gemm", 12, 4),
        end(20, 5),
    ]
    for reader, summary in _summaries(events, tmp_path, READERS).items():
        assert not summary.complete, reader
        assert re.search(
            r"the EndCapture call at ts 8 on (pid 1, )?thread 1 has no BeginCapture call before it on its thread, "
            r"so its capture window is cut off by the start of the profiler window",
            summary.incomplete_reason,
        ), (reader, summary.incomplete_reason)
        assert ("gemm", "aten::mm") in _kernels(summary), reader


def test_overlapping_captures_on_two_threads_keep_both_graphs(tmp_path: Path) -> None:
    events = [
        begin(10, 1, tid=1),
        op("aten::mm", 11, tid=1),
        launch("gemm", 12, 2, tid=1),
        begin(40, 3, tid=2),
        end(50, 4, tid=1),
        op("aten::add", 60, tid=2),
        launch("add_kernel", 61, 5, tid=2),
        op("aten::relu", 65, tid=1),  # thread 1's capture ended at 50: eager, although thread 2 still captures
        launch("relu_kernel", 66, 6, tid=1),
        end(80, 7, tid=2),
    ]
    for reader, summary in _summaries(events, tmp_path, READERS).items():
        assert summary.complete, (reader, summary.incomplete_reason)
        assert _kernels(summary) == [("add_kernel", "aten::add"), ("gemm", "aten::mm")], reader
        assert _ops(summary) == ["aten::add", "aten::mm"], reader
        assert summary.launches["total"] == 2, reader


def test_each_end_closes_one_capture_of_its_own_thread(tmp_path: Path) -> None:
    events = [
        begin(10, 1, tid=1),
        op("aten::mm", 11, tid=1),
        launch("gemm", 12, 2, tid=1),
        begin(40, 3, tid=2),
        end(50, 4, tid=1),
        op("aten::add", 60, tid=2),
        launch("add_kernel", 61, 5, tid=2),
    ]
    for reader, summary in _summaries(events, tmp_path, READERS).items():
        assert not summary.complete, reader
        assert re.search(
            r"BeginCapture call at ts 40 on (pid 1, )?thread 2 has no EndCapture", summary.incomplete_reason
        )
        assert "EndCapture call at" not in summary.incomplete_reason, reader  # thread 1's End is paired
        assert _kernels(summary) == [("add_kernel", "aten::add"), ("gemm", "aten::mm")], reader


def test_several_unpaired_calls_are_named_in_one_sentence_each(tmp_path: Path) -> None:
    events = [end(5, 1, tid=3), end(6, 2, tid=4), begin(10, 3), op("aten::mm", 11), launch("gemm", 12, 4)]
    events += [begin(20 + i, 10 + i, tid=10 + i) for i in range(4)]
    summary = summarize_events(events, key=KEY, platform=PLATFORM)
    assert not summary.complete
    assert (
        "5 BeginCapture calls (at ts 10 on pid 1, thread 1; at ts 20 on pid 1, thread 10; at ts 21 on pid 1, "
        "thread 11 and 2 more) have no EndCapture call after it on its thread" in summary.incomplete_reason
    )
    assert (
        "2 EndCapture calls (at ts 5 on pid 1, thread 3; at ts 6 on pid 1, thread 4) have no BeginCapture call"
        in summary.incomplete_reason
    )


def test_captures_pair_per_stream_where_the_trace_records_it(tmp_path: Path) -> None:
    events = [begin(10, 1, stream=7), op("aten::mm", 11), launch("gemm", 12, 2), end(20, 3, stream=8)]
    for reader, summary in _summaries(events, tmp_path, FILE_READERS).items():
        assert not summary.complete, reader
        assert "BeginCapture call at ts 10 on pid 1, thread 1, stream 7 has no EndCapture" in summary.incomplete_reason
        assert "EndCapture call at ts 20 on pid 1, thread 1, stream 8 has no BeginCapture" in summary.incomplete_reason
    paired = [begin(10, 1, stream=7), op("aten::mm", 11), launch("gemm", 12, 2), end(20, 3, stream=7)]
    assert summarize_events(paired, key=KEY, platform=PLATFORM).complete


def test_threads_of_different_processes_are_apart(tmp_path: Path) -> None:
    """Thread ids are per process (a merged multi-rank trace): another process's thread 1 is not the capture's."""
    events = [
        begin(10, 1, pid=1),
        op("aten::mm", 11, pid=1),
        op("aten::add", 12, pid=2, dur=10),  # an eager op of process 2's thread 1 around process 1's launch
        launch("gemm", 13, 2, pid=1),
        launch("add_kernel", 14, 3, pid=2),
        end(50, 4, pid=1),
    ]
    for reader, summary in _summaries(events, tmp_path, FILE_READERS).items():
        assert summary.complete, (reader, summary.incomplete_reason)
        assert _kernels(summary) == [("gemm", "aten::mm")], reader
        assert _ops(summary) == ["aten::mm"], reader


def test_a_capture_thread_that_recorded_no_op_bounds_its_process_s_ops(tmp_path: Path) -> None:
    """Traces that number runtime-call threads apart from op threads keep their ops in the window."""
    events = [
        op("aten::fill_", 5, tid=100),
        begin(10, 1, tid=-7),
        op("aten::mm", 11, tid=100),
        launch("gemm", 12, 2, tid=-7),
        end(20, 3, tid=-7),
        op("aten::sum", 30, tid=100),
    ]
    for reader, summary in _summaries(events, tmp_path, READERS).items():
        assert summary.complete, reader
        assert _ops(summary) == ["aten::mm"], reader
        assert _kernels(summary) == [("gemm", "aten::mm")], reader


def test_a_capture_call_without_a_time_is_named(tmp_path: Path) -> None:
    events = [begin("soon", 1), op("aten::mm", 11), launch("gemm", 12, 2), end(20, 3)]
    for reader, summary in _summaries(events, tmp_path, FILE_READERS).items():
        assert not summary.complete, reader
        assert summary.incomplete_reason == (
            "the EndCapture call at ts 20 on pid 1, thread 1 has no BeginCapture call before it on its thread, so "
            "its capture window is cut off by the start of the profiler window (or began on another thread); "
            "the BeginCapture call on pid 1, thread 1 has no time stamp, so its capture window is unknown"
        ), reader
