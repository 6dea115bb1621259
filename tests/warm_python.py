"""Pythons for the tests' own subprocesses, forked from one that has already imported torch.

Most of the suite's time goes into the Pythons its tests start — a doc's ``pytest`` command, the
examples, a gpu_check step — and each of them spends its first 1.5–2 s of CPU importing torch.
:func:`warm_bin` gives a folder of commands (``python``, ``python3``, ``pytest``, ``graphcapture``)
that run where the real ones would, but in a process forked from a *zygote*: one Python per xdist
worker that imported torch (and pytest) once, and nothing else of ours (the plugin is imported by
each run itself, under pytest's assertion rewriting, as in a fresh Python).

Each command is a small script run by the real interpreter without ``site`` (about 20 ms).  It
hands the zygote its arguments, environment, working directory and standard streams (the file
descriptors themselves), and waits.  The zygote forks a *supervisor*, which forks the run itself
in a session of its own; the supervisor passes signals the command receives on to the run, kills
the run's session when the command dies, and sends back the run's exit status, which the command
exits with (or dies of the same signal).  To a caller, the command behaves as the real one.

What a forked run shares with the zygote, and so differs from a fresh Python: torch was imported
under the zygote's environment (variables torch reads at import, such as ``TORCH_LOGS``, are not the
run's), Python's own start-up options (``-X``, ``-I``, hash seed) are the zygote's, torch's
import-time warnings were given before the run (those of a first torch.compile's imports too:
``torch.jit.script_method`` is deprecated), and numpy's BLAS has one thread.  Tests that
check any of that start real Pythons; a command given options this module does not know runs the
real interpreter.  Without a zygote (one could not start) every command runs the real interpreter.

The zygote forks only while it has a single thread: a fork of a process with threads can crash
(issue 39), and numpy's OpenBLAS, which torch imports, starts a thread pool unless told to use
one thread.  A zygote that has threads after its imports serves nothing, and every command runs
the real interpreter.  Ranks are never forked: the package spawns them, a fresh Python each.
"""

from __future__ import annotations

import atexit
import gc
import io
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

#: The modules the zygote imports once: torch; what a profiled capture imports next (torch's profiler
#: looks torch._inductor up when it starts recording, about 1 s of CPU of its own); what a first
#: torch.compile imports (inductor's compile_fx, about 1.2 s); and pytest itself, not its plugins:
#: pytest rewrites the asserts of a plugin's modules, so each run imports those (xdist, ours) itself.
PRELOAD = ("torch", "torch.profiler", "torch._inductor", "torch._inductor.compile_fx", "pytest")
_HEADER = struct.Struct("!I")


# --------------------------------------------------------------------------- the commands


_SHIM = """\
import os, socket, struct, sys, json, signal
SOCKET, REAL, MODE = {socket!r}, {real!r}, {mode!r}
args = sys.argv[1:]
target = None
unbuffered = MODE == "python" and args[:1] == ["-u"]  # as execnet starts an xdist worker: -u -c ...
if unbuffered:
    args = args[1:]
if MODE == "pytest":
    target = ["entry", "pytest:console_main", [sys.argv[0], *args]]
elif MODE == "graphcapture":
    target = ["entry", "pytest_graphcapture.tools.cli:main", [sys.argv[0], *args]]
elif args and args[0] == "-m" and len(args) > 1:
    target = ["module", args[1], [args[1], *args[2:]]]
elif args and args[0].startswith("-m") and len(args[0]) > 2:  # -mpytest, as pytester spells it
    target = ["module", args[0][2:], [args[0][2:], *args[1:]]]
elif args and args[0] == "-c" and len(args) > 1:
    target = ["code", args[1], ["-c", *args[2:]]]
elif args and not args[0].startswith("-"):
    target = ["path", args[0], args]
def real():
    if unbuffered:
        args.insert(0, "-u")
    if MODE in ("pytest", "graphcapture"):
        argv = [REAL, "-m", "pytest", *args] if MODE == "pytest" else [REAL, "-c",
                "import sys; from pytest_graphcapture.tools.cli import main; sys.exit(main())", *args]
    else:
        argv = [REAL, *args]
    os.execv(REAL, argv)
if target is None or not os.path.exists(SOCKET):
    real()
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    conn.connect(SOCKET)
except OSError:
    real()
body = json.dumps({{"target": target, "env": dict(os.environ), "cwd": os.getcwd(), "unbuffered": unbuffered}}).encode()
socket.send_fds(conn, [struct.pack("!I", len(body)) + body], [0, 1, 2])
def forward(signum, frame):
    try:
        conn.sendall(struct.pack("!I", signum))
    except OSError:
        pass
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
    signal.signal(s, forward)
data = b""
while len(data) < 8:
    try:
        more = conn.recv(8 - len(data))
    except InterruptedError:
        continue
    if not more:
        sys.stderr.write("warm python: the zygote went away\\n")
        os._exit(70)
    data += more
kind, value = struct.unpack("!II", data)
if kind == 1:
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, signal.SIG_DFL)
    os.kill(os.getpid(), value)
os._exit(value)
"""


