"""The ``graphcapture`` command's answers stay true at the edges: closed pipes, FIFOs, deep files, gaps.

Run as users run it (``python -m pytest_graphcapture``) where the process matters
(exit codes through a pipe, a FIFO that would block).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, summary_dict

from pytest_graphcapture import __version__
from pytest_graphcapture.summary.tracefile import too_deep
from pytest_graphcapture.tools.cli import main


def write(path: Path, trace: dict) -> Path:
    path.write_bytes(gzip.compress(json.dumps(trace).encode()))
    return path


def cli(*args: str, timeout: float = 60, shell: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    if shell:
        return subprocess.run(
            ["bash", "-o", "pipefail", "-c", shell], capture_output=True, text=True, env=env, timeout=timeout
        )
    return subprocess.run(
        [sys.executable, "-m", "pytest_graphcapture", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def test_diff_through_a_closed_pipe_still_reports_the_difference(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text(json.dumps(summary_dict([f"kernel_a_{i:05d}" for i in range(4000)])))
    (tmp_path / "b.json").write_text(json.dumps(summary_dict([f"kernel_b_{i:05d}" for i in range(4000)])))
    done = cli(shell=f"{sys.executable} -m pytest_graphcapture diff {tmp_path}/a.json {tmp_path}/b.json | head -n 1")
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert done.stdout.count("\n") == 1
    assert done.stderr == ""  # no "Exception ignored … BrokenPipeError" from the interpreter


def test_show_through_a_closed_pipe_is_not_a_success(tmp_path: Path) -> None:
    for bs in range(1, 3):
        data = summary_dict([f"kernel_{i:06d}" for i in range(40_000)], batch_size=bs)
        (tmp_path / f"R_bs_{bs}.json").write_text(json.dumps(data))
    # The reader leaves without reading: the table (far more than a pipe holds) cannot be written.
    done = cli(shell=f"{sys.executable} -m pytest_graphcapture show {tmp_path} | true")
    assert done.returncode == 141, (done.stdout, done.stderr)
    assert done.stderr == ""


def _wide_trace(ops: int) -> dict:
    """A capture trace of ``ops`` distinct ops: its summary is far more than a pipe holds (64 KiB)."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op_{i:05d}", "pid": 1, "tid": 1, "ts": float(i), "dur": 0.5}
        for i in range(ops)
    ]
    return {"schemaVersion": 1, "traceEvents": events}


@pytest.mark.parametrize("reader", ["head -n 1", f"{sys.executable} -c 'import sys; sys.stdin.readline()'"])
def test_summarize_to_a_reader_that_leaves_after_one_line_is_not_a_success(tmp_path: Path, reader: str) -> None:
    trace = write(tmp_path / "R_bs_1_rank0.json.gz", _wide_trace(3000))
    whole = cli("summarize", str(trace))
    assert whole.returncode == 0 and len(whole.stdout) > 2 * 65536, whole.stderr
    # The pipe takes part of the output, then the reader is gone: the rest cannot be written.
    done = cli(shell=f"{sys.executable} -m pytest_graphcapture summarize {trace} {trace} | {reader}")
    assert done.returncode == 141, (done.stdout[:200], done.stderr)
    assert done.stderr == ""  # no traceback, no "Exception ignored"


def test_diff_of_a_fifo_is_refused_instead_of_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "golden.json"
    os.mkfifo(fifo)
    (tmp_path / "b.json").write_text(json.dumps(summary_dict(["k"])))
    done = cli("diff", str(fifo), str(tmp_path / "b.json"))
    assert done.returncode == 2
    assert done.stderr.strip() == f"graphcapture diff: error: {fifo}: is a FIFO, not a regular file"


def test_diff_of_a_deeply_nested_file_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text('{"schema_version": 1, "kernels": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert main(["diff", str(deep), str(deep)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"graphcapture diff: error: {deep}: {too_deep()}"


def test_version(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"graphcapture (pytest-graphcapture) {__version__}"


def _eager_trace(kernel: str) -> dict:
    """A CPU-side trace with one kernel launch (enough for a summary with one kernel)."""
    return {
        "schemaVersion": 1,
        "traceEvents": [
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": 2,
                "dur": 1,
                "args": {"correlation": 2},
            },
            {"ph": "X", "cat": "kernel", "name": kernel, "ts": 3, "dur": 1, "args": {"correlation": 2}},
        ],
    }


@pytest.mark.parametrize("where", ["kernel name", "file name"])
def test_summarize_out_that_cannot_be_written_leaves_the_previous_file_intact(
    tmp_path: Path, capsys: pytest.CaptureFixture, where: str
) -> None:
    # A lone surrogate reaches the summary from a "\ud800" escape in the trace, or from a trace file
    # name that is not UTF-8 (the runner is named after the file); UTF-8 can encode neither.
    if where == "kernel name":
        trace = tmp_path / "model_bs_2.json"
        trace.write_text(json.dumps(_eager_trace("void k_\ud800(int)")))
    else:
        trace = Path(os.fsdecode(bytes(tmp_path) + b"/model\xff_bs_2.json"))
        trace.write_text(json.dumps(_eager_trace("void k(int)")))
    previous = tmp_path / "out" / "prev.json"
    previous.parent.mkdir()
    previous.write_bytes(b'{"the previous summary": 1}\n')
    assert main(["summarize", str(trace), "--out", str(previous)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphcapture summarize: error: ") and "\n" not in err, err
    assert "internal error" not in err
    if where == "file name":
        assert re.fullmatch(
            rf"graphcapture summarize: error: --out {re.escape(str(previous))}: cannot write: the text holds "
            r"'\\udcff' \(character \d+\), a lone surrogate UTF-8 cannot encode \(from a \\u escape without its "
            r"pair, or a file name that is not UTF-8\)",
            err,
        ), err
    assert previous.read_bytes() == b'{"the previous summary": 1}\n'
    assert os.listdir(previous.parent) == ["prev.json"]  # no temp file left beside it


@pytest.mark.parametrize("spelling", ["same", "dot-slash", "symlink", "hardlink"])
def test_an_output_that_is_an_input_is_refused_and_the_input_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, spelling: str
) -> None:
    trace = write(tmp_path / "R_bs_1_rank0.json.gz", _wide_trace(3))
    before = trace.read_bytes()
    monkeypatch.chdir(tmp_path)
    out = {"same": trace.name, "dot-slash": f"./{trace.name}", "symlink": "link.json", "hardlink": "hard.json"}[
        spelling
    ]
    if spelling == "symlink":
        (tmp_path / out).symlink_to(trace)
    elif spelling == "hardlink":
        os.link(trace, tmp_path / out)
    assert main(["summarize", trace.name, "--out", out]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        f"graphcapture summarize: error: --out {out}: is the input {trace.name}; writing there would replace it, "
        "name another file"
    )
    assert trace.read_bytes() == before


def test_a_picture_written_over_a_file_it_shows_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    summary = tmp_path / "R_bs_1.json"
    summary.write_text(json.dumps(summary_dict(["k"])))
    before = summary.read_bytes()
    assert main(["show", str(tmp_path), "--html", str(summary)]) == 2
    assert f"--html {summary}: is the input {summary}" in capsys.readouterr().err
    assert summary.read_bytes() == before
