"""Run a graph capture on N ranks: spawned processes with ``torch.distributed`` initialized.

Tensor-parallel decode captures one graph set per rank, and a regression often
shows on one rank's collective or shard shapes only, so the gate has to capture
every rank (issue #9).  This module is the engine behind the
``graph_capture_ranks(n)`` marker and ``graph_capture(..., ranks=n)``:

* :func:`run_on_ranks` spawns ``world_size`` processes (``spawn`` start method:
  safe with CUDA and threads), each initializes the default process group
  (``gloo`` on CPU, ``nccl`` on CUDA — RCCL on ROCm builds — unless told
  otherwise) over a free loopback port, calls a picklable target with a
  :class:`RankContext` and sends its plain-data return value back through a queue.
* :func:`capture_on_ranks` is that with the capture engine as the target: each
  rank builds its runner from a *factory* (a module-level callable or a
  ``"module:function"`` string — the test function itself cannot be sent to
  another process), runs :func:`~pytest_graphcapture.capture.capture_runner`
  and returns its summaries (``Summary.to_dict()``) and trace paths.  The parent
  gets one :class:`MultiRankCaptureResult` holding the keys of **all** ranks, so
  ``golden.check(result)`` checks every rank.

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
* Children watch their parent and exit if it disappears, so even a killed
  pytest leaves no orphan behind.
"""

from __future__ import annotations

import dataclasses
import importlib
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
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from .errors import GraphCaptureError, UsageError
from .keys import CaptureKey, capture_order
from .result import CaptureResult, KeyResult

DEFAULT_TIMEOUT = 120.0
#: Interpreter start and ``import torch`` in every rank may take at least this long (slow CI disks).
STARTUP_ALLOWANCE = 60.0
#: After the first rank fails, how long the others may take to report their own errors.
ERROR_GRACE = 3.0
#: Extra time the process group's own timeout gets over ours, so the parent reports a hang, not gloo.
PG_TIMEOUT_MARGIN = 30.0
#: Spawns retried when the chosen port was taken between choosing and binding it.
PORT_RETRIES = 3
DEFAULT_FACTORY = "pytest_graphcapture.distributed:tensor_parallel_decode_runner"

Target = Union[str, Callable[..., Any]]


class RankError(GraphCaptureError):
    """A multi-rank run failed: a rank raised, died or did not finish in time.

    ``ranks`` maps each failed or unfinished rank to a one-line description,
    ``primary`` is the rank whose failure is reported first (the first to fail,
    or the hung one), ``pids`` the child processes (all gone when this is raised).
    """

    def __init__(self, message: str, *, ranks: dict[int, str], primary: Optional[int], pids: Sequence[int],
                 timed_out: bool = False) -> None:
        super().__init__(message)
        self.ranks = ranks
        self.primary = primary
        self.pids = list(pids)
        self.timed_out = timed_out


@dataclass(frozen=True)
class RankContext:
    """What a rank's target or runner factory is told about its rank.

    ``device`` is ``"cpu"`` or ``"cuda:<i>"`` (``i = rank mod visible devices``),
    ``backend`` the process group backend, ``batch_sizes`` the session's
    ``--graph-capture-batch-sizes`` (None: the runner's default).
    """

    rank: int
    world_size: int
    device: str
    backend: str
    batch_sizes: Optional[tuple[int, ...]] = None

    @property
    def torch_device(self) -> Any:
        import torch

        return torch.device(self.device)


# --------------------------------------------------------------------------- helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
            f"function (not a lambda, closure or runner object) or a 'module:function' string") from None


def _describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


# --------------------------------------------------------------------------- the child side

_CHANNEL: Optional["_Channel"] = None


class _Channel:
    """A rank's line to the parent: stage changes, progress lines, the result."""

    def __init__(self, rank: int, queue: Any) -> None:
        self.rank = rank
        self.queue = queue
        self.current = "starting"

    def stage(self, text: str) -> None:
        self.current = text
        self.queue.put(("stage", self.rank, text))

    def progress(self, line: str) -> None:
        self.queue.put(("progress", self.rank, line))


def report_stage(text: str) -> None:
    """Tell the parent what this rank is doing (shown when it hangs); no-op outside a rank."""
    if _CHANNEL is not None:
        _CHANNEL.stage(text)


