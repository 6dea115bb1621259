"""How rank processes are started: forked from a server that has imported torch already.

A spawned rank is a fresh interpreter that imports torch (1.5 s of CPU and more)
and the capture engine before it does anything, and a run starts one per rank.
On Linux the ranks are forked instead from :mod:`multiprocessing`'s fork server,
started once per process with torch, ``torch.distributed`` and the capture engine
imported (``set_forkserver_preload``).  Importing torch does not initialize CUDA,
so a forked rank can still use CUDA; every rank is still its own process.

A forked rank is told what a spawned one knows: the parent's working directory,
``sys.path``, ``sys.argv`` and environment at the time of the run.  The server is
started again when the environment differs from the one it started with (only
pytest's ``PYTEST_CURRENT_TEST`` may change), so a variable that torch reads when
it is imported, ``OMP_NUM_THREADS`` say, takes effect as it would in a spawned rank.

The parent-death guarantee holds through the server: the kernel kills the server
when the parent dies (:mod:`.server_guard`), and a rank when the server dies
(``PR_SET_PDEATHSIG`` fires on the death of the process that forked it); the rank's
watching thread also checks that the server's parent is still the supervisor.  A
rank closes its copy of the pipe by which the server knows its parent is alive, so
that no process a rank starts can keep the server running.

Ranks are spawned instead elsewhere (macOS, Windows), where this Python's
``multiprocessing`` lacks what this relies on, and when the fork server runs with
preloads someone else chose (it is one per process; this module leaves it alone).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import threading
from multiprocessing import forkserver
from typing import Any, Iterator, Optional

#: What the fork server imports before it forks a rank: its guard, torch and the engine.  Not the main
#: module: each rank imports it, as a spawned rank does, so a script that asks ``torch.cuda.is_available()``
#: at its top (which makes torch refuse CUDA in every process forked after it) asks it in the rank.
PRELOAD = [
    "pytest_graphcapture.engine.ranks.server_guard",
    "torch",
    "torch.distributed",
    "pytest_graphcapture.engine.ranks.capture",
]
#: Variables that change while a process runs and that nothing reads at start-up (pytest sets it per test).
VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})
#: The attributes of the standard library's fork server this relies on (all there from Python 3.8 to 3.14).
_SERVER_ATTRIBUTES = ("_forkserver_pid", "_forkserver_alive_fd", "_preload_modules", "_stop", "ensure_running")

_lock = threading.Lock()
_active = 0  # runs using the fork server now: it is not restarted under them
_started_with: Optional[frozenset] = None  # the environment the server this module started runs with
_server_pid: Optional[int] = None


def _server() -> Any:
    server = getattr(forkserver, "_forkserver", None)
    if server is None or not all(hasattr(server, name) for name in _SERVER_ATTRIBUTES):
        return None
    return server


def _environment() -> frozenset:
    return frozenset((name, value) for name, value in os.environ.items() if name not in VOLATILE)


def _forked_context() -> Optional[Any]:
    """The fork server's context, with a server of ours running in this environment; None: spawn instead."""
    global _started_with, _server_pid
    server = _server() if sys.platform.startswith("linux") else None
    if server is None:
        return None
    environment = _environment()
    running = server._forkserver_pid
    if running is not None and running != _server_pid:
        return None  # started by someone else, with their preloads: not ours to change
    if running is not None and _started_with != environment:
        if _active:
            return None  # another run's ranks came from it
        server._stop()
    multiprocessing.set_forkserver_preload(PRELOAD)
    server.ensure_running()  # a server that died is started again here too
    if server._forkserver_pid != running:
        _started_with, _server_pid = environment, server._forkserver_pid
    return multiprocessing.get_context("forkserver")


@contextlib.contextmanager
def rank_start() -> Iterator[Any]:
    """The :mod:`multiprocessing` context a run starts its ranks with, held for the run."""
    global _active
    with _lock:
        context = _forked_context()
        if context is not None:
            _active += 1
    try:
        yield context or multiprocessing.get_context("spawn")
    finally:
        if context is not None:
            with _lock:
                _active -= 1


def abandon_fork_server() -> None:
    """Kill the fork server this module started (it hangs, say, importing torch); the next run starts another."""
    global _server_pid
    server = _server()
    with _lock:
        if server is None or _server_pid is None or server._forkserver_pid != _server_pid:
            return
        with contextlib.suppress(OSError):
            os.kill(_server_pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            server._stop()
        _server_pid = None


# --------------------------------------------------------------------------- the rank's side


def leave_fork_server() -> None:
    """Close this rank's copy of the fork server's alive pipe (a forked rank has one; a spawned one does not).

    The server exits when every holder of that pipe has closed it: without this, a
    rank would keep its server, and so itself, alive after the parent died.
    """
    server = _server()
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None


def parent_of(pid: int) -> Optional[int]:
    """The parent pid of process ``pid`` (Linux ``/proc``), or None when it is gone or unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def supervised_by(supervisor: int) -> bool:
    """Whether this process's parent is ``supervisor`` or a fork server ``supervisor`` runs."""
    parent = os.getppid()
    return parent == supervisor or parent_of(parent) == supervisor
