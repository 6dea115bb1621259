"""Multi-rank capture as users run it (pytester): per-rank goldens, shared goldens, shard-layout
regressions, failing and hanging ranks, rank traces and pytest-xdist (issue #9)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import REPO_ROOT, assert_gone, load_trace, run, wait_gone

from pytest_graphcapture.engine.ranks import supervisor as distributed
from pytest_graphcapture.engine.ranks.capture import capture_on_ranks
from pytest_graphcapture.engine.ranks.supervisor import RankError
from pytest_graphcapture.naming import TRACE_SUBDIR, trace_dir, trace_group_for

QUIET = ("-p", "no:cacheprovider", "-p", "no:randomly", "--graph-capture-device=cpu")

TP_TESTS = """
import os
import time

import pytest

from pytest_graphcapture.engine.decode_model import DecoderConfig, TinyDecodeRunner


def tp_runner(ctx):
    # SKEW_RANK=r gives rank r a different MLP shard (a layout regression on one rank only).
    config = DecoderConfig(intermediate_size=192) if os.environ.get("SKEW_RANK") == str(ctx.rank) else None
    return TinyDecodeRunner((1, 2), device=ctx.device, tp_size=ctx.world_size, tp_rank=ctx.rank, config=config)


def runner_b(ctx):
    runner = TinyDecodeRunner((2,), device=ctx.device, tp_size=ctx.world_size, tp_rank=ctx.rank)
    runner.runner_name = "ModelB"
    return runner


def shared_runner(ctx):
    runner = tp_runner(ctx)
    runner.runner_name = "SharedTP"
    return runner


# Two parametrizations: run side by side on two xdist workers, without colliding.
@pytest.mark.graph_capture_ranks(2)
@pytest.mark.parametrize(("factory", "captures"), [(tp_runner, 4), (runner_b, 2)], ids=["a", "b"])
def test_per_rank(graph_capture, golden, factory, captures):
    result = graph_capture(factory)
    assert result.world_size == 2 and len(result) == captures
    golden.check(result)


@pytest.mark.graph_capture_ranks(2)
def test_shared(graph_capture, golden):
    golden.check(graph_capture(shared_runner), share_ranks=True)
"""

FAILING_TESTS = """
import time

import pytest

from pytest_graphcapture.engine.decode_model import TinyDecodeRunner


class BrokenRank1(TinyDecodeRunner):
    def forward_for(self, key):
        if self.tp_rank == 1 and key.batch_size == 2:
            raise RuntimeError("shard table corrupt on rank 1")
        return super().forward_for(key)


class HangingRank1(TinyDecodeRunner):
    def forward_for(self, key):
        forward = super().forward_for(key)
        if self.tp_rank != 1:
            return forward

        def hang():
            time.sleep(600)  # rank 1 never reaches the all-reduce
            forward()

        return hang


def broken(ctx):
    return BrokenRank1((1, 2), tp_size=2, tp_rank=ctx.rank)


def hanging(ctx):
    return HangingRank1((1, 2), tp_size=2, tp_rank=ctx.rank)


@pytest.mark.graph_capture_ranks(2)
def test_rank_raises(graph_capture):
    graph_capture(broken)


@pytest.mark.graph_capture_ranks(2, timeout=4)
def test_rank_hangs(graph_capture):
    graph_capture(hanging)