def _watch_parent(parent_pid: int) -> None:
    """Exit this rank when the parent process is gone (no orphans even if pytest is killed)."""

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if os.getppid() != parent_pid:
                os._exit(3)

    threading.Thread(target=watch, name="graphcapture-parent-watch", daemon=True).start()


def _rank_main(rank: int, world_size: int, port: int, device_type: str, backend: str, timeout: float,
               target: Target, args: tuple, queue: Any, parent_pid: int, dump_dir: str) -> None:
    """Entry point of one rank process (module level, so ``spawn`` can import it)."""
    global _CHANNEL
    _watch_parent(parent_pid)
    dump = None
    if hasattr(signal, "SIGUSR1"):
        import faulthandler

        dump = open(os.path.join(dump_dir, f"rank{rank}.txt"), "w")
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    channel = _CHANNEL = _Channel(rank, queue)
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
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", world_size=world_size, rank=rank,
                                timeout=timedelta(seconds=timeout + PG_TIMEOUT_MARGIN))
        channel.stage("running")
        fn = resolve_target(target, what="rank target")
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
        if dump is not None:
            dump.close()


# --------------------------------------------------------------------------- the parent side


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


_SPAWNED: list[int] = []


def spawned_pids() -> list[int]:
    """Pids of every rank process this interpreter spawned (tests check they are all gone)."""
    return list(_SPAWNED)


def _stop_all(procs: Sequence[Any]) -> None:
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + 3.0
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
            proc.join(5.0)
    for proc in procs:
        try:
            proc.close()
        except ValueError:
            pass


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
        calls = [func for file, _, func in frames if "torch/distributed" in file.replace("\\", "/")
                 and func not in ("wrapper", "<module>")]
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
            dumps[rank] = Path(dump_dir, f"rank{rank}.txt").read_text(errors="replace")
        except OSError:
            pass
    return dumps


_PEER_LOST = re.compile(r"connection (closed|reset)|broken pipe|econnreset|connection refused|socket closed|"
                        r"remote (process|peer)|peer .*(closed|disconnect)", re.IGNORECASE)


def _lost_peer(error: str) -> bool:
    """Whether a rank's error says another rank went away (a consequence, not the cause)."""
    return bool(_PEER_LOST.search(error))


def _tail(text: str, lines: int = 12) -> str:
    kept = text.rstrip().splitlines()
    return "\n".join(kept[-lines:])


def _failure(states: dict[int, _RankState], timeout: float, timed_out: bool, startup: bool,
             dumps: dict[int, str], pids: list[int]) -> RankError:
    ranks: dict[int, str] = {}
    # The cause first: a rank that died or raised on its own comes before ranks that only
    # lost their peer (their collectives fail *because* the first rank went away).
    failed = sorted((s for s in states.values() if s.status in ("error", "died")),
                    key=lambda s: (_lost_peer(s.error or ""), s.failed_at or 0.0, s.rank))
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
            lines.insert(0, f"rank{'s' if len(hung) > 1 else ''} {names} of {len(states)} did not {phase} "
                            f"within {limit:g}s (--graph-capture-rank-timeout)")
        for state in sorted(unfinished, key=lambda s: s.rank):
            lines.append(f"rank {state.rank}: {ranks[state.rank]}; stopped")
    lines.append(f"all {len(pids)} rank processes were stopped")
    return RankError("\n".join(lines), ranks=ranks, primary=primary, pids=pids, timed_out=timed_out)


