"""Run a function on N ranks: spawned processes with ``torch.distributed`` initialized, supervised.

Tensor-parallel decode captures one graph set per rank, and a regression often
shows on one rank's collective or shard shapes only, so the gate has to capture
every rank.  :func:`run_on_ranks` spawns ``world_size`` processes (``spawn`` start
method, as torch advises: a process that imported torch has threads, and a fork of it can
crash); each initializes the default process group (``gloo`` on CPU, ``nccl`` on CUDA —
RCCL on ROCm builds — unless told otherwise) over a free loopback port, calls a picklable
target with a :class:`RankContext` and sends its plain-data return value back through a queue.
:mod:`.capture` runs the capture engine this way; :mod:`.rank_process` is the rank's side
and :mod:`.target` what it runs.

Failure handling, the part that makes it usable as a gate:

* ``timeout`` bounds the work after every rank's interpreter has started
  (``init_process_group`` and the capture); start-up itself (interpreter and
  ``import torch``) is bounded by ``max(timeout, STARTUP_ALLOWANCE)``.
* The first rank that raises (or dies) fails the run with that rank's message
  and traceback; the other ranks get :data:`ERROR_GRACE` seconds to report their
  own errors (often consequences, listed after it), then every child is
  terminated, killed if needed, and joined — no process is left behind.
* On a timeout each unfinished rank is named with its last stage and, on POSIX,
  the innermost frame of its main thread (a ``faulthandler`` dump), and a rank
  waiting inside ``torch.distributed`` is told apart from the one that hangs.
* Each rank leads a process group of its own (a new session), and stopping a
  rank stops its group: whatever the runner factory started (a server, a
  compile worker, a ``sleep``) goes with it.
* Children die with their parent, so even a killed pytest leaves no orphan
  behind: on Linux the kernel kills them (``prctl(PR_SET_PDEATHSIG)``, which
  works while a rank holds the GIL in a long C call); everywhere a thread also
  watches the parent (it needs the GIL).
* A rank's stage is also written to a file, synchronously: a rank that dies
  without a word (``os._exit``, a segfault) is reported at the last stage it
  reached, not the last one its message queue delivered before it died.
"""

from __future__ import annotations

import math
import os
import queue as queue_mod
import shutil
import signal
import socket
import tempfile
import time
from typing import Any, Callable, Optional, Sequence

from ...errors import UsageError
from .diagnose import STARTUP_ALLOWANCE, RankError, RankState, dump_stacks, failure
from .rank_process import last_stage, rank_main
from .target import RankContext, Target, check_picklable, default_backend

# RankContext and RankError are what a caller of run_on_ranks meets: its target's argument, its error.
__all__ = ["DEFAULT_TIMEOUT", "RankContext", "RankError", "free_port", "run_on_ranks", "spawned_pids"]

DEFAULT_TIMEOUT = 120.0
#: After the first rank fails, how long the others may take to report their own errors.
ERROR_GRACE = 3.0
#: Spawns retried when the chosen port was taken between choosing and binding it.
PORT_RETRIES = 3
#: How ranks start: a fresh interpreter each, never a fork (torch's advice for processes with threads).
START_METHOD = "spawn"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


#: Every rank process this process spawned (tests check none is left running).
_SPAWNED: list[int] = []


def spawned_pids() -> list[int]:
    """Pids of every rank process this interpreter spawned (tests check they are all gone)."""
    return list(_SPAWNED)


def _signal_rank(proc: Any, sig: int) -> None:
    """Send ``sig`` to the rank's process group (the rank and all it started); to the rank alone when it has none.

    A rank that died before it made its group has none, and a group whose every
    process is gone no longer exists: then only a rank still running is signalled.
    """
    if hasattr(os, "killpg") and proc.pid is not None:
        try:
            os.killpg(proc.pid, sig)
            return
        except OSError:
            pass
    if proc.exitcode is None:
        (proc.kill if sig == getattr(signal, "SIGKILL", None) else proc.terminate)()