def _write_shims(folder: Path, sock: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, mode in (
        ("python", "python"),
        ("python3", "python"),
        ("pytest", "pytest"),
        ("graphcapture", "graphcapture"),
    ):
        path = folder / name
        path.write_text(f"#!{sys.executable} -S\n" + _SHIM.format(socket=sock, real=sys.executable, mode=mode))
        path.chmod(0o755)


# --------------------------------------------------------------------------- the zygote


def _recv_request(conn: socket.socket) -> tuple[dict, list[int]]:
    msg, fds, _flags, _addr = socket.recv_fds(conn, 1 << 20, 3)
    (size,) = _HEADER.unpack(msg[: _HEADER.size])
    body = msg[_HEADER.size :]
    while len(body) < size:
        more = conn.recv(size - len(body))
        if not more:
            raise EOFError("the command went away")
        body += more
    return json.loads(body), list(fds)


def _run(request: dict) -> int:
    """In the run's own process: become the run the command asked for; return its exit code."""
    import runpy
    import threading
    import types
    import warnings

    kind, what, argv = request["target"]
    env = request["env"]
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(env)
    # sys.path[0] as Python sets it: the working directory for -m, '' for -c, the folder of a script
    # (a console script's is the interpreter's bin folder).
    first = {"module": os.getcwd(), "code": "", "entry": os.path.dirname(sys.executable)}.get(kind)
    first = os.path.dirname(os.path.abspath(what)) if first is None else first
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *_BASE_PATH]
    sys.argv[:] = argv
    sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    sys.warnoptions[:] = [w for w in env.get("PYTHONWARNINGS", "").split(",") if w]
    warnings._processoptions(sys.warnoptions)  # type: ignore[attr-defined]
    if request.get("unbuffered"):
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), write_through=True)
    if env.get(XDIST_WORKERS) == "1":
        _warm_xdist_workers()
    # A __main__ of the run's own, as Python makes one: a console script's holds its file (what a
    # spawned or fork-server child of the run imports as its main module), -c code's none.
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    if kind == "entry":
        main.__file__ = os.path.join(os.path.dirname(sys.executable), os.path.basename(argv[0]))
    sys.modules["__main__"] = main
    code = 0
    try:
        if kind == "module":
            runpy.run_module(what, run_name="__main__", alter_sys=True)
        elif kind == "path":
            runpy.run_path(what, run_name="__main__")
        elif kind == "code":
            exec(compile(what, "<string>", "exec"), main.__dict__)
        else:
            module, _, function = what.partition(":")
            code = getattr(__import__(module, fromlist=[function]), function)()
            code = code if isinstance(code, int) else (0 if code is None else 1)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        if not isinstance(stop.code, (int, type(None))):
            print(stop.code, file=sys.stderr)
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads end first, as at interpreter exit
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    return code


def _warm_xdist_workers(python: Optional[str] = None) -> Callable[[], None]:
    """pytest-xdist workers started from now on start warm: execnet starts them as ``python -u -c ...``.

    Returns the function that undoes it (a run forked warm never needs to).
    """
    import execnet.gateway_io as gateway_io

    plain = gateway_io.popen_args
    python = python or str(_BIN[0] / "python")

    def popen_args(spec: Any) -> list[str]:
        args = plain(spec)
        if not spec.python:
            args[0] = python
        return args

    gateway_io.popen_args = popen_args

    def undo() -> None:
        gateway_io.popen_args = plain

    return undo