"""


def golden_bytes(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*.json"))}


@pytest.mark.slow
def test_a_raising_or_hanging_rank_fails_the_test_in_time_naming_the_rank_and_leaves_no_process(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_failing=FAILING_TESTS)
    first = len(distributed.spawned_pids())
    reprec = pytester.inline_run(*QUIET)
    calls = {r.nodeid.split("::")[-1]: r for r in reprec.getreports("pytest_runtest_logreport") if r.when == "call"}
    raised, hung = calls["test_rank_raises"], calls["test_rank_hangs"]
    assert raised.failed and hung.failed
    raised_text = str(raised.longrepr)
    assert raised_text.startswith(
        "multi-rank graph capture failed: rank 1 of 2 failed during BrokenRank1-tp2[bs=2, rank=1] setup: "
        "CaptureError: capturing BrokenRank1-tp2[bs=2, rank=1] failed during setup: RuntimeError: shard "
        "table corrupt on rank 1\nrank 1 traceback (last lines):"
    ), raised_text[:600]
    assert "During handling" not in raised_text
    assert "rank 0 also failed (during BrokenRank1-tp2[bs=2, rank=0] warmup 1)" in raised_text  # listed after
    hung_text = str(hung.longrepr)
    assert "rank 1 of 2 did not finish within 4s (--graph-capture-rank-timeout)" in hung_text
    assert "rank 1: did not finish (stage: HangingRank1-tp2[bs=2, rank=1] warmup 1) at " in hung_text
    assert "test_failing.py:22 in hang; stopped" in hung_text  # where rank 1 hangs
    assert (
        "rank 0: did not finish (stage: HangingRank1-tp2[bs=2, rank=0] warmup 1) (waiting in "
        "torch.distributed all_reduce); stopped"
    ) in hung_text  # the decoder's first all-reduce
    # 4 s after the ranks started, plus start-up and stopping: well under the 120 s default.
    assert hung.duration < 4 + 30, hung.duration
    pids = distributed.spawned_pids()[first:]
    assert len(pids) == 4
    assert_gone(pids)


def xdist_run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """pytest -n 2 in the project: the run and its workers start warm (tests/warm_python.py); each worker spawns its ranks."""
    return run(
        pytester, "--graph-capture-device=cpu", "-p", "xdist", "-n", "2", *args, subprocess=True, warm=True, timeout=300
    )


@pytest.mark.slow
def test_two_ranks_per_rank_and_shared_goldens_traces_a_shard_layout_regression_and_xdist_workers_side_by_side(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One xdist run creates every golden and trace (two-rank per-rank and shared, and two parametrizations side
    by side), one more checks them with rank 1's shard skewed: 6 two-rank sets where separate runs took 9."""
    pytest.importorskip("xdist", reason="pytest-xdist is not installed: pip install pytest-xdist")
    pytester.makepyfile(test_tp=TP_TESTS)
    started = time.monotonic()
    created = xdist_run(pytester, "--update-golden", "--graph-capture-trace", f"--graph-capture-dir={tmp_path}")
    created.assert_outcomes(passed=3)
    # 4 + 2 per-rank goldens (two parametrizations) and 2 shared, counted across both workers.
    assert "cpu: 8 checked, 0 passed, 0 failed, 8 created" in created.stdout.str()
    goldens = pytester.path / "goldens"
    folder = goldens / "cpu" / "test_tp.py"
    assert sorted(p.name for p in (folder / "test_shared").iterdir()) == ["SharedTP_bs_1.json", "SharedTP_bs_2.json"]
    files = sorted((p for p in folder.rglob("*.json") if p.parent.name != "test_shared"), key=lambda p: p.name)
    assert [p.name for p in files] == ["ModelB_bs_2_rank0.json", "ModelB_bs_2_rank1.json"] + [
        f"TinyDecodeRunner-tp2_bs_{bs}_rank{r}.json" for bs in (1, 2) for r in (0, 1)
    ]
    # Each parametrization has its own folder.
    assert len({p.parent for p in files}) == 2 and all(p.parent.name.startswith("test_per_rank_") for p in files)
    assert len({p.parent for p in files[:2]}) == 1 and len({p.parent for p in files[2:]}) == 1
    rank1 = json.loads(files[-1].read_text())  # TinyDecodeRunner-tp2_bs_2_rank1.json
    assert rank1["key"]["rank"] == 1
    assert [op["input_dims"][0] for op in rank1["ops"] if op["name"] == "c10d::allreduce_"] == [[[2, 64]]]
    before = golden_bytes(goldens)

    # One trace per rank and batch size, each with the all-reduce; each parametrization exports to its own
    # folder (as its goldens' folder).
    a, b = (trace_group_for(f"test_tp.py::test_per_rank[{param}]") for param in "ab")
    traces = sorted(
        p.relative_to(tmp_path / TRACE_SUBDIR).as_posix()
        for p in (tmp_path / TRACE_SUBDIR).rglob("*.gz")
        if "test_shared" not in p.as_posix()
    )
    assert traces == [f"{a}/TinyDecodeRunner-tp2_bs_{bs}_rank{r}.json.gz" for bs in (1, 2) for r in (0, 1)] + [
        f"{b}/ModelB_bs_2_rank{r}.json.gz" for r in (0, 1)
    ]
    for path in trace_dir(tmp_path, a).glob("*.json.gz"):
        ops = [e for e in load_trace(path)["traceEvents"] if e.get("cat") == "cpu_op"]
        assert any(e["name"] == "c10d::allreduce_" for e in ops), path.name

    # Rank 1's MLP shard changes: both tests of tp_runner fail naming rank 1 and each batch size, rank 0 passes;
    # the unchanged model passes, goldens byte-identical. Without --graph-capture-trace no worker's ranks export
    # a trace.
    monkeypatch.setenv("SKEW_RANK", "1")
    untraced = tmp_path / "untraced"
    skewed = xdist_run(pytester, f"--graph-capture-dir={untraced}")
    skewed.assert_outcomes(failed=2, passed=1)
    assert "failed: test_tp.py::test_per_rank[a] " in skewed.stdout.str()
    assert not (untraced / TRACE_SUBDIR).exists()
    text = skewed.stdout.str()
    assert "TinyDecodeRunner-tp2 does not match its goldens for bs=1 rank=1, bs=2 rank=1 (" in text
    assert "rank=1 bs=1,2 differ from their goldens:" in text  # each change once for both sizes
    assert "bs=1,2: ~ aten::mm (from linear › matmul) [[bs,64],[64,128]] → [[bs,64],[64,192]]" in text  # GEMM once
    assert "bs=1 rank=0" not in text and "bs=2 rank=0" not in text
    assert "bs=2: share_ranks=True, but rank 1 differs from rank 0, so they cannot share one golden" in text
    assert golden_bytes(goldens) == before
    assert time.monotonic() - started < 280


