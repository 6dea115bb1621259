"""The fixtures users request: ``decode_runner``, ``graph_capture`` and ``golden``.

They resolve nothing themselves: settings come from the session objects
(:mod:`.session`), capturing is the engine's and comparing is the golden gate's
(:func:`pytest_graphcapture.golden.gate.check_result`).  ``golden.check`` only
records the gate's outcome in the session report and turns a failed outcome into
a pytest failure.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import pytest

from .._io import write_atomic
from ..errors import FileError, GraphCaptureError, UsageError
from ..golden.diff import SECTIONS, cut_lines
from ..golden.gate import CheckOptions, CheckOutcome, check_result
from ..golden.report import KeyRecord
from ..golden.store import golden_folder
from ..keys import safe_name
from . import settings
from .session import CaptureSession, GoldenSession

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
        """
        from ..engine.backend import make_backend
        from ..engine.capture import capture_runner

        marker = self._request.node.get_closest_marker("graph_capture_ranks")
        if ranks is None and marker is not None:
            ranks = marker.args[0] if marker.args else marker.kwargs.get("n")
            if ranks is None:
                pytest.fail(
                    "@pytest.mark.graph_capture_ranks needs the number of ranks, e.g. "
                    "@pytest.mark.graph_capture_ranks(2)",
                    pytrace=False,
                )
            timeout = timeout if timeout is not None else marker.kwargs.get("timeout")
        if ranks is not None:
            return self._capture_on_ranks(runner, ranks, trace=trace, summarize=summarize, timeout=timeout)
        if runner is None:
            runner = self._request.getfixturevalue("decode_runner")
        try:
            device = getattr(runner, "device", None) or self._state.device
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.backend = backend if backend is not None else make_backend(device)
        capture_settings = self._state.capture_settings(trace=trace, summarize=summarize, progress=self._progress())
        return capture_runner(runner, self.backend, capture_settings)

    def _capture_on_ranks(
        self, factory: Any, ranks: Any, *, trace: Optional[str], summarize: bool, timeout: Optional[float]
    ) -> Any:
        from ..engine.ranks.capture import DEFAULT_FACTORY, capture_on_ranks
        from ..engine.ranks.supervisor import RankError

        try:
            device = self._state.device
            if factory is not None and callable(getattr(factory, "capture_keys", None)):
                raise UsageError(
                    f"graph_capture(ranks={ranks}) got a runner object ({type(factory).__name__}); "
                    f"each rank builds its own runner: pass a module-level factory function "
                    f"(RankContext -> runner) or a 'module:function' string"
                )
            capture_settings = self._state.capture_settings(trace=trace, summarize=summarize, progress=self._progress())
            result = capture_on_ranks(
                factory or DEFAULT_FACTORY,
                ranks,
                capture_settings,
                device_type=device.type,
                timeout=float(timeout or self._state.rank_timeout),
                batch_sizes=self._state.batch_sizes,
            )
            problem = None
        except RankError as exc:
            problem = f"multi-rank graph capture failed: {exc}"
        except UsageError as exc:
            problem = str(exc)
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        self._state.rank_traces.extend(result.trace_paths)
        self._state.rank_traces.extend(result.single_trace_paths.values())
        return result

    def _progress(self) -> Optional[Callable[[str], None]]:
        config = self._request.config
        if config.get_verbosity() < 1:
            return None
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return None

        def report(line: str) -> None:
            reporter.ensure_newline()
            reporter.write_line(line)

        return report


@pytest.fixture
def graph_capture(request: pytest.FixtureRequest) -> GraphCapture:
    """Capture a runner's graphs per batch size: ``result = graph_capture(runner)``.

    Returns a :class:`~pytest_graphcapture.engine.result.CaptureResult` holding, per
    capture key, its summary and — with ``--graph-capture-trace`` — its trace path.
    """
    return GraphCapture(request)


