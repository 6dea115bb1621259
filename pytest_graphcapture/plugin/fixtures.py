"""The fixtures users request: ``decode_runner``, ``graph_capture`` and ``golden``.

They resolve nothing themselves: settings come from the session objects
(:mod:`.session`), capturing is the engine's and comparing is the golden gate's
(:func:`pytest_graphcapture.golden.gate.check_result`).  ``golden.check`` only
records the gate's outcome in the session report and turns a failed outcome into
a pytest failure.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import pytest

from ..errors import UsageError
from . import settings
from .golden_checker import GoldenChecker
from .golden_session import GoldenSession
from .session import CaptureSession

#: A capture taking longer than this many seconds reports its total on one line even without ``-v``.
LONG_CAPTURE_S = 10.0

CAPTURE = pytest.StashKey[CaptureSession]()
GOLDEN = pytest.StashKey[GoldenSession]()


@pytest.fixture
def decode_runner(request: pytest.FixtureRequest) -> Any:
    """The runner ``graph_capture`` captures by default: the embedded tiny decoder.

    Override this fixture in your ``conftest.py`` to capture your own runner, or
    implement the ``pytest_graphcapture_make_runner`` hook.
    """
    state = request.config.stash[CAPTURE]
    try:
        device = state.device
    except UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    runner = request.config.hook.pytest_graphcapture_make_runner(
        config=request.config, device=device, batch_sizes=state.batch_sizes
    )
    if runner is None:
        from ..engine.decode_model import TinyDecodeRunner

        runner = TinyDecodeRunner(state.batch_sizes, device=device)
    return runner


class GraphCapture:
    """What the ``graph_capture`` fixture returns: call it with a runner to capture it."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._state = request.config.stash[CAPTURE]
        self.backend: Any = None

    def __call__(
        self,
        runner: Any = None,
        *,
        backend: Any = None,
        trace: Optional[str] = None,
        summarize: bool = True,
        ranks: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """Capture every key of ``runner`` (default: the ``decode_runner`` fixture).

        ``trace`` overrides the session's ``--graph-capture-trace`` mode for this
        call; ``summarize=False`` skips the summaries (no golden checks then).

        ``ranks=n`` (or the test's ``graph_capture_ranks(n)`` marker) captures on
        ``n`` spawned ranks instead: ``runner`` is then a runner *factory* — a
        module-level function taking a :class:`~pytest_graphcapture.engine.ranks.supervisor.RankContext`,
        or a ``"module:function"`` string (default: the tensor-parallel embedded
        decoder) — and the result holds every rank's keys.  ``timeout`` overrides
        ``--graph-capture-rank-timeout``.

        The ``graph_capture_isolated`` marker (or ``--graph-capture-isolate=on``) captures
        in one fresh subprocess the same way (a factory, default: the embedded decoder),
        so no profiler session that ran earlier in this process can leave its kernel
        collection dead.  Where the project supplies the default runner (a ``decode_runner``
        fixture or the ``pytest_graphcapture_make_runner`` hook), which cannot run in the
        subprocess, an isolated call without a factory fails saying so.
        """
        from ..engine.backend import make_backend
        from ..engine.capture import capture_runner

        node = self._request.node
        try:
            ranks, timeout, isolated = _capture_arguments(
                ranks, timeout, node.get_closest_marker("graph_capture_ranks"), node.get_closest_marker(ISOLATED)
            )
            problem = None
        except UsageError as exc:
            problem = str(exc)
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        if ranks is None and (isolated or self._state.isolate):
            if runner is None:
                self._refuse_project_runner(isolated)
            return self._capture_on_ranks(
                runner, 1, trace=trace, summarize=summarize, timeout=timeout, what="isolated graph_capture()"
            )
        if ranks is not None:
            return self._capture_on_ranks(
                runner, ranks, trace=trace, summarize=summarize, timeout=timeout, what=f"graph_capture(ranks={ranks})"
            )
        if runner is None:
            runner = self._request.getfixturevalue("decode_runner")
        try:
            device = getattr(runner, "device", None) or self._state.device
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.backend = backend if backend is not None else make_backend(device)
        capture_settings = self._state.capture_settings(
            trace=trace, summarize=summarize, progress=self._progress(), trace_group=self._trace_group()
        )
        started = time.perf_counter()
        result = capture_runner(runner, self.backend, capture_settings)
        seconds = time.perf_counter() - started
        if capture_settings.progress is None and seconds >= LONG_CAPTURE_S:
            self._write(f"graph-capture: {result.runner_name}: {len(result.keys)} keys captured in {seconds:.1f}s")
        return result

    def engine(
        self,
        fn: Callable[..., Any],
        *,
        forward: tuple[Any, str],
        key: Callable[..., Any],
        runner_name: Optional[str] = None,
        trace: Optional[str] = None,
        summarize: bool = True,
    ) -> Any:
        """Gate the engine's own capture loop: run ``fn`` for real and return the usual CaptureResult.

        ``fn(profiler)`` steps the plugin's per-batch-size profiler where the engine steps
        its own; ``fn()`` (no parameter) has it stepped on the observed forwards and graph
        captures.  ``forward=(obj, "method")`` is the body each graph holds and
        ``key(*args, **kwargs)`` its key (a CaptureKey, a batch size or ``(batch size,
        variant)`` of ``runner_name``).  See :mod:`pytest_graphcapture.engine.engine_loop`.
        """
        from ..engine.engine_loop import capture_engine_loop

        owner = forward[0] if isinstance(forward, tuple) and forward else None
        try:
            device = getattr(owner, "device", None) or self._state.device
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        capture_settings = self._state.capture_settings(
            trace=trace, summarize=summarize, progress=self._progress(), trace_group=self._trace_group()
        )
        return capture_engine_loop(
            fn, forward=forward, key=key, runner_name=runner_name, device=device, settings=capture_settings
        )

    def _capture_on_ranks(
        self, factory: Any, ranks: Any, *, trace: Optional[str], summarize: bool, timeout: Optional[float], what: str
    ) -> Any:
        from ..engine.ranks.capture import DEFAULT_FACTORY, capture_on_ranks
        from ..engine.ranks.supervisor import RankError

        try:
            device = self._state.device
            if factory is not None and callable(getattr(factory, "capture_keys", None)):
                raise UsageError(
                    f"{what} got a runner object ({type(factory).__name__}); "
                    f"each process builds its own runner: pass a module-level factory function "
                    f"(RankContext -> runner) or a 'module:function' string"
                )
            capture_settings = self._state.capture_settings(
                trace=trace, summarize=summarize, progress=self._progress(), trace_group=self._trace_group()
            )
            result = capture_on_ranks(
                factory or DEFAULT_FACTORY,
                ranks,
                capture_settings,
                device_type=device.type,
                timeout=timeout if timeout is not None else self._state.rank_timeout,
                batch_sizes=self._state.batch_sizes,
            )
            problem = None
        except RankError as exc:
            problem = f"{'isolated' if what.startswith('isolated') else 'multi-rank'} graph capture failed: {exc}"
        except UsageError as exc:
            problem = str(exc)
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        self._state.rank_traces.extend(result.trace_paths)
        self._state.rank_traces.extend(result.single_trace_paths.values())
        return result

    def _refuse_project_runner(self, marked: bool) -> None:
        """Fail with one line when an isolated ``graph_capture()`` would not capture what it captures in-process.

        In-process, ``graph_capture()`` captures the ``decode_runner`` fixture, which a
        project overrides or builds through the ``pytest_graphcapture_make_runner`` hook.
        An isolated capture builds its runner in a fresh subprocess, where neither a fixture
        nor a hook can run: capturing the embedded decoder there instead would check goldens
        of keys the project never asked for.
        """
        own = self._project_runner()
        if own is None:
            return
        why = "@pytest.mark.graph_capture_isolated" if marked else f"{self._state.isolate_origin}=on"
        pytest.fail(
            f"{why}: graph_capture() would capture the runner of {own}, but an isolated capture builds its "
            f"runner in a fresh subprocess, where fixtures and hooks do not run; pass a module-level factory "
            f"(graph_capture(make_runner), make_runner(ctx) returning the runner) or capture this test without "
            f"isolation",
            pytrace=False,
        )

    def _project_runner(self) -> Optional[str]:
        """Where the project's own default runner comes from (its fixture or hook), or None for the embedded one."""
        request = self._request

        def shown(filename: str) -> str:
            with contextlib.suppress(ValueError):
                return Path(filename).relative_to(request.config.rootpath).as_posix()
            return filename

        defs = request._fixturemanager.getfixturedefs("decode_runner", request.node) or ()
        func = getattr(defs[-1], "func", None) if defs else None
        if func is not None and getattr(func, "__module__", None) != __name__:
            code = getattr(func, "__code__", None)
            where = f" ({shown(code.co_filename)}:{code.co_firstlineno})" if code is not None else ""
            return f"this project's decode_runner fixture{where}"
        impls = request.config.hook.pytest_graphcapture_make_runner.get_hookimpls()
        if impls:
            filename = getattr(impls[-1].plugin, "__file__", None)
            return f"this project's pytest_graphcapture_make_runner hook ({shown(filename or impls[-1].plugin_name)})"
        return None

    def _trace_group(self) -> Optional[str]:
        """A parametrized test's parameter id: its traces go to their own sub-folder, apart from its siblings'."""
        callspec = getattr(self._request.node, "callspec", None)
        return getattr(callspec, "id", None) or None

    def _write(self, line: str) -> None:
        """Write a line to the terminal now, past pytest's output capturing (so it shows without ``-s``)."""
        config = self._request.config
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        suspended = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
        with suspended:
            reporter.ensure_newline()
            reporter.write_line(line)

    def _progress(self) -> Optional[Callable[[str], None]]:
        """With ``-v``: one live line per captured key (without it, long captures report their total)."""
        if self._request.config.get_verbosity() < 1:
            return None
        return self._write


ISOLATED = "graph_capture_isolated"


def _marker_arguments(marker: Any, positional: Sequence[str]) -> dict[str, Any]:
    """A marker's arguments by name (``positional`` names its positional ones); UsageError naming what is not its own."""
    where = f"@pytest.mark.{marker.name}"
    if len(marker.args) > len(positional):
        takes = f"takes {', '.join(positional)} and timeout=" if positional else "takes only timeout="
        given = f"{len(marker.args)} positional argument{'s' if len(marker.args) > 1 else ''}"
        raise UsageError(f"{where}: {given} given; it {takes}")
    values = dict(zip(positional, marker.args))
    for name, value in marker.kwargs.items():
        if name not in (*positional, "timeout"):
            known = ", ".join(f"{p}=" for p in (*positional, "timeout"))
            raise UsageError(f"{where}: unknown argument {name}={value!r}; it takes {known}")
        if name in values:
            raise UsageError(f"{where}: {name} given twice")
        values[name] = value
    if values.get("timeout") is not None:
        values["timeout"] = settings.parse_seconds(values["timeout"], f"{where}(timeout=...)")
    return values


def _rank_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: the number of ranks must be a positive integer, got {value!r}")
    return value


def _capture_arguments(
    ranks: Any, timeout: Any, ranks_marker: Any, isolated_marker: Any
) -> tuple[Optional[int], Optional[float], bool]:
    """``(ranks, timeout, isolated)`` of a ``graph_capture()`` call: its arguments, else the test's markers.

    Every argument is checked like an option (UsageError naming the argument or
    the marker), markers whether or not they decide anything here.
    """
    if ranks is not None:
        ranks = _rank_count(ranks, "graph_capture(ranks=...)")
    if timeout is not None:
        timeout = settings.parse_seconds(timeout, "graph_capture(timeout=...)")
    isolated = _marker_arguments(isolated_marker, ()) if isolated_marker is not None else None
    if ranks_marker is not None:
        values = _marker_arguments(ranks_marker, ("n",))
        if values.get("n") is None:
            raise UsageError(
                "@pytest.mark.graph_capture_ranks needs the number of ranks, e.g. @pytest.mark.graph_capture_ranks(2)"
            )
        count = _rank_count(values["n"], "@pytest.mark.graph_capture_ranks")
        if ranks is None:
            ranks = count
            timeout = timeout if timeout is not None else values.get("timeout")
    if ranks is None and isolated is not None and timeout is None:
        timeout = isolated.get("timeout")
    return ranks, timeout, isolated is not None


@pytest.fixture
def graph_capture(request: pytest.FixtureRequest) -> GraphCapture:
    """Capture a runner's graphs per batch size: ``result = graph_capture(runner)``.

    Returns a :class:`~pytest_graphcapture.engine.result.CaptureResult` holding, per
    capture key, its summary and — with ``--graph-capture-trace`` — its trace path.
    """
    return GraphCapture(request)


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Compare a graph capture result with its golden files: ``golden.check(result)``."""
    return GoldenChecker(request.config.stash[GOLDEN], request.node.nodeid)
