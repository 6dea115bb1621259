"""The fixtures users request: ``graph_capture``, ``golden``, ``decode_runner`` and the contract ones."""

from __future__ import annotations

import contextlib
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import pytest

from ..errors import GraphCaptureError, UsageError
from ..golden.change import SECTIONS
from ..golden.gate import CheckOptions, check_result
from ..golden.store import golden_folder
from ..naming import trace_group_for
from .session import SESSION, Session
from .settings import ISOLATE, ISOLATED, RANKS, capture_arguments

#: A capture taking longer than this many seconds reports its total on one line even without ``-v``.
LONG_CAPTURE_S = 10.0


class GraphCapture:
    """What the ``graph_capture`` fixture returns: call it with a runner to capture it."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._session = request.config.stash[SESSION]
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

        ``trace`` overrides the session's ``--graph-capture-trace`` mode for this call; ``summarize=False`` skips the
        summaries (no golden checks then).

        ``ranks=n`` (or the test's ``graph_capture_ranks(n)`` marker) captures on ``n`` spawned ranks instead:
        ``runner`` is then a runner *factory* — a module-level function taking a
        :class:`~pytest_graphcapture.engine.ranks.supervisor.RankContext`, or a ``"module:function"`` string (default:
        the tensor-parallel embedded decoder) — and the result holds every rank's keys.  ``timeout`` overrides
        ``--graph-capture-rank-timeout``.

        The ``graph_capture_isolated`` marker (or ``--graph-capture-isolate=on``) captures in one fresh subprocess the
        same way (a factory, default: the embedded decoder), so no profiler session that ran earlier in this process can
        leave its kernel collection dead.  Where the project supplies the default runner (a ``decode_runner`` fixture or
        the ``pytest_graphcapture_make_runner`` hook), which cannot run in the subprocess, an isolated call without a
        factory fails saying so.
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
        if ranks is None and (isolated or self._session.options.isolate):
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
            device = getattr(runner, "device", None) or self._session.device
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.backend = backend if backend is not None else make_backend(device)
        capture_settings = self._settings(trace, summarize)
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
        passes: Optional[tuple[Any, str]] = None,
    ) -> Any:
        """Gate the engine's own capture loop: run ``fn`` for real and return the usual CaptureResult.

        ``fn(profiler)`` steps the plugin's per-batch-size profiler where the engine steps its own; ``fn()`` has it
        stepped on the observed forwards and captures.  ``forward=(obj, "method")`` is the body each graph holds and
        ``key(*args, **kwargs)`` its key (a CaptureKey, a batch size or ``(batch size, variant)`` of ``runner_name``;
        None: a forward of no key); ``warmups`` forwards run per key before its capture (1 for vLLM's loop or
        ``torch.compile(mode="reduce-overhead")``); each call of ``passes=(obj, "method")`` begins a capture pass, and
        only the last pass's keys are gated (vLLM 0.34 captures once to estimate memory).  The loop runs in the test
        process on one rank: under an isolation or ranks setting the call fails saying so (docs/adapting.md).
        """
        from ..engine.loop import capture_engine_loop

        self._refuse_elsewhere()
        owner = forward[0] if isinstance(forward, tuple) and forward else None
        try:
            device = getattr(owner, "device", None) or self._session.device
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        capture_settings = self._settings(trace, summarize)
        return capture_engine_loop(
            fn,
            forward=forward,
            key=key,
            runner_name=runner_name,
            device=device,
            settings=capture_settings,
            warmups=warmups,
            passes=passes,
        )

    def _capture_on_ranks(
        self, factory: Any, ranks: Any, *, trace: Optional[str], summarize: bool, timeout: Optional[float], what: str
    ) -> Any:
        from ..engine.ranks.capture import DEFAULT_FACTORY, capture_on_ranks
        from ..engine.ranks.supervisor import RankError

        try:
            device = self._session.device
            if factory is not None and callable(getattr(factory, "capture_keys", None)):
                raise UsageError(
                    f"{what} got a runner object ({type(factory).__name__}); "
                    f"each process builds its own runner: pass a module-level factory function "
                    f"(RankContext -> runner) or a 'module:function' string"
                )
            capture_settings = self._settings(trace, summarize)
            result = capture_on_ranks(
                factory or DEFAULT_FACTORY,
                ranks,
                capture_settings,
                device_type=device.type,
                timeout=timeout if timeout is not None else self._session.options.rank_timeout,
                batch_sizes=self._session.options.batch_sizes,
            )
            problem = None
        except RankError as exc:
            problem = f"{'isolated' if what.startswith('isolated') else 'multi-rank'} graph capture failed: {exc}"
        except UsageError as exc:
            problem = str(exc)
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        return result

    def _refuse_elsewhere(self) -> None:
        """Fail in one line when ``graph_capture.engine`` is asked to capture isolated or on ranks.

        Its loop, engine and key function are live objects of the test process; capturing in-process instead would
        pass a test meant to run elsewhere.
        """
        node = self._request.node
        ranks = node.get_closest_marker(RANKS)
        if ranks is not None:
            where, what = f"@pytest.mark.{RANKS}", "on spawned ranks"
        elif node.get_closest_marker(ISOLATED) is not None:
            where, what = f"@pytest.mark.{ISOLATED}", "in a fresh subprocess"
        elif self._session.options.isolate:
            where, what = f"{self._session.options.where(ISOLATE)}=on", "in a fresh subprocess"
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
        """Fail in one line when an isolated ``graph_capture()`` would lose the project's own default runner.

        Its fixture or hook cannot run in the fresh subprocess; the embedded decoder there would check other keys.
        """
        own = self._project_runner()
        if own is None:
            return
        why = "@pytest.mark.graph_capture_isolated" if marked else f"{self._session.options.where(ISOLATE)}=on"
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

    def _settings(self, trace: Optional[str], summarize: bool) -> Any:
        """The engine's settings for this capture, into its own trace folder (as unique as its golden folder)."""
        self._captures += 1
        group = trace_group_for(self._request.node.nodeid, self._captures)
        return self._session.capture_settings(
            trace=trace, summarize=summarize, progress=self._progress(), trace_group=group
        )

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


