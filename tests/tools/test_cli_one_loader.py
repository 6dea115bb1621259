"""Every ``graphcapture`` command reads one trace into the keys ``check`` finds, in slices, as users run it.

Traces in vLLM's and sglang's layouts are derived from the shared real sglang capture
(examples/engine_traces/make_traces.py), gzipped as engines write them and as plain JSON.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT, built_engine_traces, engine_traces, real_traces_dir

from pytest_graphcapture.tools.cli import main

#: The layouts, the options ``check`` needs to split them, and how many keys each holds.
LAYOUTS = {
    "vllm": ((), 4),
    "sglang-single": (("--batch-sizes", "8,4,2"), 3),
    "sglang-per-bs": ((), 3),
}


def cli(*args: str) -> subprocess.CompletedProcess:
    """``graphcapture ARGS`` in this process, as the console script runs ``main``: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def cli_process(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``graphcapture ARGS`` in a process of its own (a FIFO that blocks it stops at ``timeout``, not the suite)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "pytest_graphcapture", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """``build(layout, compressed, **changes) -> folder`` of traces (the gzipped ones shared with tests/engine_traces)."""
    engine_traces()  # skips when the real trace is absent
    plain: dict = {}

    def build(layout: str, compressed: bool, **changes) -> Path:
        folder = built_engine_traces(tmp_path_factory, layout, **changes)
        if compressed:
            return folder
        if folder not in plain:  # the same traces as plain JSON
            plain[folder] = tmp_path_factory.mktemp(layout)
            for path in folder.rglob("*.json.gz"):
                target = plain[folder] / path.relative_to(folder).with_suffix("")
                target.parent.mkdir(parents=True, exist_ok=True)
                with gzip.open(path, "rb") as source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out)
        return plain[folder]

    return build


def _keys(summaries: list) -> dict:
    return {(s["key"]["runner"], s["key"]["batch_size"], s["key"]["variant"], s["key"]["rank"]): s for s in summaries}


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "json"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_summarize_show_and_diff_read_a_trace_into_the_keys_check_finds(build, tmp_path, layout, compressed) -> None:
    options, count = LAYOUTS[layout]
    folder = build(layout, compressed)
    traces = sorted(str(p) for p in folder.rglob("*.json*"))
    goldens = tmp_path / "goldens"
    done = cli("check", *traces, "--golden-dir", str(goldens), "--update", *options)
    assert done.returncode == 0, done.stderr
    written = _keys([json.loads(p.read_text()) for p in goldens.rglob("*.json")])
    assert len(written) == count

    done = cli("summarize", *traces, *options)
    assert done.returncode == 0, done.stderr
    read = json.loads(done.stdout)
    summarized = _keys(read if isinstance(read, list) else [read])
    assert sorted(summarized) == sorted(written), done.stderr
    for key, golden in written.items():
        for field in ("kernels", "ops", "graphs", "complete"):
            assert summarized[key].get(field) == golden.get(field), (key, field)

    done = cli("show", str(folder), *options)
    assert done.returncode == 0, done.stderr
    for runner, bs, variant, _ in written:
        assert f"bs={bs}" in done.stdout and runner in done.stdout
        assert variant is None or f"[{variant}]" in done.stdout

    done = cli("diff", traces[0], traces[0], *options)
    assert done.returncode == 0, done.stdout + done.stderr
    if len(traces) == 1:
        assert f"{count} keys in both, 0 differ" in done.stdout


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "json"])
@pytest.mark.parametrize(
    "layout, drop, changed",
    [("vllm", (4, "PIECEWISE", 2), "bs=4 variant=PIECEWISE"), ("sglang-single", (4, None, 1), "bs=4")],
)
def test_diff_of_two_traces_names_the_one_key_whose_graph_lost_a_kernel(build, layout, drop, changed, compressed):
    options, count = LAYOUTS[layout]
    before = next(build(layout, compressed).rglob("*.json*"))
    after = next(build(layout, compressed, drop=drop).rglob("*.json*"))
    done = cli("diff", str(before), str(after), *options)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{count} keys in both, 1 differ" in done.stdout
    per_key = done.stdout.split("per key:")[1]
    assert f" {changed}:" in per_key and per_key.count(":\n") == 1, per_key


def _peak_rss_kib(*args: str) -> int:
    """Peak resident memory of ``graphcapture ARGS`` run on its own (exit 0 or 1 expected)."""
    measure = (
        "import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "print(rc, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-c", measure, sys.executable, "-m", "pytest_graphcapture", *args]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    rc, peak = done.stdout.split()
    assert rc in ("0", "1"), done.stderr
    return int(peak)


@pytest.mark.parametrize("compressed", [True, False], ids=["gzip", "json"])
def test_diff_and_show_take_the_memory_summarize_takes(tmp_path: Path, compressed: bool) -> None:
    source = real_traces_dir() / "hta_negative_queue_length_values_check__rank0.json.gz"
    if not source.is_file():
        pytest.skip(f"real trace {source.name} not found in {source.parent}; set GRAPH_CAPTURE_REAL_TRACES to it")
    folder = tmp_path / "traces"
    folder.mkdir()
    trace = folder / (source.name if compressed else source.name[: -len(".gz")])
    if compressed:
        trace.symlink_to(source)
    else:
        with gzip.open(source, "rb") as data, open(trace, "wb") as plain:
            shutil.copyfileobj(data, plain)
    summarize = _peak_rss_kib("summarize", str(trace))
    for args in (("diff", str(trace), str(trace)), ("show", str(folder))):
        peak = _peak_rss_kib(*args)
        assert peak <= 1.3 * summarize, f"{args[0]}: {peak} KiB, summarize {summarize} KiB"


def _fifo(tmp_path: Path) -> Path:
    if not hasattr(os, "mkfifo"):
        pytest.skip("this platform has no FIFOs (os.mkfifo)")
    fifo = tmp_path / "capture.json.gz"
    os.mkfifo(fifo)
    return fifo


@pytest.mark.parametrize("command", ["check", "summarize", "diff"])
def test_a_fifo_given_as_a_trace_is_named_as_a_fifo_that_cannot_be_read(tmp_path: Path, command: str) -> None:
    fifo = _fifo(tmp_path)
    args = {"check": ("--golden-dir", str(tmp_path / "goldens")), "diff": (str(fifo),)}.get(command, ())
    done = cli_process(command, str(fifo), *args, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"graphcapture {command}: error: {fifo}: is a FIFO, not a regular file\n"


@pytest.mark.parametrize("update", [(), ("--update",), ("--update-new",)], ids=["check", "update", "update-new"])
def test_golden_dir_naming_a_file_says_it_must_be_a_folder(build, tmp_path: Path, update: tuple) -> None:
    trace = next(build("vllm", True).rglob("*.json.gz"))
    golden_file = tmp_path / "goldens.json"
    golden_file.write_text("{}\n")
    done = cli("check", str(trace), "--golden-dir", str(golden_file), *update)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.splitlines() == [
        f"graphcapture check: error: --golden-dir {golden_file}: is a file; the golden tree must be a folder "
        "(name a folder, or a new path)"
    ]
    assert golden_file.read_text() == "{}\n"


def test_accept_into_a_golden_dir_that_is_a_file_says_it_must_be_a_folder(tmp_path: Path) -> None:
    harvest = tmp_path / "harvest" / "cpu" / "test_m.py" / "test_decode"
    harvest.mkdir(parents=True)
    (harvest / "R_bs_1.json").write_text("{}\n")
    golden_file = tmp_path / "goldens"
    golden_file.write_text("")
    done = cli("accept", str(tmp_path / "harvest"), "--golden-dir", str(golden_file))
    assert done.returncode == 2
    assert "the golden tree must be a folder" in done.stderr and done.stderr.count("\n") == 1