def _stop_all(procs: Sequence[Any]) -> None:
    # Ranks that already exited too: what they started may still run in their group.
    for proc in procs:
        _signal_rank(proc, signal.SIGTERM)
    deadline = time.monotonic() + 3.0
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:  # what ignored SIGTERM, rank or not
        _signal_rank(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
    for proc in procs:
        proc.join(5.0)
    for proc in procs:
        try:
            proc.close()
        except ValueError:
            pass


def _run_once(
    target: Target,
    world_size: int,
    args: tuple,
    device_type: str,
    backend: str,
    timeout: float,
    on_progress: Optional[Callable[[int, str], None]],
) -> list[Any]:
    import multiprocessing

    ctx = multiprocessing.get_context(START_METHOD)
    return _supervise(ctx, target, world_size, args, device_type, backend, timeout, on_progress)


def _start_ranks(ctx: Any, world_size: int, rank_args: Callable[[int], tuple], procs: dict[int, Any]) -> None:
    """Start the ranks into ``procs``, in the calling thread: the kernel's parent-death signal follows
    the thread that started a process, and a helper thread would end before the ranks do."""
    for rank in range(world_size):
        proc = ctx.Process(target=rank_main, name=f"graphcapture-rank{rank}", args=rank_args(rank))
        proc.start()
        procs[rank] = proc
        _SPAWNED.append(proc.pid)


def _supervise(
    ctx: Any,
    target: Target,
    world_size: int,
    args: tuple,
    device_type: str,
    backend: str,
    timeout: float,
    on_progress: Optional[Callable[[int, str], None]],
) -> list[Any]:
    queue = ctx.Queue()
    port = free_port()
    dump_dir = tempfile.mkdtemp(prefix="graphcapture-ranks-")
    states = {rank: RankState(rank) for rank in range(world_size)}
    procs: dict[int, Any] = {}
    pids: list[int] = []
    timed_out = startup = False
    dumps: dict[int, str] = {}

    def rank_args(rank: int) -> tuple:
        parent = os.getpid()
        return (
            rank,
            world_size,
            port,
            device_type,
            backend,
            timeout,
            target,
            args,
            queue,
            parent,
            dump_dir,
        )

    try:
        _start_ranks(ctx, world_size, rank_args, procs)
        pids[:] = [proc.pid for proc in procs.values()]
        started = time.monotonic()
        startup_deadline = started + max(timeout, STARTUP_ALLOWANCE)
        run_deadline: Optional[float] = None
        first_failure: Optional[float] = None
        while any(s.status == "running" for s in states.values()):
            now = time.monotonic()
            if run_deadline is None and all(s.ready for s in states.values()):
                run_deadline = now + timeout
            deadline = run_deadline if run_deadline is not None else startup_deadline
            if first_failure is not None:
                deadline = min(deadline, first_failure + ERROR_GRACE)
            if now >= deadline:
                if first_failure is None:
                    timed_out, startup = True, run_deadline is None
                break
            try:
                message = queue.get(timeout=min(0.2, max(deadline - now, 0.01)))
            except queue_mod.Empty:
                message = None
            if message is not None:
                kind, rank = message[0], message[1]
                state = states[rank]
                if kind == "ready":
                    state.ready, state.pid, state.main_thread = True, message[2], message[3]
                elif kind == "stage":
                    state.stage = message[2]
                elif kind == "progress" and on_progress is not None:
                    on_progress(rank, message[2])
                elif kind == "result":
                    state.status, state.value = "ok", message[2]
                elif kind == "error":
                    state.status, state.error, state.traceback, state.stage = (
                        "error",
                        message[2],
                        message[3],
                        message[4],
                    )
                    state.failed_at = time.monotonic()
                    first_failure = first_failure or state.failed_at
            # A rank that exited without a result (segfault, os._exit, OOM kill): give its queued
            # messages a moment to arrive, then report it, dated when its exit was seen.
            for rank, proc in procs.items():
                state = states[rank]
                if state.status != "running" or proc.exitcode is None:
                    continue
                if state.exited_at is None:
                    state.exited_at = time.monotonic()
                elif time.monotonic() - state.exited_at > 1.0 and message is None:
                    state.status, state.failed_at = "died", state.exited_at
                    state.error = f"the process {_describe_exit(proc.exitcode)} without reporting a result"
                    first_failure = first_failure or state.failed_at
        if all(s.status == "ok" for s in states.values()):
            return [states[rank].value for rank in range(world_size)]
        for rank, state in states.items():  # the stage a dead or hung rank reached, even if its queue did not say
            if state.status in ("running", "died"):
                state.stage = last_stage(dump_dir, rank) or state.stage
        if any(s.status == "running" for s in states.values()):
            dumps = dump_stacks(procs, states, dump_dir)
    finally:
        _stop_all(list(procs.values()))
        queue.close()
        queue.cancel_join_thread()
        shutil.rmtree(dump_dir, ignore_errors=True)
    raise failure(states, timeout, timed_out, startup, dumps, pids)


def run_on_ranks(
    target: Target,
    world_size: int,
    *,
    args: tuple = (),
    device_type: str = "cpu",
    backend: Optional[str] = None,
    timeout: float = DEFAULT_TIMEOUT,
    batch_sizes: Optional[Sequence[int]] = None,
    on_progress: Optional[Callable[[int, str], None]] = None,
) -> list[Any]:
    """Run ``target(ctx, *args)`` on ``world_size`` spawned ranks; return their results by rank.

    ``target`` is a module-level callable or a ``"module:function"`` string; its
    return value and ``args`` must be picklable (plain data is best).  Raises
    :class:`RankError` when a rank fails, dies or does not finish in time (all
    processes stopped first), :class:`~pytest_graphcapture.errors.UsageError` on
    bad arguments.  A port taken between choosing and binding it is retried.
    """
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise UsageError(f"number of ranks must be a positive integer, got {world_size!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise UsageError(f"rank timeout must be a positive, finite number of seconds, got {timeout!r}")
    check_picklable(target, what="rank target")
    backend = backend or default_backend(device_type)
    payload = (tuple(batch_sizes) if batch_sizes else None, *args)
    for attempt in range(PORT_RETRIES):
        try:
            return _run_once(target, world_size, payload, device_type, backend, float(timeout), on_progress)
        except RankError as exc:
            port_taken = any(
                "init_process_group" in text and "address already in use" in text.lower() for text in exc.ranks.values()
            )
            if not port_taken or attempt == PORT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover
