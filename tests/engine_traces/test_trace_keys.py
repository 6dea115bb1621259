"""Keys that cannot lie: every capture window is one key's graph, named by the trace's own markers.

Each case runs through both routes that share :mod:`pytest_graphcapture.golden.traces`:
``graphcapture check`` (exit 2 and one line for a refused trace) and ``golden.check_traces``
in a pytest run (the test fails with one line).
"""

from __future__ import annotations

import functools
import gzip
import shutil
from pathlib import Path

import msgspec
import pytest
from helpers import check_cli as check
from helpers import run

from pytest_graphcapture.errors import TraceFormatError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_keys
from pytest_graphcapture.summary.model import graph_count

TEST = """
def test_engine_capture(golden):
    golden.check_traces({traces!r}, **{kwargs!r})
"""


def gate_in_pytest(pytester, traces: Path, **kwargs):
    """``golden.check_traces(traces, **kwargs)`` in a pytest run of its own: its outcome and output."""
    pytester.makepyfile(test_engine=TEST.format(traces=str(traces), kwargs=kwargs))
    return run(pytester, "--update-golden")


def one_failure_line(result, *parts: str) -> None:
    """The pytest run failed, and one line says all of ``parts``."""
    result.assert_outcomes(failed=1)
    lines = [line for line in result.outlines if line.startswith("golden.check_traces: ")]
    assert lines and all(p in lines[0] for p in parts), result.outlines


@functools.cache
def _load(path: Path) -> dict:
    with gzip.open(path, "rb") as f:
        return msgspec.json.decode(f.read())


def load(path: Path) -> dict:
    """The trace at ``path`` (read once): a copy of its own down to each event, whose fields a test may change."""
    trace = _load(path)
    return {**trace, "traceEvents": [dict(e) for e in trace["traceEvents"]]}


