"""``golden.check_traces`` in a test, and keys of several graphs in golden files."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from helpers import run

from pytest_graphcapture.errors import GoldenError, UsageError
from pytest_graphcapture.golden import store
from pytest_graphcapture.golden.gate import check_result
from pytest_graphcapture.golden.traces import split_single_capture
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_keys

TEST = """
def test_engine_capture(golden):
    golden.check_traces({traces!r})
"""


def test_check_traces_gates_a_test_like_golden_check(pytester, built):
    good, bad = built("vllm"), built("vllm", drop=(4, "PIECEWISE", 2))
    pytester.makepyfile(test_engine=TEST.format(traces=str(good)))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    folder = pytester.path / "goldens" / "rocm-gfx942" / "test_engine.py" / "test_engine_capture"
    assert len(list(folder.glob("decoder_bs_*.json"))) == 4
    run(pytester).assert_outcomes(passed=1)
    pytester.makepyfile(test_engine=TEST.format(traces=str(bad)))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*bs=4 variant=PIECEWISE graph 2 of 3 (*", "*kernels: 1 removed*"])


def test_check_traces_of_an_empty_folder_fails_in_one_line(pytester):
    pytester.mkdir("capture_traces")
    pytester.makepyfile(test_engine=TEST.format(traces="capture_traces"))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden.check_traces: capture_traces: no capture traces*"])


def test_a_single_capture_run_is_split_by_its_windows(built, tmp_path):
    """The plugin's --graph-capture-trace=single result: the keys, in capture order, are its windows."""
    (trace,) = built("sglang-single").glob("**/*.json.gz")
    keys = [CaptureKey("tiny", bs) for bs in (8, 4, 2)]
    items = [SimpleNamespace(key=k, summary=None, metrics=None) for k in keys]

    class Result(list):
        runner_name, platform, mode, world_size, single_trace_path = "tiny", "rocm-gfx942", "single", 1, trace

    split = split_single_capture(Result(items))
    assert [k.key for k in split] == keys
    outcome = check_result(Result(items), golden_dir=tmp_path, folder=tmp_path / "f", update="new")
    assert [k.outcome for k in outcome.keys] == ["created"] * 3
    assert [p.name for p in sorted((tmp_path / "f").iterdir())] == [
        "tiny_bs_2.json",
        "tiny_bs_4.json",
        "tiny_bs_8.json",
    ]
    with pytest.raises(UsageError, match="holds 3 capture windows but 2 batch sizes"):
        split_single_capture(Result(items[:2]))


def test_a_golden_of_several_graphs_must_add_up(built, tmp_path):
    (piecewise,) = [s for s in summarize_trace_keys(next(built("vllm").glob("**/*.json.gz"))).summaries if s.graphs]
    data = piecewise.to_dict()
    path = tmp_path / "decoder_bs_4_PIECEWISE.json"
    store.write_golden(path, data)
    assert store.read_golden(path) == piecewise
    data["graphs"][1]["launches"]["total"] += 1
    path.write_text(json.dumps(data))
    with pytest.raises(GoldenError, match="launches must be the sum of the 3 graphs"):
        store.read_golden(path)
    data["graphs"] = data["graphs"][:1]
    path.write_text(json.dumps(data))
    with pytest.raises(GoldenError, match="graphs must be a list of two or more graphs"):
        store.read_golden(path)