class GoldenChecker:
    """What the ``golden`` fixture returns; :meth:`check` compares a capture result with its goldens."""

    def __init__(self, session: Session, nodeid: str) -> None:
        self._session = session
        self._nodeid = nodeid
        #: (golden folder, runner) of every check so far in this test: each check owns its goldens.
        self._checked: set[tuple[Path, str]] = set()

    def check(
        self,
        result: Any,
        *,
        level: Optional[str] = None,
        ignore_kernels: Sequence[str] = (),
        share_ranks: bool = False,
        ignore_ops: Sequence[str] = (),
        sections: Optional[Sequence[str]] = None,
        max_launches: Union[int, Mapping[int, int], None] = None,
        name: Optional[str] = None,
        max_graph_memory: Union[int, Mapping[int, int], None] = None,
        memory_tolerance: float = 0.1,
        expect: Optional[Sequence[Any]] = None,
    ) -> None:
        """Compare every key of ``result`` (a CaptureResult) with its golden; fail once listing all mismatches.

        ``level`` defaults to ``--golden-level``; ``ignore_kernels`` / ``ignore_ops`` are regexes (``re.search``) of
        names left out on both sides; ``sections`` is a subset of ``("kernels", "ops", "launches")`` (default: all
        three).

        Multi-rank results (``world_size > 1``) use per-rank goldens ``…_bs_<bs>_rank<r>.json`` (rank 0 included).
        ``share_ranks=True`` uses one golden without rank suffix for all ranks when their summaries are identical
        (tensor-parallel ranks usually are) and fails naming the ranks that differ. ``max_launches`` is a launch budget
        — one int for every key or ``{batch_size: int}`` — checked like a golden's ``launch_budget`` field: a capture
        recording more launches fails with the numbers.

        ``name`` gives a check its own goldens, in the sub-folder ``<name>/`` of the test's folder: a test that checks
        the same runner twice (say a second time at ``level="family"``) names the second check; checking the same runner
        twice under one name is a usage error. ``max_graph_memory`` (bytes, an int or ``{batch_size: int}``, like a
        golden's ``graph_memory_budget`` field) bounds the reserved memory a capture adds, up to ``memory_tolerance`` (a
        fraction) over it; only checked where memory is measured (GPU). ``expect`` lists kernel expectations
        (:class:`~pytest_graphcapture.golden.expect.Expect` or their dicts) that must hold per batch size, whatever the
        goldens say.
        """
        s = self._session
        try:
            _check_is_result(result)
            options = CheckOptions(
                level=level or s.options.level,
                ignore_kernels=ignore_kernels,  # type: ignore[arg-type]
                ignore_ops=ignore_ops,  # type: ignore[arg-type]
                sections=SECTIONS if sections is None else sections,
                max_launches=max_launches,
                max_graph_memory=max_graph_memory,
                memory_tolerance=memory_tolerance,
                share_ranks=share_ranks,
                rename=self._hook("pytest_graphcapture_normalize_kernel", "name", "level"),
                op_classes=s.options.op_classes,
                expect=expect,  # type: ignore[arg-type]
            )
            platform = str(result.platform)
            folder = golden_folder(s.options.golden_dir, platform, self._nodeid, name)
            self._claim(folder, result, name)
            # Registered first: whatever fails below, the folder is known to belong to this test.
            s.report.add_folder(platform, s.rel(folder), self._nodeid)
            out_folder = (
                golden_folder(s.options.golden_out, platform, self._nodeid, name) if s.options.golden_out else None
            )
            outcome = check_result(
                result,
                golden_dir=s.options.golden_dir,
                folder=folder,
                out_folder=out_folder,
                update=s.options.update,
                options=options,
                postprocess=self._hook("pytest_graphcapture_postprocess_summary", "summary"),
                display=lambda p: s.display(Path(p)),
                selected=None if s.selected() is None else (s.selected(), s.options.selection),
            )
        except GraphCaptureError as exc:
            problem = str(exc)
        else:
            problem = None
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        s.record(self._nodeid, outcome, result)

    def check_traces(
        self,
        paths: Union[str, Path, Sequence[Union[str, Path]]],
        *,
        batch_sizes: Optional[Sequence[int]] = None,
        runner: Optional[str] = None,
        level: Optional[str] = None,
        ignore_kernels: Sequence[str] = (),
        ignore_ops: Sequence[str] = (),
        sections: Optional[Sequence[str]] = None,
        max_launches: Union[int, Mapping[int, int], None] = None,
        name: Optional[str] = None,
        ignore_unkeyed_windows: bool = False,
        variants: Optional[Sequence[str]] = None,
    ) -> None:
        """The gate of :meth:`check` over capture traces an engine wrote (files, or folders searched for them).

        Each trace is split into its capture keys by the engine's markers: vLLM's ``capture_{bs}_{mode}`` ranges,
        sglang's per-size file names, or, for one trace of a whole capture, its windows mapped to ``batch_sizes``
        (capture order, largest first; each size one window per ``variants`` label).  ``runner`` names every key's
        runner.  A folder without traces, a trace without a capture window or a key that captured nothing fails the
        test in one line: nothing to check is never a pass.  So does a capture window in no ``capture_{bs}_{mode}``
        range, unless ``ignore_unkeyed_windows`` (then a warning names it).
        """
        from ..golden.traces import collect_traces, unkeyed_windows

        given = [paths] if isinstance(paths, (str, Path)) else list(paths)
        try:
            result = collect_traces(
                given,
                batch_sizes=batch_sizes,
                runner=runner,
                level=level or self._session.options.level,
                ignore_unkeyed_windows=ignore_unkeyed_windows,
                variants=variants,
            )
        except GraphCaptureError as exc:
            problem = f"golden.check_traces: {exc}"
        else:
            problem = None
        if problem is not None:
            pytest.fail(problem, pytrace=False)
        if result.passed_over:
            warnings.warn(f"golden.check_traces: {result.passed_over}", UserWarning, stacklevel=2)
        for trace in result.traces:  # windows of no key, ignored on request: said, never silent
            if trace.unkeyed:
                warnings.warn(
                    f"golden.check_traces: {trace.path}: {unkeyed_windows(trace)}: not checked",
                    UserWarning,
                    stacklevel=2,
                )
        self.check(
            result,
            level=level,
            ignore_kernels=ignore_kernels,
            ignore_ops=ignore_ops,
            sections=sections,
            max_launches=max_launches,
            name=name,
        )

    def _claim(self, folder: Path, result: Any, name: Optional[str]) -> None:
        """Refuse a second check that would read and write the goldens of an earlier one in this test."""
        runner = str(getattr(result, "runner_name", "") or "capture")
        if (folder, runner) in self._checked:
            again = f'under name="{name}" ' if name else ""
            raise UsageError(
                f"golden.check: this test already checked runner {runner} {again}against the goldens in "
                f"{self._session.display(folder)}/; both checks would write the same files. Give the "
                f'second check its own goldens with a distinct name, e.g. golden.check(result, name="family")'
            )
        self._checked.add((folder, runner))

    def _hook(self, name: str, *params: str) -> Optional[Callable[..., Any]]:
        """A project's hook ``name`` as a callable taking ``params`` in order (config bound), or None when none."""
        config = self._session.config
        hook = getattr(config.hook, name, None)
        if hook is None or not hook.get_hookimpls():
            return None
        return lambda *args: hook(config=config, **dict(zip(params, args)))


