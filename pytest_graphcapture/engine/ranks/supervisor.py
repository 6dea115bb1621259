"""Run a function on N ranks: spawned processes with ``torch.distributed`` initialized, supervised."""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import itertools
import math
import os
import queue as queue_mod
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from ...errors import GraphCaptureError, UsageError

DEFAULT_TIMEOUT = 120.0
#: After the first rank fails, how long the others may take to report their own errors.
_ERROR_GRACE = 3.0
#: Spawns retried when the chosen port was taken between choosing and binding it.
_PORT_RETRIES = 3
#: How ranks start: a fresh interpreter each, never a fork (torch's advice for processes with threads).
_START_METHOD = "spawn"


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
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


#: Every rank process this process spawned (tests check none is left running).
_SPAWNED: list[int] = []


def spawned_pids() -> list[int]:
    """Pids of every rank process this interpreter spawned (tests check they are all gone)."""
    return list(_SPAWNED)


def _signal_rank(proc: Any, sig: int) -> None:
    """Send ``sig`` to the rank's process group (the rank and all it started); to the rank alone when it has none."""
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


@dataclass(frozen=True)
class _RankJob:
    """What every rank of one run is handed: ``target(ctx, *args)`` on ``world_size`` ranks of ``device_type``."""

    target: Target
    world_size: int
    args: tuple
    device_type: str
    backend: str
    timeout: float


def _run_once(job: _RankJob, on_progress: Optional[Callable[[int, str], None]]) -> list[Any]:
    import multiprocessing

    return _supervise(multiprocessing.get_context(_START_METHOD), job, on_progress)


def _start_ranks(ctx: Any, world_size: int, rank_args: Callable[[int], tuple], procs: dict[int, Any]) -> None:
    """Start the ranks into ``procs``, in the calling thread: the kernel's parent-death signal follows
    the thread that started a process, and a helper thread would end before the ranks do."""
    for rank in range(world_size):
        proc = ctx.Process(target=_rank_main, name=f"graphcapture-rank{rank}", args=rank_args(rank))
        proc.start()
        procs[rank] = proc
        _SPAWNED.append(proc.pid)


