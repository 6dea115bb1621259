"""Why a multi-rank run failed, in words: which rank, where it was, and who only lost its peer.

On a timeout each unfinished rank is named with its last stage and, on POSIX,
the innermost frame of its main thread (a ``faulthandler`` dump); a rank waiting
inside ``torch.distributed`` is told apart from the one that hangs, and a rank
whose error is a lost connection is listed after the rank that caused it.
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from ...errors import GraphCaptureError

#: Interpreter start and ``import torch`` in every rank may take at least this long (slow CI disks).
STARTUP_ALLOWANCE = 60.0


class RankError(GraphCaptureError):
    """A multi-rank run failed: a rank raised, died or did not finish in time.

    ``ranks`` maps each failed or unfinished rank to a one-line description,
    ``primary`` is the rank whose failure is reported first (the first to fail,
    or the hung one), ``pids`` the child processes (all gone when this is raised).
    """

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
class RankState:
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


def dump_stacks(procs: dict[int, Any], states: dict[int, RankState], dump_dir: str) -> dict[int, str]:
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


_PEER_LOST = re.compile(
    r"connection (closed|reset)|broken pipe|econnreset|connection refused|socket closed|"
    r"remote (process|peer)|peer .*(closed|disconnect)",
    re.IGNORECASE,
)


def _lost_peer(error: str) -> bool:
    """Whether a rank's error says another rank went away (a consequence, not the cause)."""
    return bool(_PEER_LOST.search(error))


def _tail(text: str, lines: int = 12) -> str:
    kept = text.rstrip().splitlines()
    return "\n".join(kept[-lines:])


def failure(
    states: dict[int, RankState], timeout: float, timed_out: bool, startup: bool, dumps: dict[int, str], pids: list[int]
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
