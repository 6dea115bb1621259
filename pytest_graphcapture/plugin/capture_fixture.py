"""The ``graph_capture`` fixture: capture a runner (in-process, isolated or on ranks) or an engine's own loop.

It resolves nothing itself: settings come from the session (:mod:`.session`) and the
capturing is the engine's (:mod:`pytest_graphcapture.engine`).  What it decides is
where a capture runs — in the test process, in a fresh subprocess
(``graph_capture_isolated`` / ``--graph-capture-isolate=on``) or on spawned ranks
(``graph_capture_ranks``) — and it refuses, in one line naming the setting, a capture
that cannot run where the settings ask.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from ..errors import UsageError
from ..naming import trace_group_for
from . import runner_fixture
from .capture_markers import ISOLATED, RANKS, capture_arguments
from .stash import CAPTURE

#: A capture taking longer than this many seconds reports its total on one line even without ``-v``.
LONG_CAPTURE_S = 10.0


class GraphCapture:
    """What the ``graph_capture`` fixture returns: call it with a runner to capture it."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._state = request.config.stash[CAPTURE]
        self.backend: Any = None
        self._captures = 0

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
            ranks, timeout, isolated = capture_arguments(
                ranks, timeout, node.get_closest_marker(RANKS), node.get_closest_marker(ISOLATED)
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
        warmups: int = 2,
    ) -> Any:
        """Gate the engine's own capture loop: run ``fn`` for real and return the usual CaptureResult.

        ``fn(profiler)`` steps the plugin's per-batch-size profiler where the engine steps
        its own; ``fn()`` (no parameter) has it stepped on the observed forwards and graph
        captures.  ``forward=(obj, "method")`` is the body each graph holds and
        ``key(*args, **kwargs)`` its key (a CaptureKey, a batch size or ``(batch size,
        variant)`` of ``runner_name``).  ``warmups`` is how many forwards the loop runs per key
        before its capture (2; 1 for vLLM's loop or a ``torch.compile(mode="reduce-overhead")``
        model).  See :mod:`pytest_graphcapture.engine.loop`.

        The loop runs in the test process, on one rank: under ``graph_capture_isolated``,
        ``--graph-capture-isolate=on`` or ``graph_capture_ranks`` the call fails saying so
        rather than capture somewhere other than the settings ask.
        """
        from ..engine.loop import capture_engine_loop

        self._refuse_elsewhere()
        owner = forward[0] if isinstance(forward, tuple) and forward else None
        try:
            device = getattr(owner, "device", None) or self._state.device
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        capture_settings = self._state.capture_settings(
            trace=trace, summarize=summarize, progress=self._progress(), trace_group=self._trace_group()
        )
        return capture_engine_loop(
            fn,
            forward=forward,
            key=key,
            runner_name=runner_name,
            device=device,
            settings=capture_settings,
            warmups=warmups,
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

    def _refuse_elsewhere(self) -> None:
        """Fail with one line when the test asks ``graph_capture.engine`` to capture isolated or on ranks.

        The engine's loop, its engine object and its key function are live objects of the
        test process: they cannot be sent to a fresh subprocess or to spawned ranks, so
        the settings that ask for one cannot apply, and capturing in-process on one rank
        instead would pass a test that was meant to run elsewhere.
        """
        node = self._request.node
        ranks = node.get_closest_marker(RANKS)
        if ranks is not None:
            where, what = f"@pytest.mark.{RANKS}", "on spawned ranks"
        elif node.get_closest_marker(ISOLATED) is not None:
            where, what = f"@pytest.mark.{ISOLATED}", "in a fresh subprocess"
        elif self._state.isolate:
            where, what = f"{self._state.isolate_origin}=on", "in a fresh subprocess"
        else:
            return
        pytest.fail(
            f"{where}: graph_capture.engine cannot capture {what}: it runs the engine's loop in the test process "
            f"(the function, the engine and the key function cannot be sent to another process); capture this test "
            f"without that setting, or wrap the engine in a GraphRunner built by a module-level factory "
            f"(docs/adapting.md)",
            pytrace=False,
        )

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
        if func is not None and getattr(func, "__module__", None) != runner_fixture.__name__:
            code = getattr(func, "__code__", None)
            where = f" ({shown(code.co_filename)}:{code.co_firstlineno})" if code is not None else ""
            return f"this project's decode_runner fixture{where}"
        impls = request.config.hook.pytest_graphcapture_make_runner.get_hookimpls()
        if impls:
            filename = getattr(impls[-1].plugin, "__file__", None)
            return f"this project's pytest_graphcapture_make_runner hook ({shown(filename or impls[-1].plugin_name)})"
        return None

    def _trace_group(self) -> str:
        """This capture's trace folder: the test's own, as unique as its golden folder (see ``trace_group_for``)."""
        self._captures += 1
        return trace_group_for(self._request.node.nodeid, self._captures)

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


@pytest.fixture
def graph_capture(request: pytest.FixtureRequest) -> GraphCapture:
    """Capture a runner's graphs per batch size: ``result = graph_capture(runner)``.

    Returns a :class:`~pytest_graphcapture.result.CaptureResult` holding, per
    capture key, its summary and — with ``--graph-capture-trace`` — its trace path.
    """
    return GraphCapture(request)
