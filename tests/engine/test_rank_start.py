"""How ranks start: each a fresh interpreter (``spawn``), never a fork of a process that imported torch.

A process that imported torch has threads, and torch advises against forking such a process:
rank 0 of the tensor-parallel example once died of SIGSEGV when ranks were forked from a
server that had imported torch (issue 39).  These tests pin the rule and what a user relies on
at start-up: the environment of the run, the main module imported in the rank, a bounded start-up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import assert_gone

import pytest_graphcapture
from pytest_graphcapture.engine.ranks import supervisor
from pytest_graphcapture.engine.ranks import supervisor as diagnose
from pytest_graphcapture.engine.ranks.supervisor import RankError, run_on_ranks, spawned_pids

PACKAGE = Path(pytest_graphcapture.__file__).resolve().parent
TESTS = Path(__file__).resolve().parent.parent


def test_nothing_in_the_package_forks_a_python_or_keeps_a_fork_server() -> None:
    forking = re.compile(r"forkserver|fork_server|get_context\(\s*['\"]fork|set_start_method|os\.fork\(")
    found = [
        f"{path.relative_to(PACKAGE)}:{number}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if forking.search(line)
    ]
    assert found == []
    assert not (PACKAGE / "engine" / "ranks" / "start.py").exists()
    assert not (PACKAGE / "engine" / "ranks" / "server_guard.py").exists()


def test_a_rank_whose_start_up_hangs_is_stopped_at_the_start_up_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each rank's interpreter hangs while it starts, as a broken torch import would.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, time\nif any('multiprocessing.spawn' in arg for arg in sys.orig_argv):\n    time.sleep(600)\n"
    )
    before = len(spawned_pids())
    with monkeypatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
        patch.setattr(supervisor, "STARTUP_ALLOWANCE", 3.0)
        patch.setattr(diagnose, "STARTUP_ALLOWANCE", 3.0)
        started = time.monotonic()
        with pytest.raises(RankError) as info:
            run_on_ranks("rank_targets:rank_and_world", 2, timeout=1)
        assert time.monotonic() - started < 3.0 + 15
    lines = str(info.value).splitlines()
    assert lines[0] == "ranks 0, 1 of 2 did not start up within 3s (--graph-capture-rank-timeout)"
    assert "rank 0: did not finish (stage: starting); stopped" in lines
    assert "all 2 rank processes were stopped" in lines
    assert_gone(spawned_pids()[before:])


def test_each_rank_is_a_spawned_python_of_the_run_importing_the_main_module_itself_and_seeing_its_environment(
    tmp_path: Path,
) -> None:
    # A main module's top level runs in each rank, as Python runs it there (spawn), with the rank's own pid.
    # libgomp reads OMP_NUM_THREADS when torch loads it: each rank, a fresh Python, reads its run's value.
    # Started by spawn, as children of the run's process (not of a server that forks them).  One rank
    # shows it all: every rank is started the same way, and a forked one would fail each check (a rank
    # forked from a process that ran the main module sees that process's pid).
    script = tmp_path / "main_script.py"
    script.write_text(
        "import json\n"
        "import os\n"
        "IMPORTED_IN = os.getpid()\n\n\n"
        "def imported_here_and_how_started(ctx):\n"
        "    from rank_targets import how_started\n\n"
        '    return [IMPORTED_IN == os.getpid(), *how_started(ctx, "GRAPH_CAPTURE_TEST_MARK")]\n\n\n'
        'if __name__ == "__main__":\n'
        "    from pytest_graphcapture.engine.ranks.supervisor import run_on_ranks\n\n"
        "    print(json.dumps([os.getpid(), run_on_ranks(imported_here_and_how_started, 1, timeout=60)]))\n"
    )
    threads = 1 if torch.get_num_threads() != 1 else 2
    env = {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "GRAPH_CAPTURE_TEST_MARK": "this run",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    run_pid, started = json.loads(done.stdout)
    assert started == [[True, True, run_pid, threads, "this run"]]