def _supervise(conn: socket.socket) -> None:
    """The forked supervisor of one run: start it, pass signals on, report its status, never return."""
    try:
        request, fds = _recv_request(conn)
    except Exception:
        os._exit(1)
    pid = os.fork()
    if pid == 0:
        conn.close()
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGCHLD, signal.SIGPIPE):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python itself starts
        os._exit(_run(request))
    for fd in fds:
        os.close(fd)
    import selectors

    watch = selectors.DefaultSelector()
    watch.register(conn, selectors.EVENT_READ)
    status = None
    while status is None:
        events = watch.select(timeout=0.02)
        ended, code = os.waitpid(pid, os.WNOHANG)
        if ended:
            status = code
            break
        if events:
            data = conn.recv(4)
            if not data:  # the command died: so does everything the run started
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                os.waitpid(pid, 0)
                os._exit(0)
            (signum,) = _HEADER.unpack(data.ljust(4, b"\0"))
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
    if os.WIFSIGNALED(status):
        reply = struct.pack("!II", 1, os.WTERMSIG(status))
    else:
        reply = struct.pack("!II", 0, os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
    try:
        conn.sendall(reply)
    except OSError:
        pass
    os._exit(0)


_BASE_PATH: list[str] = []
_BIN: list[Path] = []
#: Set to 1 in a run's environment: the pytest-xdist workers of that run start warm as well.
XDIST_WORKERS = "WARM_PYTHON_XDIST_WORKERS"


def threads() -> int:
    """How many threads this process has (Linux ``/proc``)."""
    return len(os.listdir("/proc/self/task"))


def serve(sock: str, parent: int, here: str) -> None:
    """The zygote: import :data:`PRELOAD`, then fork a supervisor per connection until ``parent`` is gone.

    It serves only while it has one thread: what it forks must not be a fork of a process with threads.
    """
    import importlib
    import selectors

    for name in PRELOAD:
        importlib.import_module(name)
    if threads() != 1:
        sys.stderr.write(f"warm python: {threads()} threads after importing {PRELOAD}; not forking them\n")
        return
    # What is imported now is shared with every run, copy-on-write: the collector leaves it alone
    # (it would otherwise visit, and so copy, that memory in every run; and each full collection
    # a run makes, pytest makes two, would walk all of torch).
    gc.collect()
    gc.freeze()
    _BASE_PATH[:] = [p for p in sys.path if p not in ("", os.getcwd(), here)]
    _BIN[:] = [Path(sock).parent / "bin"]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ready = sock + ".tmp"
    listener.bind(ready)
    listener.listen(64)
    os.rename(ready, sock)  # the commands connect only once torch is imported
    watch = selectors.DefaultSelector()
    watch.register(listener, selectors.EVENT_READ)
    while os.getppid() == parent:
        while True:  # reap finished supervisors
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not watch.select(timeout=1.0):
            continue
        conn, _ = listener.accept()
        if threads() != 1:  # never a fork of a process with threads: the command runs the real interpreter
            conn.close()
            break
        if os.fork() == 0:
            listener.close()
            watch.close()
            _supervise(conn)
        conn.close()
    os.unlink(sock)


# --------------------------------------------------------------------------- the tests' side


_STATE: dict[str, Any] = {}
#: What the zygote does not take from the test that starts it, but OMP_WAIT_POLICY (tests/conftest.py).
_NOT_INHERITED = ("PYTEST_", "GRAPH_CAPTURE_", "TORCH", "PYTORCH_", "CUDA_", "OMP_", "MKL_")


def zygote_environment() -> dict[str, str]:
    """The zygote's environment: none of a test's settings (pytest's, ours, torch's, the path), one BLAS thread."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_NOT_INHERITED) and k != "PYTHONPATH"}
    if "OMP_WAIT_POLICY" in os.environ:
        env["OMP_WAIT_POLICY"] = os.environ["OMP_WAIT_POLICY"]
    env["OPENBLAS_NUM_THREADS"] = "1"  # numpy's OpenBLAS, imported by torch, starts no thread pool
    return env


def _start() -> Optional[Path]:
    if sys.platform != "linux":  # fork, and file descriptors passed over a Unix socket
        return None
    root = Path(tempfile.mkdtemp(prefix="warm-python-"))
    sock = str(root / "z.sock")
    # torch is imported under none of a test's settings: nothing of pytest's, ours, torch's or the path.
    env = zygote_environment()
    here = str(Path(__file__).resolve().parent)
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {here!r}); import warm_python; "
            f"warm_python.serve({sock!r}, {os.getpid()}, {here!r})",
        ],
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=open(root / "zygote.log", "wb"),
        start_new_session=True,
    )
    atexit.register(_stop, process, root)
    _STATE["zygote"] = process
    deadline = time.monotonic() + 120
    while not os.path.exists(sock):
        if process.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(0.05)
    _write_shims(root / "bin", sock)
    return root / "bin"


def _stop(process: subprocess.Popen, root: Path) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
    shutil.rmtree(root, ignore_errors=True)


def warm_bin() -> Optional[Path]:
    """This worker's folder of warm commands (started on first use); None when no zygote could start."""
    if "bin" not in _STATE:
        _STATE["bin"] = _start()
    return _STATE["bin"]


def zygote_threads() -> Optional[int]:
    """How many threads this worker's zygote has now (started on first use); None when none is serving."""
    if warm_bin() is None:
        return None
    try:
        return len(os.listdir(f"/proc/{_STATE['zygote'].pid}/task"))
    except FileNotFoundError:  # it has ended since
        return None


def warm_python() -> str:
    """The warm ``python`` command, or the real interpreter when no zygote could start."""
    folder = warm_bin()
    return str(folder / "python") if folder is not None else sys.executable


def warm_path(env: Optional[dict] = None) -> str:
    """``PATH`` of ``env`` (default this process's) with the warm commands first."""
    env = os.environ if env is None else env
    folder = warm_bin()
    path = env.get("PATH", "")
    return os.pathsep.join([str(folder), path]) if folder is not None else path


@contextmanager
def warm_xdist_workers() -> Iterator[None]:
    """In this process (an in-process pytester run): the pytest-xdist workers it starts start warm."""
    folder = warm_bin()
    if folder is None:
        yield
        return
    undo = _warm_xdist_workers(str(folder / "python"))
    try:
        yield
    finally:
        undo()