def _supervise(ctx: Any, job: _RankJob, on_progress: Optional[Callable[[int, str], None]]) -> list[Any]:
    world_size, timeout = job.world_size, job.timeout
    queue = ctx.Queue()
    port = free_port()
    dump_dir = tempfile.mkdtemp(prefix="graphcapture-ranks-")
    states = {rank: _RankState(rank) for rank in range(world_size)}
    procs: dict[int, Any] = {}
    pids: list[int] = []
    timed_out = startup = False
    dumps: dict[int, str] = {}

    def rank_args(rank: int) -> tuple:
        return (job, rank, port, queue, os.getpid(), dump_dir)

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
                deadline = min(deadline, first_failure + _ERROR_GRACE)
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
                    state.traceback = _crash_traceback(dump_dir, rank, state.main_thread)
                    first_failure = first_failure or state.failed_at
        if all(s.status == "ok" for s in states.values()):
            return [states[rank].value for rank in range(world_size)]
        for rank, state in states.items():  # the stage a dead or hung rank reached, even if its queue did not say
            if state.status in ("running", "died"):
                state.stage = last_stage(dump_dir, rank) or state.stage
        if any(s.status == "running" for s in states.values()):
            dumps = _dump_stacks(procs, states, dump_dir)
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
    """Run ``target(ctx, *args)`` on ``world_size`` spawned ranks; return their results by rank."""
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise UsageError(f"number of ranks must be a positive integer, got {world_size!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise UsageError(f"rank timeout must be a positive, finite number of seconds, got {timeout!r}")
    check_picklable(target, what="rank target")
    backend = backend or default_backend(device_type)
    payload = (tuple(batch_sizes) if batch_sizes else None, *args)
    for attempt in range(_PORT_RETRIES):
        try:
            job = _RankJob(target, world_size, payload, device_type, backend, float(timeout))
            return _run_once(job, on_progress)
        except RankError as exc:
            port_taken = any(
                "init_process_group" in text and "address already in use" in text.lower() for text in exc.ranks.values()
            )
            if not port_taken or attempt == _PORT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


#: Interpreter start and ``import torch`` in every rank may take at least this long (slow CI disks).
STARTUP_ALLOWANCE = 60.0


class RankError(GraphCaptureError):
    """A multi-rank run failed: a rank raised, died or did not finish in time."""

    def __init__(
        self,
        message: str,
        *,
        ranks: dict[int, str],
        primary: Optional[int],
        pids: Sequence[int],
        timed_out: bool = False,
    ) -> None:
        super().__init__(message)
        self.ranks = ranks
        self.primary = primary
        self.pids = list(pids)
        self.timed_out = timed_out


@dataclass
class _RankState:
    rank: int
    pid: Optional[int] = None
    main_thread: Optional[int] = None
    ready: bool = False
    stage: str = "starting"
    status: str = "running"  # running | ok | error | died
    value: Any = None
    error: Optional[str] = None
    traceback: Optional[str] = None
    failed_at: Optional[float] = None
    exited_at: Optional[float] = None


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


def _main_thread_frames(text: str, ident: Optional[int]) -> list[tuple[str, int, str]]:
    """Frames (innermost first) of the thread ``ident`` in a faulthandler dump."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
    wanted = f"0x{ident:016x}" if ident is not None else None
    for block in blocks:
        head = block.strip().splitlines()[0] if block.strip() else ""
        if wanted is None or wanted in head:
            return [(m["file"], int(m["line"]), m["func"]) for m in map(_FRAME.match, block.splitlines()) if m]
    return []


def _where(frames: list[tuple[str, int, str]]) -> tuple[bool, str]:
    """(waiting in torch.distributed?, where: the collective, or the innermost frame outside our machinery)."""
    if not frames:
        return False, ""
    in_dist = any("torch/distributed" in f.replace("\\", "/") for f, _, _ in frames[:3])
    if in_dist:
        calls = [
            func
            for file, _, func in frames
            if "torch/distributed" in file.replace("\\", "/") and func not in ("wrapper", "<module>")
        ]
        return True, f"torch.distributed {calls[0]}" if calls else "torch.distributed"
    ours = (os.path.join("pytest_graphcapture", ""), "multiprocessing")
    for file, line, func in frames:
        norm = file.replace("\\", "/")
        if "torch/" in norm or any(part in file for part in ours):
            continue
        return in_dist, f"{file}:{line} in {func}"
    file, line, func = frames[0]
    return in_dist, f"{file}:{line} in {func}"


def _dump_stacks(procs: dict[int, Any], states: dict[int, _RankState], dump_dir: str) -> dict[int, str]:
    """Ask unfinished ranks for a faulthandler dump; return ``{rank: text}``."""
    if not hasattr(signal, "SIGUSR1"):
        return {}
    asked = []
    for rank, proc in procs.items():
        if states[rank].status == "running" and states[rank].ready and proc.is_alive():
            try:
                os.kill(proc.pid, signal.SIGUSR1)
                asked.append(rank)
            except OSError:
                pass
    if not asked:
        return {}
    time.sleep(0.5)
    dumps = {}
    for rank in asked:
        try:
            dumps[rank] = Path(_rank_file(dump_dir, rank, "txt")).read_text(errors="replace")
        except OSError:
            pass
    return dumps


_PEER_LOST = re.compile(
    r"connection (closed|reset)|broken pipe|econnreset|connection refused|socket closed|"
    r"remote (process|peer)|peer .*(closed|disconnect)",
    re.IGNORECASE,
)


def _crash_traceback(dump_dir: str, rank: int, main_thread: Optional[int]) -> Optional[str]:
    """faulthandler's record of a rank's native crash as a traceback (innermost frame last, then the error), or None."""
    try:
        lines = Path(_rank_file(dump_dir, rank, "txt")).read_text(errors="replace").splitlines()
    except OSError:
        return None
    fatal = next((i for i, line in enumerate(lines) if line.startswith("Fatal Python error:")), None)
    if fatal is None:
        return None
    # The crashing thread's frames; the main thread's where a thread without Python crashed.
    heads = ("Current thread 0x", f"Thread 0x{main_thread or 0:016x}")
    found = [(i, head) for head in heads for i in range(fatal, len(lines)) if lines[i].startswith(head)]
    at, head = found[0] if found else (len(lines), heads[0])
    frames = list(itertools.takewhile(lambda line: line.startswith("  "), lines[at + 1 :]))
    note = "" if head == heads[0] else " (in a thread without Python; above: the main thread)"
    return "\n".join([*reversed(frames), lines[fatal] + note])


def _lost_peer(error: str) -> bool:
    """Whether a rank's error says another rank went away (a consequence, not the cause)."""
    return bool(_PEER_LOST.search(error))


def _tail(text: str, lines: int = 12) -> str:
    kept = text.rstrip().splitlines()
    return "\n".join(kept[-lines:])


def failure(
    states: dict[int, _RankState],
    timeout: float,
    timed_out: bool,
    startup: bool,
    dumps: dict[int, str],
    pids: list[int],
) -> RankError:
    ranks: dict[int, str] = {}
    # The cause first: a rank that died or raised on its own comes before ranks that only
    # lost their peer (their collectives fail *because* the first rank went away).
    failed = sorted(
        (s for s in states.values() if s.status in ("error", "died")),
        key=lambda s: (_lost_peer(s.error or ""), s.failed_at or 0.0, s.rank),
    )
    unfinished = [s for s in states.values() if s.status == "running"]
    lines: list[str] = []
    primary: Optional[int] = None
    if failed:
        first = failed[0]
        primary = first.rank
        lines.append(f"rank {first.rank} of {len(states)} failed during {first.stage}: {first.error}")
        if first.traceback:
            lines.append(f"rank {first.rank} traceback (last lines):")
            lines.extend("  " + line for line in _tail(first.traceback).splitlines())
        for state in failed:
            ranks[state.rank] = f"failed during {state.stage}: {state.error}"
        for state in failed[1:]:
            lines.append(f"rank {state.rank} also failed (during {state.stage}): {state.error}")
    waiting_ranks = []
    for state in unfinished:
        in_dist, where = _where(_main_thread_frames(dumps.get(state.rank, ""), state.main_thread))
        if in_dist:
            waiting_ranks.append(state.rank)
        at = (f" (waiting in {where})" if in_dist else f" at {where}") if where else ""
        ranks[state.rank] = f"did not finish (stage: {state.stage}){at}"
    if unfinished:
        hung = [s.rank for s in unfinished if s.rank not in waiting_ranks] or [s.rank for s in unfinished]
        if primary is None:
            primary = hung[0]
            phase = "start up" if startup else "finish"
            limit = max(timeout, STARTUP_ALLOWANCE) if startup else timeout
            names = ", ".join(str(r) for r in hung)
            lines.insert(
                0,
                f"rank{'s' if len(hung) > 1 else ''} {names} of {len(states)} did not {phase} "
                f"within {limit:g}s (--graph-capture-rank-timeout)",
            )
        for state in sorted(unfinished, key=lambda s: s.rank):
            lines.append(f"rank {state.rank}: {ranks[state.rank]}; stopped")
    lines.append(f"all {len(pids)} rank processes were stopped")
    return RankError("\n".join(lines), ranks=ranks, primary=primary, pids=pids, timed_out=timed_out)


#: Extra time the process group's own timeout gets over ours, so the parent reports a hang, not gloo.
_PG_TIMEOUT_MARGIN = 30.0
#: Bytes of a rank's stage kept in its stage file (a longer stage text is cut).
_STAGE_BYTES = 512
#: ``prctl`` option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1

_CHANNEL: Optional["_Channel"] = None


class _Channel:
    """A rank's line to the parent: stage changes, progress lines, the result."""

    def __init__(self, rank: int, queue: Any, stage_file: Optional[str] = None) -> None:
        self.rank = rank
        self.queue = queue
        self.current = "starting"
        self._stage_fd: Optional[int] = None
        if stage_file is not None:
            with contextlib.suppress(OSError):  # without it, the queue's stage is all there is
                self._stage_fd = os.open(stage_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o600)

    def stage(self, text: str) -> None:
        self.current = text
        if self._stage_fd is not None:
            raw = text.encode("utf-8", "replace")[:_STAGE_BYTES].decode("utf-8", "ignore").encode("utf-8")
            with contextlib.suppress(OSError):  # one fixed-size write over the last: never a truncated file
                os.lseek(self._stage_fd, 0, os.SEEK_SET)
                os.write(self._stage_fd, raw.ljust(_STAGE_BYTES, b"\0"))
        self.queue.put(("stage", self.rank, text))

    def progress(self, line: str) -> None:
        self.queue.put(("progress", self.rank, line))


def _rank_file(dump_dir: str, rank: int, kind: str) -> str:
    """Where rank ``rank`` writes its stage (``stage``) or its faulthandler stacks (``txt``)."""
    return os.path.join(dump_dir, f"rank{rank}.{kind}")


def last_stage(dump_dir: str, rank: int) -> Optional[str]:
    """The stage rank ``rank`` last wrote to its stage file, or None when it wrote none."""
    try:
        with open(_rank_file(dump_dir, rank, "stage"), "rb") as handle:
            raw = handle.read(_STAGE_BYTES).split(b"\0", 1)[0]
    except OSError:
        return None
    return raw.decode("utf-8", "replace") or None


def report_stage(text: str) -> None:
    """Tell the parent what this rank is doing (shown when it hangs); no-op outside a rank."""
    if _CHANNEL is not None:
        _CHANNEL.stage(text)


def progress_to_parent() -> Optional[Callable[[str], None]]:
    """A progress-line callback that reaches the parent, or None outside a rank."""
    return _CHANNEL.progress if _CHANNEL is not None else None


def _die_with_parent() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _leave_parent_group() -> None:
    """Make this rank the leader of a new session and process group, so the parent can stop all it started."""
    if hasattr(os, "setsid"):
        try:
            os.setsid()
        except OSError:  # already a group leader
            pass


def _watch_parent(parent_pid: int) -> None:
    """Exit this rank when the parent process is gone (no orphans even if pytest is killed)."""

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(3)

    threading.Thread(target=watch, name="graphcapture-parent-watch", daemon=True).start()


def _rank_main(job: _RankJob, rank: int, port: int, queue: Any, parent_pid: int, dump_dir: str) -> None:
    """Entry point of one rank process (module level, so ``spawn`` can import it)."""
    world_size, device_type, backend, args = job.world_size, job.device_type, job.backend, job.args
    global _CHANNEL
    _leave_parent_group()
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to tell us
        os._exit(3)
    _watch_parent(parent_pid)
    # One file for the stacks the parent asks for (SIGUSR1) and those a native crash writes as the rank dies.
    dump = open(_rank_file(dump_dir, rank, "txt"), "w")
    faulthandler.enable(file=dump, all_threads=True)
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    channel = _CHANNEL = _Channel(rank, queue, _rank_file(dump_dir, rank, "stage"))
    queue.put(("ready", rank, os.getpid(), threading.main_thread().ident))
    dist = None
    try:
        import torch
        import torch.distributed as dist

        if sys.platform.startswith("linux"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank is local: stay on loopback
        device = "cpu"
        if device_type == "cuda":
            index = rank % max(torch.cuda.device_count(), 1)
            torch.cuda.set_device(index)
            device = f"cuda:{index}"
        channel.stage("init_process_group")
        dist.init_process_group(
            backend,
            init_method=f"tcp://127.0.0.1:{port}",
            world_size=world_size,
            rank=rank,
            timeout=timedelta(seconds=job.timeout + _PG_TIMEOUT_MARGIN),
        )
        channel.stage("running")
        fn = resolve_target(job.target, what="rank target")
        value = fn(RankContext(rank, world_size, device, backend, args[0] if args else None), *args[1:])
        channel.stage("sending the result")
        queue.put(("result", rank, value))
    except BaseException as exc:  # noqa: BLE001 - everything is reported to the parent
        stage = channel.current
        if getattr(exc, "key", None) is not None and getattr(exc, "stage", None):  # a CaptureError knows better
            stage = f"{exc.key} {exc.stage}"  # type: ignore[attr-defined]
        queue.put(("error", rank, f"{type(exc).__name__}: {exc}", traceback.format_exc(), stage))
    finally:
        if dist is not None and dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:
                pass
        queue.close()
        queue.join_thread()
        faulthandler.disable()
        dump.close()


Target = Union[str, Callable[..., Any]]


@dataclass(frozen=True)
class RankContext:
    """What a rank's target or runner factory is told about its rank."""

    rank: int
    world_size: int
    device: str
    backend: str
    batch_sizes: Optional[tuple[int, ...]] = None

    @property
    def torch_device(self) -> Any:
        import torch

        return torch.device(self.device)


def default_backend(device_type: str) -> str:
    """``nccl`` for CUDA/ROCm devices (RCCL answers to that name), ``gloo`` otherwise."""
    return "nccl" if device_type == "cuda" else "gloo"


def resolve_target(target: Target, *, what: str = "factory") -> Callable[..., Any]:
    """The callable named by ``"package.module:function"``, or ``target`` itself if callable."""
    if callable(target):
        return target
    if not isinstance(target, str) or ":" not in target:
        raise UsageError(f"{what} {target!r}: expected a callable or a 'module:function' string")
    module_name, _, attr = target.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"{what} {target!r} cannot be imported: {type(exc).__name__}: {exc}") from None
    if not callable(obj):
        raise UsageError(f"{what} {target!r} is not callable")
    return obj


def check_picklable(target: Target, *, what: str = "factory") -> None:
    """UsageError unless ``target`` can be sent to a spawned process (a string always can)."""
    if isinstance(target, str):
        resolve_target(target, what=what)
        return
    if not callable(target):
        raise UsageError(f"{what} {target!r}: expected a callable or a 'module:function' string")
    from multiprocessing.reduction import ForkingPickler  # what spawn sends the target with

    try:
        ForkingPickler.dumps(target)
    except Exception as exc:
        name = getattr(target, "__qualname__", repr(target))
        raise UsageError(
            f"{what} {name} cannot be sent to the rank processes ({type(exc).__name__}: {exc}); use a module-level "
            f"function (not a lambda, closure or runner object) or a 'module:function' string"
        ) from None
