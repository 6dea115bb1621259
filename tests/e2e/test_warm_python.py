"""The warm commands the suite runs its heavy subprocesses with behave, to their caller, as the real ones."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from warm_python import PRELOAD, warm_bin, warm_path, zygote_threads


@pytest.fixture(scope="module")
def bin_dir() -> Path:
    folder = warm_bin()
    if folder is None:
        pytest.fail("the warm Python's zygote did not start; see zygote.log in its folder under the temp dir")
    return folder


def test_a_forked_python_gets_its_arguments_environment_folder_and_streams(bin_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "import os, sys\n"
        "print(sys.argv, os.getcwd(), os.environ['ONLY_HERE'], sys.path[0], sys.stdin.read().strip())\n"
        "print('to stderr', file=sys.stderr)\n"
        "sys.exit(7)\n"
    )
    env = dict(os.environ, ONLY_HERE="yes", PYTHONPATH="/nowhere")
    done = subprocess.run(
        [str(bin_dir / "python"), "mine.py", "a b"],
        cwd=tmp_path,
        env=env,
        input="from stdin",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 7
    assert done.stdout.strip() == f"['mine.py', 'a b'] {tmp_path} yes {tmp_path} from stdin"
    assert done.stderr.strip() == "to stderr"
    code = "import sys, torch; print(sys.path[:2], 'torch' in sys.modules)"
    done = subprocess.run([str(bin_dir / "python"), "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "['', '/nowhere'] True", done.stderr


def test_pytest_and_graphcapture_commands_run_where_path_finds_them(bin_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 3\n")
    env = dict(os.environ, PATH=warm_path())
    done = subprocess.run(
        ["bash", "-c", "pytest -q -p no:cacheprovider test_one.py; echo rc=$?; graphcapture --version"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert "1 failed" in done.stdout and "rc=1" in done.stdout, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("graphcapture ")


def test_a_signal_ends_the_run_and_the_command_dies_of_it(bin_dir: Path) -> None:
    sleeper = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    started = subprocess.Popen([str(bin_dir / "python"), "-c", sleeper], stdout=subprocess.PIPE, text=True)
    run_pid = int(started.stdout.readline())
    started.terminate()
    assert started.wait(10) == -signal.SIGTERM
    _gone(run_pid)


def test_a_killed_command_takes_its_run_with_it(bin_dir: Path) -> None:
    sleeper = "import os, time; print(os.getpid(), flush=True); time.sleep(60)"
    started = subprocess.Popen([str(bin_dir / "python"), "-c", sleeper], stdout=subprocess.PIPE, text=True)
    run_pid = int(started.stdout.readline())
    started.kill()
    started.wait(10)
    _gone(run_pid)


def test_options_it_does_not_know_run_the_real_interpreter(bin_dir: Path) -> None:
    done = subprocess.run(
        [str(bin_dir / "python"), "-I", "-c", "import sys; print(sys.flags.isolated, 'torch' in sys.modules)"],
        capture_output=True,
        text=True,
    )
    assert done.stdout.strip() == "1 False"


def test_the_zygote_has_one_thread_after_its_imports_so_what_it_forks_is_no_fork_of_threads(bin_dir: Path) -> None:
    # A fork of a process with threads can crash (issue 39): the zygote's imports of PRELOAD, in its
    # environment (zygote_environment()), start none (numpy's OpenBLAS pool did), and a zygote that had
    # some would serve nothing. The zygote serving this test is that process: it has one thread.
    threads = zygote_threads()
    assert threads == 1, f"{threads} threads after importing {PRELOAD}; {bin_dir.parent / 'zygote.log'} says why"


def _gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the run {pid} outlived its command")


if sys.platform != "linux":  # the zygote passes file descriptors over a Unix socket and forks
    pytestmark = pytest.mark.skip(reason="the warm Python needs Linux (fork, SCM_RIGHTS)")
