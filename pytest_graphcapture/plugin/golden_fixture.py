"""The ``golden`` fixture: ``golden.check(result)`` compares a capture result with its goldens, and
``golden.check_traces(paths)`` the capture traces an engine wrote.

The comparing is the golden gate's (:func:`pytest_graphcapture.golden.gate.check_result`);
``golden.check`` only records the gate's outcome in the session report and turns a
failed outcome into a pytest failure.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import pytest

from ..errors import GraphCaptureError, UsageError
from ..golden.change import SECTIONS
from ..golden.gate import CheckOptions, CheckOutcome, check_result
from ..golden.store import golden_folder
from .capture_fixture import GraphCapture
from .golden_session import GoldenSession
from .outcome_report import record_outcome
from .stash import GOLDEN


class GoldenChecker:
    """What the ``golden`` fixture returns; :meth:`check` compares a capture result with its goldens."""

    def __init__(self, session: GoldenSession, nodeid: str) -> None:
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

        ``name`` gives a check its own goldens, in the sub-folder ``<name>/`` of
        the test's folder: a test that checks the same runner twice (say a second
        time at ``level="family"``) names the second check; checking the same
        runner twice under one name is a usage error.
        ``max_graph_memory`` (bytes, an int or ``{batch_size: int}``, like a golden's
        ``graph_memory_budget`` field) bounds the reserved memory a capture adds, up to
        ``memory_tolerance`` (a fraction) over it; only checked where memory is measured (GPU).
        ``expect`` lists kernel expectations (:class:`~pytest_graphcapture.golden.expect.Expect`
        or their dicts) that must hold per batch size, whatever the goldens say.
        """
        s = self._session
        try:
            _check_is_result(result)
            options = CheckOptions(
                level=level or s.level,
                ignore_kernels=ignore_kernels,  # type: ignore[arg-type]
                ignore_ops=ignore_ops,  # type: ignore[arg-type]
                sections=SECTIONS if sections is None else sections,
                max_launches=max_launches,
                max_graph_memory=max_graph_memory,
                memory_tolerance=memory_tolerance,
                share_ranks=share_ranks,
                rename=self._rename(),
                op_classes=s.op_classes,
                expect=expect,  # type: ignore[arg-type]
            )
            platform = str(result.platform)
            folder = golden_folder(s.golden_dir, platform, self._nodeid, name)
            self._claim(folder, result, name)
            # Registered first: whatever fails below, the folder is known to belong to this test.
            s.report.add_folder(platform, s.rel(folder), self._nodeid)
            out_folder = golden_folder(s.out_dir, platform, self._nodeid, name) if s.out_dir else None
            outcome = check_result(
                result,
                golden_dir=s.golden_dir,
                folder=folder,
                out_folder=out_folder,
                update=s.update,
                options=options,
                postprocess=self._postprocess(),
                display=lambda p: s.display(Path(p)),
                selected=None if s.selected() is None else (s.selected(), s.batch_sizes_where),
            )
        except GraphCaptureError as exc:
            problem = str(exc)
        else:
            problem = None
        if problem is not None:  # failed outside the except block: no chained traceback in the report
            pytest.fail(problem, pytrace=False)
        self._record(outcome, result)

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
    ) -> None:
        """The gate of :meth:`check` over capture traces an engine wrote (files, or folders searched for them).

        Each trace is split into its capture keys by the engine's markers: vLLM's
        ``capture_{bs}_{mode}`` ranges, sglang's per-size file names, or, for one trace
        of a whole capture, its windows mapped to ``batch_sizes`` (capture order: sglang
        captures the largest first).  ``runner`` names every key's runner.  A folder
        without traces, a trace without a capture window or a key that captured
        nothing fails the test in one line: nothing to check is never a pass.  So does a
        capture window in no ``capture_{bs}_{mode}`` range, unless ``ignore_unkeyed_windows``
        (then a warning names it).
        """
        from ..golden.traces import collect_traces, unkeyed_windows

        given = [paths] if isinstance(paths, (str, Path)) else list(paths)
        try:
            result = collect_traces(
                given,
                batch_sizes=batch_sizes,
                runner=runner,
                level=level or self._session.level,
                ignore_unkeyed_windows=ignore_unkeyed_windows,
            )
        except GraphCaptureError as exc:
            problem = f"golden.check_traces: {exc}"
        else:
            problem = None
        if problem is not None:
            pytest.fail(problem, pytrace=False)
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

    def _record(self, outcome: CheckOutcome, result: Any) -> None:
        record_outcome(self._session, self._nodeid, outcome, result)


def _check_is_result(result: Any) -> None:
    """UsageError naming the fix when ``golden.check`` is given something other than a capture result.

    The likely slips are the ``graph_capture`` fixture itself (not called) and the runner
    (not captured); anything else that is not a CaptureResult is named by its type.
    """
    from ..result import CaptureResult
    from ..result import CaptureResult as TraceResult

    if isinstance(result, (CaptureResult, TraceResult)):  # a TraceResult: golden.check_traces's keys
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
    return GoldenChecker(request.config.stash[GOLDEN], request.node.nodeid)
