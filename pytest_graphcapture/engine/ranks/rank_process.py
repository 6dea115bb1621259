"""One rank process: it joins the process group, runs its target and reports to the parent.

The parent (:mod:`.supervisor`) starts each rank at :func:`rank_main`.  A rank
leads a process group of its own (a new session), so stopping it stops all it
started; it dies with its parent (``prctl(PR_SET_PDEATHSIG)`` on Linux, which
works while the rank holds the GIL in a long C call, and a thread that watches
the parent everywhere); it initializes the default process group over the
loopback port it was given and sends stages, progress lines and the result
through a queue.  Its stage is also written to a file, synchronously: a rank
that dies without a word (``os._exit``, a segfault) is reported at the last
stage it reached, not the last one its queue delivered before it died.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, Optional

from .target import RankContext, Target, resolve_target

#: Extra time the process group's own timeout gets over ours, so the parent reports a hang, not gloo.
PG_TIMEOUT_MARGIN = 30.0
#: Bytes of a rank's stage kept in its stage file (a longer stage text is cut).
STAGE_BYTES = 512
#: ``prctl`` option: the signal this process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1

_CHANNEL: Optional["_Channel"] = None


class _Channel:
    """A rank's line to the parent: stage changes, progress lines, the result.

    The queue delivers from a feeder thread, so what it holds is lost when the
    process dies abruptly; the stage is also written, at once, over the start of
    ``stage_file`` (:func:`last_stage` reads it once a rank died or hangs).
    """

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
            raw = text.encode("utf-8", "replace")[:STAGE_BYTES].decode("utf-8", "ignore").encode("utf-8")
            with contextlib.suppress(OSError):  # one fixed-size write over the last: never a truncated file
                os.lseek(self._stage_fd, 0, os.SEEK_SET)
                os.write(self._stage_fd, raw.ljust(STAGE_BYTES, b"\0"))
        self.queue.put(("stage", self.rank, text))

    def progress(self, line: str) -> None:
        self.queue.put(("progress", self.rank, line))


def _stage_file(dump_dir: str, rank: int) -> str:
    return os.path.join(dump_dir, f"rank{rank}.stage")


def last_stage(dump_dir: str, rank: int) -> Optional[str]:
    """The stage rank ``rank`` last wrote to its stage file, or None when it wrote none."""
    try:
        with open(_stage_file(dump_dir, rank), "rb") as handle:
            raw = handle.read(STAGE_BYTES).split(b"\0", 1)[0]
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
    """Ask the kernel to SIGKILL this process when its parent dies; False where it cannot.

    Only Linux has the call (``prctl(PR_SET_PDEATHSIG)``); elsewhere this is a
    no-op and :func:`_watch_parent`'s thread is the only guard.  The kernel's
    signal needs nothing from this process, so a rank stuck in a C call that
    holds the GIL dies too, which the watching thread cannot make happen.
    """
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


def rank_main(
    rank: int,
    world_size: int,
    port: int,
    device_type: str,
    backend: str,
    timeout: float,
    target: Target,
    args: tuple,
    queue: Any,
    parent_pid: int,
    dump_dir: str,
) -> None:
    """Entry point of one rank process (module level, so ``spawn`` can import it)."""
    global _CHANNEL
    _leave_parent_group()
    _die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to tell us
        os._exit(3)
    _watch_parent(parent_pid)
    dump = None
    if hasattr(signal, "SIGUSR1"):
        import faulthandler

        dump = open(os.path.join(dump_dir, f"rank{rank}.txt"), "w")
        faulthandler.register(signal.SIGUSR1, file=dump, all_threads=True)
    channel = _CHANNEL = _Channel(rank, queue, _stage_file(dump_dir, rank))
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
            timeout=timedelta(seconds=timeout + PG_TIMEOUT_MARGIN),
        )
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