class GoldenChecker:
    """What the ``golden`` fixture returns; :meth:`check` compares a capture result with its goldens."""

    def __init__(self, session: GoldenSession, nodeid: str) -> None:
        self._session = session
        self._nodeid = nodeid

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
    ) -> None:
        """Compare every key of ``result`` (a CaptureResult) with its golden; fail once listing all mismatches.

        ``level`` defaults to ``--golden-level``; ``ignore_kernels`` / ``ignore_ops``
        are regexes (``re.search``) of names left out on both sides; ``sections``
        is a subset of ``("kernels", "ops", "launches")`` (default: all three).

        Multi-rank results (``world_size > 1``) use per-rank goldens
        ``…_bs_<bs>_rank<r>.json`` (rank 0 included).  ``share_ranks=True`` uses one
        golden without rank suffix for all ranks when their summaries are identical
        (tensor-parallel ranks usually are) and fails naming the ranks that differ.
        ``max_launches`` is a launch budget — one int for every key or
        ``{batch_size: int}`` — checked like a golden's ``launch_budget`` field:
        a capture recording more launches fails with the numbers.
        """
        s = self._session
        try:
            options = CheckOptions(
                level=level or s.level,
                ignore_kernels=tuple(ignore_kernels),
                ignore_ops=tuple(ignore_ops),
                sections=SECTIONS if sections is None else sections,
                max_launches=max_launches,
                share_ranks=share_ranks,
                rename=self._rename(),
            )
            platform = str(result.platform)
            folder = golden_folder(s.golden_dir, platform, self._nodeid)
            # Registered first: whatever fails below, the folder is known to belong to this test.
            s.report.add_folder(platform, s.rel(folder), self._nodeid)
            out_folder = golden_folder(s.out_dir, platform, self._nodeid) if s.out_dir else None
            outcome = check_result(
                result,
                golden_dir=s.golden_dir,
                folder=folder,
                out_folder=out_folder,
                update=s.update,
                options=options,
                postprocess=self._postprocess(),
                display=lambda p: s.display(Path(p)),
            )
        except GraphCaptureError as exc:
            problem = str(exc)
        else:
            problem = None
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        self._record(outcome)

    def _rename(self) -> Optional[Callable[[str, str], Optional[str]]]:
        """The ``pytest_graphcapture_normalize_kernel`` hook as a callable, when a project implements it."""
        config = self._session.config
        hook = getattr(config.hook, "pytest_graphcapture_normalize_kernel", None)
        if hook is None or not hook.get_hookimpls():
            return None
        return lambda name, level: hook(config=config, name=name, level=level)

    def _postprocess(self) -> Optional[Callable[[dict], None]]:
        config = self._session.config
        hook = getattr(config.hook, "pytest_graphcapture_postprocess_summary", None)
        if hook is None or not hook.get_hookimpls():
            return None
        return lambda data: hook(config=config, summary=data)

    def _record(self, outcome: CheckOutcome) -> None:
        s = self._session
        for message in outcome.warnings:  # output that could not be written: the run fails at its end
            s.report.errors.append(message)
            warnings.warn(pytest.PytestWarning(message), stacklevel=3)
        for key in outcome.keys:
            s.report.add_record(
                KeyRecord(
                    self._nodeid,
                    outcome.platform,
                    key.label,
                    s.rel(key.golden),
                    "failed" if key.outcome == "passed" and key.failed else key.outcome,
                    key.incomplete,
                )
            )
        if not outcome.failed:
            return
        head, body, tail = outcome.failure_parts(
            rerun=s.rerun_command(self._nodeid),
            display=lambda p: s.display(Path(p)),
            ci_var=settings.ci_environment(),
        )
        full = [head, *body, *tail]
        s.report.add_failure(self._nodeid, outcome.platform, "\n".join(full) + "\n")
        shown = cut_lines(body, None)
        if shown != body:
            diff_path = self._write_full_diff(outcome, full)
            shown = cut_lines(body, s.display(diff_path) if diff_path else None)
        pytest.fail("\n".join([head, *shown, *tail]), pytrace=False)

    def _write_full_diff(self, outcome: CheckOutcome, lines: list[str]) -> Optional[Path]:
        s = self._session
        if outcome.out_folder is not None:
            path = outcome.out_folder / "diff.txt"
        else:
            path = s.diff_dir() / f"{safe_name(self._nodeid)}.txt"
        try:
            write_atomic(path, "\n".join(lines) + "\n")
        except FileError:
            return None
        return path


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Compare a graph capture result with its golden files: ``golden.check(result)``."""
    return GoldenChecker(request.config.stash[GOLDEN], request.node.nodeid)