# --------------------------------------------------------------------------- no process left, the stage reached


@pytest.mark.slow
def test_stopping_the_ranks_stops_every_process_they_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rank 0 hangs and is stopped; rank 1 fails and exits: the processes both started go with them."""
    monkeypatch.setattr(distributed, "_ERROR_GRACE", 0.5)  # rank 0 hangs: no error of its own to wait for
    pid_files = [str(tmp_path / f"rank{rank}-child.pid") for rank in range(2)]
    first = len(distributed.spawned_pids())
    try:
        with pytest.raises(RankError) as info:
            distributed.run_on_ranks("rank_targets:start_a_process_then_hang_or_fail", 2, args=(pid_files,), timeout=60)
        assert "rank 1 of 2 failed during running: RuntimeError: rank 1 fails; rank 0 hangs" in str(info.value)
        assert "rank 0: did not finish (stage: running)" in str(info.value)
        children = [int(Path(f).read_text()) for f in pid_files]
        assert wait_gone(children, within=2.0) == [], "processes the ranks started were left running"
        assert_gone(distributed.spawned_pids()[first:])
    finally:
        for pid in [int(Path(f).read_text()) for f in pid_files if Path(f).exists()]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_a_rank_holding_the_gil_dies_with_its_killed_parent(tmp_path: Path) -> None:
    """pytest killed with SIGKILL while a rank sits in one long C call: the kernel ends the rank (Linux)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("only Linux can have the kernel kill a child with its parent (prctl PR_SET_PDEATHSIG)")
    pid_file = tmp_path / "rank.pid"
    parent_code = (
        "from pytest_graphcapture.engine.ranks.supervisor import run_on_ranks\n"
        f"run_on_ranks('rank_targets:hold_the_gil', 1, args=({str(pid_file)!r},), timeout=300)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "tests")])}
    parent = subprocess.Popen([sys.executable, "-c", parent_code], env=env)
    rank_pid = None
    try:
        deadline = time.monotonic() + 120
        while not pid_file.exists() or not pid_file.read_text():
            assert parent.poll() is None and time.monotonic() < deadline, "the rank never started its target"
            time.sleep(0.05)
        rank_pid = int(pid_file.read_text())
        time.sleep(0.5)  # inside the C call by now
        parent.kill()
        parent.wait(10)
        assert wait_gone([rank_pid], within=5.0) == [], "the rank outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if rank_pid is not None:
            with contextlib.suppress(OSError):
                os.kill(rank_pid, signal.SIGKILL)


def test_a_rank_that_exits_while_building_its_runner_is_named_with_its_exit_code_and_stage() -> None:
    first = len(distributed.spawned_pids())
    started = time.monotonic()
    with pytest.raises(RankError) as info:
        capture_on_ranks("rank_targets:exit_while_building", 2, timeout=30)
    assert time.monotonic() - started < 30 + 10  # rank 0, waiting for rank 1 in a collective, is not waited for
    assert info.value.primary == 1
    assert str(info.value).splitlines()[0] == (
        "rank 1 of 2 failed during building the runner: the process exited with code 7 without reporting a result"
    )
    assert_gone(distributed.spawned_pids()[first:])


def test_a_rank_that_dies_of_a_native_crash_shows_the_python_stack_it_crashed_in() -> None:
    with pytest.raises(RankError) as info:
        distributed.run_on_ranks("rank_targets:crash", 1, timeout=30)
    lines = str(info.value).splitlines()
    assert lines[:2] == [
        "rank 0 of 1 failed during running: the process was killed by signal SIGSEGV without reporting a result",
        "rank 0 traceback (last lines):",
    ]
    # faulthandler's record as a traceback: the crashing call last, then the error.
    frames = [line.strip() for line in lines[2:-2]]
    assert all(f.startswith('File "') for f in frames) and any(f.endswith(" in crash") for f in frames[-2:]), lines
    assert lines[-2:] == ["  Fatal Python error: Segmentation fault", "all 1 rank processes were stopped"]