def _run_once(target: Target, world_size: int, args: tuple, device_type: str, backend: str, timeout: float,
              on_progress: Optional[Callable[[int, str], None]]) -> list[Any]:
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    port = free_port()
    dump_dir = tempfile.mkdtemp(prefix="graphcapture-ranks-")
    states = {rank: _RankState(rank) for rank in range(world_size)}
    procs: dict[int, Any] = {}
    pids: list[int] = []
    timed_out = startup = False
    dumps: dict[int, str] = {}
    try:
        for rank in range(world_size):
            proc = ctx.Process(target=_rank_main, name=f"graphcapture-rank{rank}",
                               args=(rank, world_size, port, device_type, backend, timeout, target, args, queue,
                                     os.getpid(), dump_dir))
            proc.start()
            procs[rank] = proc
            pids.append(proc.pid)
            _SPAWNED.append(proc.pid)
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
                    state.status, state.error, state.traceback, state.stage = "error", message[2], message[3], \
                        message[4]
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
        if any(s.status == "running" for s in states.values()):
            dumps = _dump_stacks(procs, states, dump_dir)
    finally:
        _stop_all(list(procs.values()))
        queue.close()
        queue.cancel_join_thread()
        shutil.rmtree(dump_dir, ignore_errors=True)
    raise _failure(states, timeout, timed_out, startup, dumps, pids)


def run_on_ranks(target: Target, world_size: int, *, args: tuple = (), device_type: str = "cpu",
                 backend: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
                 batch_sizes: Optional[Sequence[int]] = None,
                 on_progress: Optional[Callable[[int, str], None]] = None) -> list[Any]:
    """Run ``target(ctx, *args)`` on ``world_size`` spawned ranks; return their results by rank.

    ``target`` is a module-level callable or a ``"module:function"`` string; its
    return value and ``args`` must be picklable (plain data is best).  Raises
    :class:`RankError` when a rank fails, dies or does not finish in time (all
    processes stopped first), :class:`~pytest_graphcapture.errors.UsageError` on
    bad arguments.  A port taken between choosing and binding it is retried.
    """
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise UsageError(f"number of ranks must be a positive integer, got {world_size!r}")
    if not timeout or timeout <= 0:
        raise UsageError(f"rank timeout must be a positive number of seconds, got {timeout!r}")
    check_picklable(target, what="rank target")
    backend = backend or default_backend(device_type)
    payload = (tuple(batch_sizes) if batch_sizes else None, *args)
    for attempt in range(PORT_RETRIES):
        try:
            return _run_once(target, world_size, payload, device_type, backend, float(timeout), on_progress)
        except RankError as exc:
            port_taken = any("init_process_group" in text and "address already in use" in text.lower()
                             for text in exc.ranks.values())
            if not port_taken or attempt == PORT_RETRIES - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


# --------------------------------------------------------------------------- capture on ranks


@dataclass
class MultiRankCaptureResult(CaptureResult):
    """A :class:`CaptureResult` over all ranks: ``keys`` holds every rank's keys.

    ``world_size`` is the number of ranks, ``per_rank[r]`` rank ``r``'s own
    result, ``single_trace_paths`` the per-rank single traces (``trace="single"``).
    Graphs stay in the rank processes (``KeyResult.graph`` is None).
    """

    world_size: int = 1
    per_rank: dict[int, CaptureResult] = field(default_factory=dict)
    single_trace_paths: dict[int, Path] = field(default_factory=dict)
    seconds: float = 0.0

    def for_rank(self, rank: int) -> CaptureResult:
        """Rank ``rank``'s result; KeyError naming the ranks when absent."""
        if rank not in self.per_rank:
            raise KeyError(f"no rank {rank}; ranks: {sorted(self.per_rank)}")
        return self.per_rank[rank]


def _settings_dict(settings: Any) -> dict:
    data = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if f.name != "progress"}
    data["out_dir"] = str(data["out_dir"])
    data["profiler_flags"] = sorted(data["profiler_flags"])
    data["environment"] = dict(data["environment"])
    return data


