"""The graphcapture command line: output format, exit codes, one-line errors."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_graphcapture.errors import UsageError
from pytest_graphcapture.golden import store as golden_store
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.model import Summary
from pytest_graphcapture.tools.cli import main
from pytest_graphcapture.tools.matrix import kernel_matrix


def _trace(kernels: dict, ops: dict | None = None, major: int = 9) -> dict:
    """Eager NVIDIA-style trace: each kernel name executed ``count`` times."""
    events = []
    ts = 0
    for name, count in kernels.items():
        for _ in range(count):
            ts += 2
            events.append(
                {
                    "ph": "X",
                    "cat": "cuda_runtime",
                    "name": "cudaLaunchKernel",
                    "ts": ts,
                    "dur": 1,
                    "args": {"correlation": ts},
                }
            )
            events.append(
                {
                    "ph": "X",
                    "cat": "kernel",
                    "name": name,
                    "ts": ts + 1,
                    "dur": 1,
                    "args": {"correlation": ts, "grid": [1, 1, 1], "block": [128, 1, 1]},
                }
            )
    for name, count in (ops or {}).items():
        for _ in range(count):
            ts += 1
            events.append(
                {
                    "ph": "X",
                    "cat": "cpu_op",
                    "name": name,
                    "ts": ts,
                    "dur": 1,
                    "args": {"Input Dims": [[4, 4]], "Input type": ["float"]},
                }
            )
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "GPU", "computeMajor": major, "computeMinor": 0}],
        "traceEvents": events,
    }


def _write(path: Path, trace: dict) -> Path:
    data = json.dumps(trace).encode()
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_summarize_prints_canonical_json(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = _write(tmp_path / "eng_bs_4_rank0.json.gz", _trace({"void k<1>(int)": 2}, {"aten::mm": 1}))
    code, out, err = _run(capsys, "summarize", str(trace))
    assert code == 0 and err == ""
    data = json.loads(out)
    assert out == golden_store.dumps(data)  # the golden layout: one line per entry
    assert '    {"name": "void k<1>", "block": [128, 1, 1], "count": 2, "grid": [1, 1, 1], "kind": "kernel"}' in out
    assert data["key"] == {"runner": "eng", "batch_size": 4, "variant": None, "rank": 0}
    assert data["platform"] == "cuda-sm90" and data["level"] == "name"
    assert data["kernels"] == [
        {"block": [128, 1, 1], "count": 2, "grid": [1, 1, 1], "kind": "kernel", "name": "void k<1>"}
    ]
    assert data["launches"] == {"by_api": {"cudaLaunchKernel": 2}, "total": 2}

    code, out, _ = _run(capsys, "summarize", str(trace), "--level", "family")
    assert code == 0 and json.loads(out)["kernels"][0]["name"] == "k"


def test_summarize_several_and_out_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = _write(tmp_path / "eng_bs_1_rank0.json", _trace({"a": 1}))
    b = _write(tmp_path / "eng_bs_2_rank0.json.gz", _trace({"a": 2}))
    out_file = tmp_path / "out.json"
    code, out, err = _run(capsys, "summarize", str(a), str(b), "--out", str(out_file))
    assert code == 0 and out == "" and err == ""
    data = json.loads(out_file.read_text())
    assert [d["key"]["batch_size"] for d in data] == [1, 2]
    assert out_file.read_text().endswith("]\n")


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "file is empty"),
        (b"{", "truncated JSON"),
        (b'{"traceEvents": 1}', "traceEvents is a JSON int"),
        (b"\x1f\x8bxx", "corrupt gzip"),
    ],
)
def test_bad_trace_is_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, content: bytes, problem: str
) -> None:
    bad = tmp_path / "eng_bs_1_rank0.json"
    bad.write_bytes(content)
    code, out, err = _run(capsys, "summarize", str(bad))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(bad) in err and problem in err and "Traceback" not in err


def test_summarize_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = _write(tmp_path / "eng_bs_1_rank0.json", _trace({"a": 1}))
    code, _, err = _run(capsys, "summarize", str(a), str(a), "--replay", str(a))
    assert code == 2 and "--replay" in err
    no_bs = _write(tmp_path / "eager.json", _trace({"a": 1}))
    code, out, err = _run(capsys, "summarize", str(no_bs))  # any trace: its key says the batch size is unknown
    assert code == 0 and json.loads(out)["key"]["batch_size"] == 0
    assert "eager.json: the trace does not say its batch size" in err and "--batch-size N" in err
    with pytest.raises(SystemExit) as info:
        main(["summarize", str(no_bs), "--batch-size", "0"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["summarize", str(a), "--level", "fuzzy"])
    assert info.value.code == 2


def test_diff_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    expected_trace = _write(tmp_path / "eng_bs_4_rank0.json.gz", _trace({"void k<1>(int)": 2}, {"aten::mm": 1}))
    code, out, _ = _run(capsys, "summarize", str(expected_trace), "--level", "exact")
    golden = tmp_path / "golden.json"
    golden.write_text(out)

    same = tmp_path / "same" / "eng_bs_4_rank0.json.gz"
    same.parent.mkdir()
    _write(same, _trace({"void k<1>(int)": 2}, {"aten::mm": 1}))
    code, out, _ = _run(capsys, "diff", str(golden), str(same))
    assert code == 0 and "equal (level name)" in out  # compared at the coarser level

    changed = tmp_path / "changed" / "eng_bs_4_rank0.json.gz"
    changed.parent.mkdir()
    _write(changed, _trace({"void k<1>(int)": 3, "void extra<2>(int)": 1}, {"aten::mm": 1, "aten::add": 1}))
    code, out, _ = _run(capsys, "diff", str(golden), str(changed))
    assert code == 1
    # The CLI prints the golden gate's own diff lines.
    assert "~ void k<1> grid=[1,1,1] block=[128,1,1] count 2 → 3" in out
    assert "+ void extra<2>" in out
    assert "+ aten::add [[4,4]] ×1" in out
    assert "~ total launches 2 → 4" in out

    code, out, err = _run(capsys, "diff", str(golden), str(tmp_path / "missing.json"))
    assert code == 2 and out == "" and "missing.json: no such file" in err

    broken = tmp_path / "broken.json"
    data = json.loads(golden.read_text())
    data["kernels"] = "nope"
    broken.write_text(json.dumps(data))
    code, _, err = _run(capsys, "diff", str(broken), str(same))
    assert code == 2 and "broken.json: kernels must be a list" in err


def test_show_directory_table(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    _write(tmp_path / "eng_bs_1_rank0.json.gz", _trace({"void a<1>(int)": 1, "void b(int)": 2}))
    _write(tmp_path / "eng_bs_8_rank0.json", _trace({"void a<1>(int)": 3}))
    (tmp_path / "notes.txt").write_text("ignored")
    code, out, err = _run(capsys, "show", str(tmp_path), "--level", "family")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "eng rank 0, cuda-sm90, level family"
    assert lines[1].split() == ["bs=1", "bs=8", "kind", "kernel"]
    assert lines[2].split() == ["1", "3", "kernel", "a"]
    assert lines[3].split() == ["2", "-", "kernel", "b"]
    code, _, err = _run(capsys, "show", str(tmp_path / "eng_bs_8_rank0.json"))
    assert code == 2 and "is not a directory" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(capsys, "show", str(empty))
    assert code == 2 and "contains no summary JSON or trace files" in err


def test_kernel_matrix() -> None:
    def summary(bs: int, kernels: list) -> Summary:
        return Summary(key=CaptureKey("r", bs), platform="cpu", kernels=kernels)

    a = summary(
        8,
        [
            {"name": "k", "kind": "kernel", "count": 2, "grid": [1, 1, 1]},
            {"name": "k", "kind": "kernel", "count": 1, "grid": [2, 1, 1]},
        ],
    )
    b = summary(1, [{"name": "k", "kind": "kernel", "count": 1}, {"name": "Memset", "kind": "memset", "count": 1}])
    batch_sizes, rows = kernel_matrix([a, b])
    assert batch_sizes == [1, 8]
    assert rows == [
        {"name": "Memset", "kind": "memset", "counts": {1: 1}},
        {"name": "k", "kind": "kernel", "counts": {1: 1, 8: 3}},
    ]
    with pytest.raises(UsageError, match="two summaries for batch size 8"):
        kernel_matrix([a, summary(8, [])])


def test_module_entry_point_never_prints_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "x_bs_1_rank0.json"
    bad.write_text('{"traceEvents": [1]}')
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_graphcapture", "summarize", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("traceEvents[0] is a JSON int, expected an object")
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def _capture_and_short_replay(tmp_path: Path) -> tuple[Path, Path]:
    """NVIDIA-style capture window with 2 launches, and a replay that ran only 1 graph node."""

    def runtime(name, ts, corr):
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": name,
            "ts": ts,
            "dur": 1,
            "args": {"correlation": corr},
        }

    capture = {
        "traceEvents": [
            runtime("cudaStreamBeginCapture", 0, 1),
            runtime("cudaLaunchKernel", 2, 2),
            runtime("cudaLaunchKernel", 4, 3),
            runtime("cudaStreamEndCapture", 6, 4),
        ]
    }
    replay = {
        "traceEvents": [
            runtime("cudaGraphLaunch", 0, 9),
            {"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, "args": {"correlation": 9}},
        ]
    }
    return _write(tmp_path / "eng_bs_1_rank0.json", capture), _write(tmp_path / "replay.json", replay)


def test_cli_warnings_are_one_clean_line(tmp_path: Path) -> None:
    capture, replay = _capture_and_short_replay(tmp_path)
    proc = subprocess.run(
        [
            sys.executable,
            "-W",
            "default",
            "-m",
            "pytest_graphcapture",
            "summarize",
            str(capture),
            "--replay",
            str(replay),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("graphcapture: warning: graph capture eng[bs=1, rank=0]: kernel evidence incomplete:")
    assert "Warning" not in lines[0] and ".py:" not in lines[0]
