"""Ranks forked from the fork server see what spawned ranks see, and a server that hangs is bounded.

On Linux the ranks are forked from a server that imported torch once
(pytest_graphcapture/engine/ranks/start.py); these tests pin what a user relies on
when the ranks came from it: the parent's environment of the run, a variable that
torch reads when it is imported included, and a start-up that cannot hang.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_graphcapture.engine.ranks import diagnose, supervisor
from pytest_graphcapture.engine.ranks.diagnose import RankError
from pytest_graphcapture.engine.ranks.supervisor import run_on_ranks, spawned_pids

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="ranks are forked from the fork server on Linux only; elsewhere spawned",
)


def test_a_rank_sees_the_environment_of_its_run_even_what_torch_reads_at_import(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # libgomp reads OMP_NUM_THREADS when torch loads it: the server is started again for the second run.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("GRAPH_CAPTURE_TEST_MARK", "first run")
    first = run_on_ranks("rank_targets:threads_and_variable", 2, args=("GRAPH_CAPTURE_TEST_MARK",), timeout=60)
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.delenv("GRAPH_CAPTURE_TEST_MARK")
    second = run_on_ranks("rank_targets:threads_and_variable", 2, args=("GRAPH_CAPTURE_TEST_MARK",), timeout=60)
    assert (first, second) == ([[1, "first run"]] * 2, [[2, None]] * 2)


def test_a_fork_server_that_hangs_importing_is_stopped_at_the_start_up_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server is a new Python (the environment changed): its start-up hangs, as a broken torch import would.
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, time\nif any('multiprocessing.forkserver' in arg for arg in sys.orig_argv):\n    time.sleep(600)\n"
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
    assert "rank 0: did not finish (stage: waiting for the fork server to import torch); stopped" in lines
    assert spawned_pids()[before:] == []  # no rank process was ever started
    # The environment is the old one again: the next run starts a server that works.
    assert [result[0] for result in run_on_ranks("rank_targets:rank_and_world", 2, timeout=60)] == [0, 1]


def test_each_rank_imports_the_main_module_itself_as_a_spawned_rank_does(tmp_path: Path) -> None:
    # A main module's top level (torch.cuda.is_available(), say, which makes torch refuse CUDA in every
    # process forked after it) must run in the rank, not in the server the ranks are forked from.
    script = tmp_path / "main_script.py"
    script.write_text(
        "import os\n"
        "IMPORTED_IN = os.getpid()\n\n\n"
        "def imported_here(ctx):\n"
        "    return IMPORTED_IN == os.getpid()\n\n\n"
        'if __name__ == "__main__":\n'
        "    from pytest_graphcapture.engine.ranks.supervisor import run_on_ranks\n\n"
        "    print(run_on_ranks(imported_here, 2, timeout=60))\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[True, True]"