def _capture_target(ctx: RankContext, factory: Target, settings: dict, graphs: bool) -> dict:
    """Rank side of :func:`capture_on_ranks`: build the runner, capture it, return plain data."""
    from .backend import make_backend
    from .capture import CaptureSettings, capture_runner

    report_stage("building the runner")
    runner = resolve_target(factory)(ctx)
    if not callable(getattr(runner, "capture_keys", None)):
        raise UsageError(f"runner factory {factory!r} returned {type(runner).__name__}, not a GraphRunner")
    backend = make_backend(getattr(runner, "device", None) or ctx.device, graphs=graphs)
    plain_enter = backend.enter_stage

    def enter_stage(progress: Any, stage: str) -> None:  # every stage change reaches the parent
        report_stage(f"{progress.key} {stage}")
        plain_enter(progress, stage)

    backend.enter_stage = enter_stage  # type: ignore[method-assign]
    values = dict(settings)
    values["profiler_flags"] = frozenset(values["profiler_flags"])
    values["progress"] = _CHANNEL.progress if _CHANNEL is not None else None
    result = capture_runner(runner, backend, CaptureSettings(**values), rank=ctx.rank)
    report_stage("returning the summaries")
    return {
        "runner_name": result.runner_name,
        "platform": result.platform,
        "mode": result.mode,
        "single_trace_path": str(result.single_trace_path) if result.single_trace_path else None,
        "keys": [{"key": kr.key.to_dict(),
                  "summary": kr.summary.to_dict() if kr.summary is not None else None,
                  "trace_path": str(kr.trace_path) if kr.trace_path else None,
                  "seconds": kr.seconds} for kr in result],
    }


def capture_on_ranks(factory: Target, world_size: int, settings: Any = None, *, device_type: str = "cpu",
                     backend: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT,
                     batch_sizes: Optional[Sequence[int]] = None, graphs: bool = True,
                     progress: Optional[Callable[[str], None]] = None) -> MultiRankCaptureResult:
    """Capture the runner ``factory(ctx)`` builds on each of ``world_size`` ranks.

    ``settings`` is the :class:`~pytest_graphcapture.capture.CaptureSettings` of
    every rank (sent as a plain dict; its ``progress`` callback stays here and
    receives the ranks' progress lines).  Each rank's keys carry its rank, so
    trace files get the ``_rank<r>`` / ``-TP-<r>`` suffix and goldens their
    per-rank names.  Raises :class:`RankError` as :func:`run_on_ranks` does.
    """
    from .capture import CaptureSettings
    from .summary import Summary

    settings = settings or CaptureSettings()
    check_picklable(factory)
    backend = backend or default_backend(device_type)
    values = _settings_dict(settings)
    values["environment"]["distributed"] = {"backend": backend, "world_size": world_size}
    report = progress or settings.progress

    def on_progress(rank: int, line: str) -> None:
        if report is not None:
            report(line)

    started = time.perf_counter()
    outputs = run_on_ranks(_capture_target, world_size, args=(factory, values, graphs), device_type=device_type,
                           backend=backend, timeout=timeout, batch_sizes=batch_sizes, on_progress=on_progress)
    names = {out["runner_name"] for out in outputs}
    if len(names) != 1:
        raise UsageError(f"the ranks built differently named runners: {sorted(names)}; a runner factory must name "
                         f"its runner the same on every rank")
    first = outputs[0]
    merged = MultiRankCaptureResult(runner_name=first["runner_name"], platform=first["platform"], rank=0,
                                    mode=first["mode"], world_size=world_size)
    for rank, out in enumerate(outputs):
        own = CaptureResult(runner_name=out["runner_name"], platform=out["platform"], rank=rank, mode=out["mode"])
        for item in out["keys"]:
            key = CaptureKey.from_dict(item["key"])
            summary = Summary.from_dict(item["summary"], source=f"rank {rank} summary of {key}") \
                if item["summary"] is not None else None
            own.keys[key] = KeyResult(key, trace_path=Path(item["trace_path"]) if item["trace_path"] else None,
                                      summary=summary, seconds=float(item["seconds"]))
        if out["single_trace_path"]:
            own.single_trace_path = Path(out["single_trace_path"])
            merged.single_trace_paths[rank] = own.single_trace_path
        merged.per_rank[rank] = own
    for rank in sorted(merged.per_rank):  # rank by rank, each in capture order
        own_keys = merged.per_rank[rank].keys
        for key in capture_order(own_keys):
            merged.keys[key] = own_keys[key]
    merged.single_trace_path = merged.single_trace_paths.get(0)
    merged.seconds = time.perf_counter() - started
    return merged


def tensor_parallel_decode_runner(ctx: RankContext) -> Any:
    """Default runner factory of multi-rank captures: rank ``ctx.rank``'s shard of the embedded decoder."""
    from .decode_model import TinyDecodeRunner

    return TinyDecodeRunner(ctx.batch_sizes, device=ctx.device, tp_size=ctx.world_size, tp_rank=ctx.rank)
