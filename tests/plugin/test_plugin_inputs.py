"""Bad settings and damaged folders as users meet them: one line naming the option, or a run that copes.

* settings are checked before any test runs: batch sizes (ASCII digits, bounded), the trace
  folder, the trace size cap;
* a symlink loop in the golden tree fails the check with one line;
* temp files a killed export left in the trace folder are removed by the next run, and no
  reader takes a temp file for a trace (in-process and under ``-n 2``).
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, TEST_DECODE, isolated_checkout, run, summary_dict

from pytest_graphcapture.naming import trace_dir, trace_group_for

CAPTURE = """
def test_capture(graph_capture):
    result = graph_capture()
    assert result.trace_paths
"""


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    isolated_checkout(monkeypatch)


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--graph-capture-batch-sizes=١,٢"], {}, "*--graph-capture-batch-sizes: '١' is not an integer batch size*"),
        (["--graph-capture-batch-sizes=1_0"], {}, "*--graph-capture-batch-sizes: '1_0' is not an integer batch size*"),
        (
            ["--graph-capture-batch-sizes=99999999"],
            {},
            "*--graph-capture-batch-sizes: batch size 99999999 is larger than the largest accepted, 65536*",
        ),
        ([], {"GRAPH_CAPTURE_MAX_TRACE_BYTES": "-1"}, "*environment variable GRAPH_CAPTURE_MAX_TRACE_BYTES: *-1*"),
        ([], {"GRAPH_CAPTURE_MAX_TRACE_BYTES": "abc"}, "*environment variable GRAPH_CAPTURE_MAX_TRACE_BYTES: *abc*"),
        (["--graph-capture-dir=afile"], {}, "*--graph-capture-dir *afile: *afile is a file, expected a folder*"),
        (["--graph-capture-dir=a\nb"], {}, "*--graph-capture-dir: *contains a line break or NUL*"),
    ],
)
def test_bad_settings_are_refused_before_any_test_with_one_line(
    pytester: pytest.Pytester, clean_env: None, monkeypatch: pytest.MonkeyPatch, args: list, env: dict, message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (pytester.path / "afile").write_text("x")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_batch_sizes_in_the_ini_file_are_checked_the_same_way(pytester: pytest.Pytester, clean_env: None) -> None:
    pytester.makeini("[pytest]\ngraph_capture_batch_sizes = 1, 2_0\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = run(pytester)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini key graph_capture_batch_sizes: '2_0' is not an integer batch size*"])


def test_a_symlink_loop_in_the_golden_tree_fails_the_check_with_one_line(
    pytester: pytest.Pytester, clean_env: None
) -> None:
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_model=TEST_DECODE)
    (pytester.path / "goldens").mkdir()
    (pytester.path / "goldens" / "cpu").symlink_to("cpu")
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*goldens/cpu*: cannot be resolved (a symlink loop?)*"])
    assert "Traceback" not in result.stdout.str()


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


@pytest.mark.parametrize(
    "mode", [pytest.param((), id="in-process"), pytest.param(("-n", "2"), id="xdist", marks=pytest.mark.slow)]
)
def test_leftovers_of_a_killed_export_are_removed_and_never_read(
    pytester: pytest.Pytester, clean_env: None, mode: tuple, capsys: pytest.CaptureFixture
) -> None:
    from pytest_graphcapture.tools.cli import main

    pytester.makepyfile(test_capture=CAPTURE)
    folder = trace_dir(pytester.path / "out", trace_group_for("test_capture.py::test_capture"))
    folder.mkdir(parents=True)
    dead = _dead_pid()
    name = "TinyDecodeRunner_bs_1_rank0.json.gz"
    # What a kill during export leaves: our temp file and the one the exporter made of its name.
    leftovers = [
        folder / f".{name}.{dead}-abcd1234.partial.json.gz",
        folder / f".{name}.{dead}-abcd1234.partial.json.tmp",
    ]
    for path in leftovers:
        path.write_bytes(b"")
    # A writer still running (this process) keeps its temp file.
    live = folder / f".{name}.{os.getpid()}-efgh5678.partial.json.gz"
    live.write_bytes(b"")
    args = ("--graph-capture-trace", "--graph-capture-dir=out", "--graph-capture-batch-sizes=1,2", *mode)
    result = run(pytester, *args, subprocess=bool(mode), timeout=300, warm=bool(mode))
    result.assert_outcomes(passed=1)
    assert not any(p.exists() for p in leftovers)
    assert live.exists()
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "TinyDecodeRunner_bs_1_rank0.json.gz",
        "TinyDecodeRunner_bs_2_rank0.json.gz",
    ]
    capsys.readouterr()
    code = main(["show", str(folder)])
    shown, errors = capsys.readouterr()
    assert code == 0, errors
    assert shown.count("TinyDecodeRunner rank 0") == 1, shown


def test_show_skips_partial_files_a_reader_might_take_for_traces(tmp_path: Path) -> None:
    from pytest_graphcapture.tools.cli import main

    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / "R_bs_1.json").write_text(json.dumps(summary_dict(["k"])))
    (folder / "Fake_bs_2.partial.json").write_text("")  # a partial file without the dot
    (folder / ".R_bs_2.json.123-abcd1234.partial.json.gz").write_bytes(gzip.compress(b""))
    assert main(["show", str(folder)]) == 0
    assert main(["show", str(folder), "--html", str(tmp_path / "picture.html")]) == 0
