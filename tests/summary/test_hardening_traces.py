"""Bad trace files into the summarizer, the CLI and a pytest run: one clear line, never a traceback.

Each input is either *rejected* (a TraceFormatError naming the file and the problem; CLI exit 2)
or *tolerated* (a damaged field inside an otherwise valid trace is treated as missing, so real
traces with legacy or partial fields still summarize).
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_graphcapture.errors import TraceFormatError
from pytest_graphcapture.summary.files import summarize_trace_file
from pytest_graphcapture.tools.cli import main as cli_main

OP = {
    "ph": "X",
    "cat": "cpu_op",
    "name": "aten::mm",
    "ts": 1,
    "dur": 1,
    "args": {"Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]},
}


def trace_bytes(events: list, **top: object) -> bytes:
    return json.dumps({"traceEvents": events, **top}).encode()


REJECTED = {
    "empty file": (b"", "file is empty"),
    "not gzip": (b"\x00\x01 plain binary", "not a gzip or JSON file"),
    "corrupt gzip": (gzip.compress(trace_bytes([OP]))[:-12] + b"garbage!", "gzip"),
    "truncated json": (trace_bytes([OP])[:-7], "truncated JSON"),
    "top level a list": (b"[1, 2, 3]", "top level is a JSON list"),
    "top level a string": (b'"trace"', "content does not start with"),
    "no traceEvents": (b'{"schemaVersion": 1}', "no traceEvents key"),
    "traceEvents not a list": (b'{"traceEvents": {"a": 1}}', "traceEvents is a JSON dict"),
    "event of the wrong type": (b'{"traceEvents": [1, "x"]}', "traceEvents[0] is a JSON int"),
    "NaN": (trace_bytes([OP]).replace(b'"ts": 1', b'"ts": NaN'), "NaN"),
    "Infinity": (trace_bytes([OP]).replace(b'"ts": 1', b'"ts": -Infinity'), "Infinity"),
    "not UTF-8": (b'{"traceEvents": [{"name": "\xff\xfe"}]}', "not UTF-8"),
    "not UTF-8 in Input type": (trace_bytes([OP]).replace(b'"float"]', b'"fl\xc0\x80oat"]'), "not UTF-8"),
    "not UTF-8 in Input Dims": (trace_bytes([OP]).replace(b"[3, 4]]", b'[3, "\xed\xa0\x80"]]'), "not UTF-8"),
    "Input Dims a string": (trace_bytes([{**OP, "args": {"Input Dims": "oops"}}]), 'Input Dims is "oops"'),
    "Input Dims with a string shape": (
        trace_bytes([{**OP, "args": {"Input Dims": [[2, 3], "x"]}}]),
        'cpu_op event "aten::mm" at ts 1: Input Dims is [[2, 3], "x"], expected a list with one shape',
    ),
    "Input Dims with a float": (
        trace_bytes([OP]).replace(b"[3, 4]]", b"[1e999]]"),
        "Input Dims is [[2, 3], [Infinity]]",
    ),
    "Input Dims with a 5000-digit integer": (
        trace_bytes([OP]).replace(b"[3, 4]]", b"[" + b"7" * 5000 + b"]]"),
        "Exceeds the limit (4300 digits)",
    ),
    "Input type not strings": (
        trace_bytes([{**OP, "args": {"Input type": [1]}}]),
        "Input type is [1], expected a list",
    ),
    "lone surrogate escape in an op name": (
        trace_bytes([{**OP, "name": "aten::mm\ud800"}]),
        'cpu_op event "aten::mm\\ud800" at ts 1: the name holds a lone surrogate escape',
    ),
    "lone surrogate escape in a kernel name": (
        trace_bytes([{"ph": "X", "cat": "kernel", "name": "k\udfff", "ts": 5, "args": {"correlation": 1}}]),
        "kernel event",
    ),
    "nested 985 deep": (
        trace_bytes([{**OP, "x": 1}]).replace(b'"x": 1', b'"x": ' + b"[" * 985 + b"]" * 985),
        "nesting too deep",
    ),
    "nested 101 deep": (
        trace_bytes([{**OP, "x": 1}]).replace(b'"x": 1', b'"x": ' + b"[" * 98 + b"]" * 98),
        "invalid JSON: nesting too deep (more than 100 levels of arrays and objects",
    ),
}

TOLERATED = {
    "missing args": [{k: v for k, v in OP.items() if k != "args"}],
    "args not an object": [{**OP, "args": [1, 2]}],
    "Input Dims and Input type null": [{**OP, "args": {"Input Dims": None, "Input type": None}}],
    "cat a list or an object": [{**OP, "cat": ["cpu_op"]}, {**OP, "cat": {"a": 1}}, OP],
    "integer ts beyond the double range and a float dur": [{**OP, "ts": 10**400, "dur": 1.5}, OP],
    "nested 100 deep (the limit)": [{**OP, "x": json.loads("[" * 97 + "]" * 97)}],
    "name not a string": [{**OP, "name": 12}, OP],
    "huge name (1 MB)": [{**OP, "name": "k" * 1_000_000}],
    "ts as float and missing dur": [{**OP, "ts": 1.5}, {k: v for k, v in OP.items() if k != "dur"}],
}


#: Header fields and annotations a summary reads but never compares, with values no golden can hold as they are.
ODD_HEADERS = {
    "lone surrogate in the CUDA version": (trace_bytes([OP], cuda_runtime_version="12.\ud800"), r'"12.\\ud800"'),
    "lone surrogate in the torch version": (trace_bytes([OP], metadata={"torch_version": "\udfff"}), r'"\\udfff"'),
    "lone surrogate as the GPU architecture": (
        trace_bytes([OP], deviceProperties=[{"id": 0, "computeMajor": 9, "computeMinor": 4, "gcnArchName": "\ud800"}]),
        '"cuda-sm94"',
    ),
    "rank beyond the double range": (
        trace_bytes([OP], distributedInfo={"rank": "@"}).replace(b'"@"', b"1e999"),
        '"rank": null',
    ),
    "batch-size annotation of 5000 digits": (
        trace_bytes([OP, {"ph": "X", "cat": "user_annotation", "name": "bs=" + "7" * 5000, "ts": 0, "dur": 9}]),
        '"batch_size": 0',
    ),
}


@pytest.mark.parametrize("case", sorted(ODD_HEADERS))
def test_header_fields_no_golden_can_hold_are_made_writable(tmp_path: Path, case: str, capsys) -> None:
    """The environment is informational: a damaged header field is written escaped or null, never a crash."""
    data, written = ODD_HEADERS[case]
    path = write(tmp_path, "trace.json", data)
    assert cli_main(["summarize", str(path)]) == 0
    out = capsys.readouterr().out
    assert written in out
    out.encode("utf-8")


def write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected_by_the_summarizer_with_one_line_naming_file_and_problem(tmp_path: Path, case: str) -> None:
    data, problem = REJECTED[case]
    path = write(tmp_path, "R_bs_2_rank0.json", data)
    with pytest.raises(TraceFormatError) as info:
        summarize_trace_file(path)
    message = str(info.value)
    assert message.startswith(str(path)) and problem in message and "\n" not in message


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_rejected_by_the_cli_with_exit_2_and_one_line(tmp_path: Path, case: str, capsys: pytest.CaptureFixture) -> None:
    data, problem = REJECTED[case]
    path = write(tmp_path, "R_bs_2_rank0.json", data)
    assert cli_main(["summarize", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err and problem in err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", sorted(TOLERATED))
def test_damaged_fields_are_treated_as_missing(tmp_path: Path, case: str) -> None:
    path = write(tmp_path, "R_bs_2_rank0.json", trace_bytes(TOLERATED[case]))
    summary = summarize_trace_file(path)
    assert summary.key.batch_size == 2
    assert all(isinstance(op["name"], str) and isinstance(op["input_dims"], list) for op in summary.ops)


def test_a_million_tiny_events_summarize(tmp_path: Path) -> None:
    event = b'{"ph":"X","cat":"cpu_op","name":"aten::add","ts":1,"dur":1,"args":{"Input Dims":[[1]]}}'
    path = tmp_path / "R_bs_1_rank0.json.gz"
    with gzip.open(path, "wb", compresslevel=1) as handle:
        handle.write(b'{"traceEvents":[' + b",".join([event] * 1_000_000) + b"]}")
    summary = summarize_trace_file(path)
    assert summary.ops == [{"name": "aten::add", "input_dims": [[1]], "input_types": [], "count": 1_000_000}]


def test_a_gzip_bomb_stops_at_the_cap_and_says_how_to_raise_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "R_bs_1_rank0.json.gz"
    with gzip.open(path, "wb") as handle:
        handle.write(b'{"traceEvents": [' + b" " * (64 * 1024 * 1024))  # 64 MiB of spaces, ~64 KiB on disk
    assert path.stat().st_size < 1024 * 1024
    monkeypatch.setenv("GRAPH_CAPTURE_MAX_TRACE_BYTES", "1M")
    with pytest.raises(TraceFormatError, match="GRAPH_CAPTURE_MAX_TRACE_BYTES"):
        summarize_trace_file(path)
    assert cli_main(["summarize", str(path)]) == 2


#: ``python -m pytest_graphcapture summarize PATH`` for each PATH in turn, in one Python: per path, its exit code and
#: stderr (a JSON list on stdout); an exception escaping the module shows as a traceback on the process's stderr.
_EACH_AS_MAIN = """
import contextlib, io, json, runpy, sys
results = []
for path in sys.argv[1:]:
    err = io.StringIO()
    sys.argv = ["graphcapture", "summarize", path]
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module("pytest_graphcapture", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            code = exc.code
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


def test_the_cli_module_prints_no_traceback_for_any_rejected_input(tmp_path: Path) -> None:
    """The module as ``python -m`` runs it, in one process for all inputs (a Python per input cost 8 s)."""
    paths = [str(write(tmp_path, f"R_bs_{i + 1}_rank0.json", data)) for i, (data, _) in enumerate(REJECTED.values())]
    done = subprocess.run([sys.executable, "-c", _EACH_AS_MAIN, *paths], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    results = json.loads(done.stdout)
    assert len(results) == len(paths)
    for path, (code, stderr) in zip(paths, results):
        assert code == 2 and "Traceback" not in stderr
        assert stderr.count("\n") == 1 and path in stderr


@pytest.mark.parametrize("case", sorted(REJECTED))
def test_a_bad_trace_in_a_pytest_run_fails_with_one_line(pytester: pytest.Pytester, case: str) -> None:
    data, problem = REJECTED[case]
    bad = pytester.path / "R_bs_2_rank0.json"
    bad.write_bytes(data)
    pytester.makepyfile(f"""
        from pytest_graphcapture.summary import summarize_trace_file

        def test_summarize_the_ci_trace():
            summarize_trace_file({str(bad)!r})
    """)
    result = pytester.runpytest("-p", "no:hypothesispytest")
    result.assert_outcomes(failed=1)
    failure = [line for line in result.stdout.lines if line.startswith("TraceFormatError: ")]
    assert len(failure) == 1 and str(bad) in failure[0] and problem in failure[0], result.stdout.str()
    assert "tracefile.py" not in result.stdout.str(), "our internals must not show in the failure"
