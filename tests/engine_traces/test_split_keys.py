"""A trace splits into the keys its engine's markers name, each with its graphs in capture order."""

from __future__ import annotations

import gzip
import json

import pytest

from pytest_graphcapture.errors import TraceFormatError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_file, summarize_trace_keys
from pytest_graphcapture.summary.model import graph_count


def _only(folder, pattern="**/*.json.gz"):
    (path,) = sorted(folder.glob(pattern))
    return path


def _launch_kernels(summary) -> set:
    return {k["name"] for k in summary.kernels}


def test_vllm_trace_splits_into_full_sizes_and_a_piecewise_size_of_three_graphs(built):
    read = summarize_trace_keys(_only(built("vllm")))
    assert read.split_by == "annotations"
    keys = [s.key for s in read.summaries]
    assert keys == [
        CaptureKey("decoder", 8, "FULL"),
        CaptureKey("decoder", 4, "FULL"),
        CaptureKey("decoder", 2, "FULL"),
        CaptureKey("decoder", 4, "PIECEWISE"),
    ]
    assert [graph_count(s) for s in read.summaries] == [1, 1, 1, 3]
    full4, piecewise = read.summaries[1], read.summaries[3]
    # The pieces together hold the FULL graph's launches; the eager attention between them is no graph's.
    assert piecewise.launches["total"] == full4.launches["total"]
    assert sum(g.launches["total"] for g in piecewise.graphs) == piecewise.launches["total"]
    assert "eager_paged_attention_kernel" not in _launch_kernels(piecewise)
    assert all(g.launches["total"] > 0 for g in piecewise.graphs)
    # Each size's ops carry its own batch size.
    assert any([8, 4096] in op["input_dims"] for op in read.summaries[0].ops)
    assert not any([8, 4096] in op["input_dims"] for op in full4.ops)


def test_a_one_graph_key_is_stored_exactly_as_before(built):
    read = summarize_trace_keys(_only(built("vllm")))
    full = read.summaries[0]
    assert full.graphs is None and "graphs" not in full.to_dict()
    piecewise = read.summaries[3].to_dict()
    assert len(piecewise["graphs"]) == 3 and set(piecewise["graphs"][0]) == {"kernels", "ops", "launches", "complete"}


def test_a_per_size_sglang_file_is_one_key_named_by_the_file(built):
    folder = built("sglang-per-bs")
    path = folder / "graph_capture_profile" / "DecodeCudaGraphRunner_bs_4_rank0.json.gz"
    read = summarize_trace_keys(path)
    assert read.split_by == "file name"
    assert [s.key for s in read.summaries] == [CaptureKey("DecodeCudaGraphRunner", 4)]
    # Today's reader of one trace gives the same summary.
    assert read.summaries[0] == summarize_trace_file(path)


def test_the_single_sglang_trace_maps_its_windows_to_the_batch_sizes_in_capture_order(built):
    path = _only(built("sglang-single"))
    read = summarize_trace_keys(path, batch_sizes=[8, 4, 2])
    assert read.split_by == "windows" and read.windows == 3
    assert [s.key for s in read.summaries] == [CaptureKey("DecodeCudaGraphRunner", bs) for bs in (8, 4, 2)]
    assert any([8, 4096] in op["input_dims"] for op in read.summaries[0].ops)
    assert any([2, 4096] in op["input_dims"] for op in read.summaries[2].ops)
    per_size = summarize_trace_keys(
        built("sglang-per-bs") / "graph_capture_profile" / "DecodeCudaGraphRunner_bs_2_rank0.json.gz"
    )
    assert read.summaries[2] == per_size.summaries[0]


def test_a_batch_size_listed_twice_in_a_row_is_one_key_of_two_graphs(built):
    read = summarize_trace_keys(_only(built("sglang-single")), batch_sizes=[8, 8, 2])
    assert [(s.key.batch_size, graph_count(s)) for s in read.summaries] == [(8, 2), (2, 1)]


def test_the_single_trace_without_batch_sizes_is_refused_naming_its_window_count(built):
    path = _only(built("sglang-single"))
    with pytest.raises(TraceFormatError, match="holds 3 capture windows with no batch-size marker"):
        summarize_trace_keys(path)
    with pytest.raises(TraceFormatError, match="holds 3 capture windows but 2 batch sizes were given"):
        summarize_trace_keys(path, batch_sizes=[8, 4])


@pytest.mark.parametrize(
    ("sizes", "piecewise"),
    [((16, 1), (16, 2)), ((64, 32, 16, 8, 4), (1, 4)), ((3,), None)],
    ids=["two-sizes-two-pieces", "five-sizes-four-pieces", "one-size-no-piecewise"],
)
def test_other_shapes_of_the_layout_split_the_same_way(built, sizes, piecewise):
    read = summarize_trace_keys(_only(built("vllm", sizes=sizes, piecewise=piecewise)))
    expected = [(bs, "FULL", 1) for bs in sizes] + ([(piecewise[0], "PIECEWISE", piecewise[1])] if piecewise else [])
    assert [(s.key.batch_size, s.key.variant, graph_count(s)) for s in read.summaries] == expected


def test_a_subsystem_prefix_names_the_runner(built, tmp_path):
    source = _only(built("vllm", sizes=(2,), piecewise=None))
    with gzip.open(source, "rt") as f:
        trace = json.load(f)
    for event in trace["traceEvents"]:
        if event.get("cat") == "user_annotation":
            event["name"] = "speculator_" + event["name"]
    renamed = tmp_path / "1701234567890.pt.trace.json.gz"
    with gzip.open(renamed, "wt", compresslevel=1) as f:
        f.write(json.dumps(trace))
    (summary,) = summarize_trace_keys(renamed).summaries
    assert summary.key == CaptureKey("speculator", 2, "FULL")


def test_a_range_around_no_capture_window_is_an_empty_key(built, tmp_path):
    source = _only(built("vllm", sizes=(2,), piecewise=None))
    with gzip.open(source, "rt") as f:
        trace = json.load(f)
    last = max(e["ts"] + e.get("dur", 0) for e in trace["traceEvents"])
    trace["traceEvents"].append(
        {
            "ph": "X",
            "cat": "user_annotation",
            "name": "capture_1_FULL",
            "pid": 251,
            "tid": 251,
            "ts": last + 10,
            "dur": 5,
        }
    )
    path = tmp_path / "decoder.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write(json.dumps(trace))
    read = summarize_trace_keys(path)
    assert read.empty == [CaptureKey("decoder", 1, "FULL")]