def save(trace: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(msgspec.json.encode(trace))
    return path


def ranges(trace: dict) -> dict:
    """The ``capture_{bs}_{mode}`` annotations of ``trace`` by name."""
    return {e["name"]: e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"}


def vllm_trace(built, **changes) -> tuple[Path, dict]:
    (path,) = built("vllm", **changes).glob("**/*.json.gz")
    return path, load(path)


# 3. A capture window in no capture_{bs}_{mode} range.

UNKEYED = [((8, 4, 2), (4, 3), 16, "after"), ((16, 1), None, 3, "before"), ((32,), (8, 2), 1, "between")]


def _with_unkeyed_window(built, capture, make_traces, tmp_path, sizes, piecewise, bs, where) -> tuple[Path, Path]:
    """The vLLM trace of ``sizes`` (its folder), and a copy with one more graph of ``bs`` in no range."""
    clean, trace = vllm_trace(built, sizes=sizes, piecewise=piecewise)
    events = trace["traceEvents"]
    marks = sorted(ranges(trace).values(), key=lambda e: e["ts"])
    if where == "after":
        at = max(e["ts"] + e.get("dur", 0) for e in events) + make_traces.GAP
    elif where == "before":  # sooner than the real window the copies are made from: moved to before the first range
        at = marks[0]["ts"] - 2 * (capture.end - capture.start) - 10 * make_traces.GAP
    else:  # between the first two ranges: the later events move on to make room
        room = capture.end - capture.start + 2 * make_traces.GAP
        cut = marks[0]["ts"] + marks[0]["dur"]
        for event in events:
            if event["ts"] > cut:
                event["ts"] += room
        at = cut + make_traces.GAP / 2
    extra, _ = capture.shape(bs, at)
    events += extra
    return clean.parent, save(trace, tmp_path / "more" / "capture_traces" / clean.name).parent


@pytest.mark.parametrize(("sizes", "piecewise", "bs", "where"), UNKEYED, ids=["after", "before", "between"])
def test_a_window_in_no_capture_range_fails_the_cli_unless_ignored(
    built, capture, make_traces, tmp_path, capsys, sizes, piecewise, bs, where
):
    clean, more = _with_unkeyed_window(built, capture, make_traces, tmp_path, sizes, piecewise, bs, where)
    goldens = tmp_path / "goldens"
    assert check(capsys, clean, "--golden-dir", goldens, "--update")[0] == 0
    code, out, err = check(capsys, more, "--golden-dir", goldens)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "1 capture window" in err and "in no capture_{bs}_{mode} range belongs to no key" in err
    assert "--ignore-unkeyed-windows" in err
    code, out, err = check(capsys, more, "--golden-dir", goldens, "--ignore-unkeyed-windows")
    assert code == 0, out + err
    assert "in no capture_{bs}_{mode} range belongs to no key: not checked" in out
    n = len(sizes) + (1 if piecewise else 0)
    assert f"{n} key(s) match their goldens" in out


@pytest.mark.parametrize(("sizes", "piecewise", "bs", "where"), UNKEYED[:2], ids=["after", "before"])
def test_a_window_in_no_capture_range_fails_check_traces_unless_ignored(
    built, capture, make_traces, tmp_path, pytester, sizes, piecewise, bs, where
):
    _, more = _with_unkeyed_window(built, capture, make_traces, tmp_path, sizes, piecewise, bs, where)
    one_failure_line(gate_in_pytest(pytester, more), "1 capture window", "ignore_unkeyed_windows=True")
    result = gate_in_pytest(pytester, more, ignore_unkeyed_windows=True)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["*golden.check_traces: *in no capture_{bs}_{mode} range belongs to no key: not checked*"]
    )


# 6. Batch sizes for a single trace do not re-key traces whose name or ranges give their keys.


def test_batch_sizes_leave_a_per_size_trace_its_own_key(built, tmp_path, capsys):
    folder = tmp_path / "graph_capture_profile"
    (single,) = built("sglang-single").glob("**/*.json.gz")
    folder.mkdir()
    shutil.copy(single, folder)
    per_size = (
        built("sglang-per-bs", sizes=(32,)) / "graph_capture_profile" / "DecodeCudaGraphRunner_bs_32_rank0.json.gz"
    )
    shutil.copy(per_size, folder / "PrefillCudaGraphRunner_bs_32_rank0.json.gz")
    goldens = tmp_path / "goldens"
    code, out, err = check(capsys, folder, "--golden-dir", goldens, "--batch-sizes", "8,4,2", "--update")
    assert code == 0, out + err
    written = sorted(p.name for p in (goldens / "rocm-gfx942" / "engine-traces").iterdir())
    assert written == [
        "DecodeCudaGraphRunner_bs_2.json",
        "DecodeCudaGraphRunner_bs_4.json",
        "DecodeCudaGraphRunner_bs_8.json",
        "PrefillCudaGraphRunner_bs_32.json",
    ]


@pytest.mark.parametrize(
    ("layout", "changes", "sizes"),
    [
        ("sglang-per-bs", {"sizes": (32,)}, "8"),
        ("sglang-per-bs", {"sizes": (16,)}, "2"),
        ("vllm", {"sizes": (16, 1), "piecewise": None}, "2,1"),
        ("vllm", {"sizes": (4,), "piecewise": (2, 2)}, "4,2,2"),
    ],
    ids=["per-size-32-as-8", "per-size-16-as-2", "vllm-two-sizes", "vllm-with-pieces"],
)
def test_batch_sizes_no_trace_takes_are_refused_and_nothing_is_written(
    built, tmp_path, capsys, pytester, layout, changes, sizes
):
    folder = built(layout, **changes)
    goldens = tmp_path / "goldens"
    code, out, err = check(capsys, folder, "--golden-dir", goldens, "--batch-sizes", sizes, "--update")
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    assert f"batch sizes {sizes} were given, but no trace is one trace of a whole capture" in err
    assert not goldens.exists()
    listed = [int(b) for b in sizes.split(",")]
    one_failure_line(gate_in_pytest(pytester, folder, batch_sizes=listed), f"batch sizes {sizes} were given")


# 7. Sizes in an order the windows' own shapes contradict.


@pytest.mark.parametrize(
    ("captured", "given"),
    [
        ((8, 4, 2), (2, 4, 8)),
        ((64, 16, 4, 1), (1, 4, 16, 64)),
        ((64, 16, 4, 1), (16, 64, 4, 1)),
        ((8, 8, 2), (2, 8, 8)),
    ],
    ids=["reversed", "reversed-four", "two-swapped", "repeated-size"],
)
def test_sizes_the_windows_contradict_are_refused_naming_their_order(
    built, tmp_path, capsys, pytester, captured, given
):
    folder = built("sglang-single", sizes=captured)
    listed = ",".join(map(str, given))
    code, out, err = check(capsys, folder, "--golden-dir", tmp_path / "goldens", "--batch-sizes", listed, "--update")
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    shown = ",".join(map(str, captured))
    assert f"given in capture order ({listed}) contradict the windows" in err and f"show {shown} in capture" in err
    assert not (tmp_path / "goldens").exists()
    one_failure_line(gate_in_pytest(pytester, folder, batch_sizes=list(given)), f"show {shown} in capture order")


@pytest.mark.parametrize(
    ("captured", "given"),
    [((8, 4, 2), (8, 4, 2)), ((8, 4, 2), (16, 8, 4)), ((8, 8, 2), (8, 8, 2)), ((4, 4), (4, 4))],
    ids=["right", "unseen-size-ambiguous", "repeated-right", "one-size"],
)
def test_sizes_the_windows_do_not_contradict_are_taken(built, capture, captured, given):
    (path,) = built("sglang-single", sizes=captured).glob("**/*.json.gz")
    read = summarize_trace_keys(path, batch_sizes=list(given))
    assert [s.key.batch_size for s in read.summaries] == list(dict.fromkeys(given))


def test_a_single_trace_with_a_handler_time_stamp_is_still_a_single_trace(built, tmp_path):
    """A trace handler's ``.{ms}.pt.trace`` suffix does not turn the whole capture into one ``bs=?`` key."""
    (single,) = built("sglang-single").glob("**/*.json.gz")
    stamped = tmp_path / single.name.replace(".json.gz", ".1701234567890.pt.trace.json.gz")
    shutil.copy(single, stamped)
    with pytest.raises(TraceFormatError, match="holds 3 capture windows with no batch-size marker"):
        summarize_trace_keys(stamped)
    read = summarize_trace_keys(stamped, batch_sizes=[8, 4, 2])
    assert [s.key for s in read.summaries] == [CaptureKey("DecodeCudaGraphRunner", bs, None, 0) for bs in (8, 4, 2)]


# 8. Nested or overlapping capture ranges.


def test_a_window_in_nested_ranges_is_the_innermost_ones(built, tmp_path):
    """A range around the bs=4 and bs=2 ranges, the bs=2 range gone: bs=2's window is the outer key's only."""
    path, trace = vllm_trace(built)
    marks = ranges(trace)
    trace["traceEvents"].remove(marks["capture_2_FULL"])
    start, two = marks["capture_4_FULL"]["ts"] - 1, marks["capture_2_FULL"]
    outer = {**two, "name": "capture_16_FULL", "ts": start, "dur": two["ts"] + two["dur"] - start + 1}
    trace["traceEvents"].append(outer)
    read = summarize_trace_keys(save(trace, tmp_path / "nested" / "decoder.json.gz"))
    assert [(s.key.batch_size, s.key.variant, graph_count(s)) for s in read.summaries] == [
        (8, "FULL", 1),
        (16, "FULL", 1),
        (4, "FULL", 1),
        (4, "PIECEWISE", 3),
    ]
    assert sum(graph_count(s) for s in read.summaries) == read.windows
    # The bs=16 key holds the bs=2 graph, not the bs=4 one as well.
    assert any([2, 4096] in op["input_dims"] for op in read.summaries[1].ops)
    assert not any([4, 4096] in op["input_dims"] for op in read.summaries[1].ops)


def _overlapping(built, tmp_path, case: str) -> Path:
    path, trace = vllm_trace(built, sizes=(8, 4), piecewise=(2, 2))
    marks = ranges(trace)
    eight, four = marks["capture_8_FULL"], marks["capture_4_FULL"]
    if case == "partial":  # from inside bs=8's range (after its window began) into bs=4's, past its window's start
        start = eight["ts"] + eight["dur"] / 2
        extra = {**eight, "name": "capture_32_FULL", "ts": start, "dur": four["ts"] + four["dur"] / 2 - start}
    elif case == "same-span":  # a second name on exactly bs=4's range
        extra = {**four, "name": "capture_6_FULL"}
    else:  # an outer range that keeps none of its own: around both FULL ranges
        start = eight["ts"] - 1
        extra = {**eight, "name": "speculator_capture_8_FULL", "ts": start, "dur": four["ts"] + four["dur"] + 1 - start}
    trace["traceEvents"].append(extra)
    return save(trace, tmp_path / case / "capture_traces" / path.name).parent


@pytest.mark.parametrize(
    ("case", "named"),
    [
        ("partial", ("capture_32_FULL", "capture_4_FULL")),
        ("same-span", ("capture_4_FULL", "capture_6_FULL")),
        ("outer-empty", ("speculator_capture_8_FULL", "capture_")),
    ],
)
def test_a_window_in_two_ranges_that_do_not_nest_is_refused_by_both_routes(
    built, tmp_path, capsys, pytester, case, named
):
    folder = _overlapping(built, tmp_path, case)
    code, out, err = check(capsys, folder, "--golden-dir", tmp_path / "goldens", "--update")
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    assert all(name in err for name in named) and "a window belongs to exactly one key" in err, err
    assert not (tmp_path / "goldens").exists()
    one_failure_line(gate_in_pytest(pytester, folder), *named, "exactly one key")


# 15. A key twice in one trace, and a size given twice apart.


@pytest.mark.parametrize("sizes", ["8,4,8", "2,8,4,2", "4,4,2,4"])
def test_a_size_given_twice_apart_is_named_with_its_option(built, tmp_path, capsys, pytester, sizes):
    folder = built("sglang-single")
    code, out, err = check(capsys, folder, "--golden-dir", tmp_path / "goldens", "--batch-sizes", sizes)
    twice = next(b for i, b in enumerate(sizes.split(",")) if b in sizes.split(",")[:i])
    assert code == 2 and err.strip().splitlines() == [
        f"graphcapture check: error: --batch-sizes {sizes}: {twice} is given twice, apart; a size repeats only "
        f"in a row (one key of that many graphs), in capture order"
    ]
    listed = [int(b) for b in sizes.split(",")]
    one_failure_line(gate_in_pytest(pytester, folder, batch_sizes=listed), f"{twice} is given twice, apart")


@pytest.mark.parametrize("renamed", [("capture_4_FULL", "capture_8_FULL"), ("capture_2_FULL", "capture_4_PIECEWISE")])
def test_a_key_twice_in_one_trace_names_that_trace_once(built, tmp_path, capsys, pytester, renamed):
    path, trace = vllm_trace(built)
    ranges(trace)[renamed[0]]["name"] = renamed[1]
    folder = save(trace, tmp_path / "twice" / "capture_traces" / path.name).parent
    code, out, err = check(capsys, folder, "--golden-dir", tmp_path / "goldens")
    assert code == 2 and len(err.strip().splitlines()) == 1, out + err
    assert "two traces" not in err and "is captured twice in this trace" in err
    assert err.count(str(folder / path.name)) == 1
    one_failure_line(gate_in_pytest(pytester, folder), "is captured twice in this trace")