def _check_is_result(result: Any) -> None:
    """UsageError naming the fix when ``golden.check`` gets no capture result (likely: the fixture, or the runner)."""
    from ..result import CaptureResult

    if isinstance(result, CaptureResult):  # a capture run's or golden.check_traces's keys
        return
    if isinstance(result, GraphCapture):
        raise UsageError(
            "golden.check got the graph_capture fixture itself, not a capture result: call it first, "
            "golden.check(graph_capture()) or golden.check(graph_capture(runner))"
        )
    if callable(getattr(result, "capture_keys", None)) or callable(getattr(result, "forward_for", None)):
        raise UsageError(
            f"golden.check got a runner ({type(result).__name__}), not a capture result: capture it first, "
            f"golden.check(graph_capture(runner))"
        )
    raise UsageError(
        f"golden.check expects the CaptureResult that graph_capture(...) or graph_capture.engine(...) returns, "
        f"got {type(result).__name__}"
    )


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Compare a graph capture result with its golden files: ``golden.check(result)``."""
    return GoldenChecker(request.config.stash[SESSION], request.node.nodeid)


@pytest.fixture
def decode_runner(request: pytest.FixtureRequest) -> Any:
    """The runner ``graph_capture`` captures by default: the embedded tiny decoder.

    It is built for all its batch sizes whatever ``--graph-capture-batch-sizes`` selects
    (the capture takes only the selected ones), so its static buffers, and with them
    every graph, are those of a full run.  Override this fixture in your ``conftest.py``
    to capture your own runner, or implement the ``pytest_graphcapture_make_runner`` hook.
    """
    state = request.config.stash[SESSION]
    try:
        device = state.device
    except UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    runner = request.config.hook.pytest_graphcapture_make_runner(
        config=request.config, device=device, batch_sizes=state.batch_sizes
    )
    if runner is None:
        from ..engine.decode_model import TinyDecodeRunner

        runner = TinyDecodeRunner(device=device)
    return runner


@pytest.fixture
def fake_backend() -> Any:
    """A FakeBackend recording every call in ``fake_backend.log``; ``fake_backend.inject_fault(stage, key)`` fails one stage."""
    from ..testing import CallLog, FakeBackend

    return FakeBackend(CallLog())


@pytest.fixture
def recording_profiler(fake_backend: Any) -> Any:
    """A RecordingProfiler whose ``step()`` calls land in ``fake_backend.log``."""
    from ..testing import RecordingProfiler

    return RecordingProfiler(fake_backend.log)


@pytest.fixture
def capture_contract(fake_backend: Any, recording_profiler: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Checks the capture step contract: ``check_runner(runner)`` or ``check_capture(fn, forward=..., key=...)``.

    Per key two warmups then the capture, a profiler step after each and none inside
    the graph, largest batch size first, one trace per key; a failure shows the
    expected-vs-actual call listing.
    """
    from ..testing import CaptureContract

    return CaptureContract(fake_backend, recording_profiler, tmp_path_factory.mktemp("capture-contract"))
