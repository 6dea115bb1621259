"""The pytest plugin: every hook hands off in a line or three to the session objects.

Installing the package activates it (``pytest11`` entry point ``graphcapture``).
Settings are declared in :mod:`.settings`, session state lives in :mod:`.session`,
the fixtures (``decode_runner``, ``graph_capture``, ``golden``) in :mod:`.fixtures`,
the hook specifications in :mod:`.hookspecs`.  Loading the plugin imports no torch.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any, Optional

import pytest

from ..errors import CaptureError, GraphCaptureError, UsageError
from . import hookspecs
from .contract_fixtures import capture_contract, fake_backend, recording_profiler
from .fixtures import CAPTURE, GOLDEN, GoldenChecker, GraphCapture, decode_runner, golden, graph_capture
from .golden_session import GoldenSession
from .session import CaptureSession
from .settings import SETTINGS, XDIST_GPU, add_setting, resolve
from .torch_setup import before_test, import_torch_early, keep_torch_trace_out_of_logs, torch_warning_lines
from .xdist import pin_worker_gpu

WORKER_OUTPUT_KEY = "graphcapture_golden_report"
_SESSION_PLUGIN = "graphcapture-golden-session"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    caller = getattr(pluginmanager.hook, "pytest_graphcapture_postprocess_summary", None)
    if caller is None or caller.spec is None:  # another copy of the plugin may have added them
        pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphcapture", "CUDA-graph capture regression gate (pytest-graphcapture)")
    for setting in SETTINGS.values():
        add_setting(group, parser, setting)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    try:
        import_torch_early(early_config)  # before conftests: a warning-as-error cannot break torch's import
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA or ROCm GPU; skipped with a reason when none is present")
    config.addinivalue_line(
        "markers",
        "graph_capture_ranks(n, timeout=None): graph_capture() in this test captures on n spawned ranks "
        "with torch.distributed initialized (gloo on CPU, nccl on GPUs); graph_capture.engine() refuses it; "
        "see docs/multi-rank.md",
    )
    config.addinivalue_line(
        "markers",
        "graph_capture_isolated(timeout=None): graph_capture() in this test captures in a fresh subprocess, "
        "from a module-level runner factory, so no earlier profiler session in this process can affect it; "
        "graph_capture.engine() refuses it",
    )
    try:
        config.stash[CAPTURE] = CaptureSession.from_config(config)
        golden_session = config.stash[GOLDEN] = GoldenSession(config)
        pin = resolve(config, XDIST_GPU) == "on"
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    if pin and golden_session.is_worker and pin_worker_gpu(config.workerinput.get("workerid", "")) is None:
        warnings.warn(
            pytest.PytestWarning("--graph-capture-xdist-gpu: no visible GPU devices, worker not pinned"), stacklevel=1
        )
    # The session is also a plugin (it hears test reports); per config, so nested in-process runs stay apart.
    config.pluginmanager.register(_ReportListener(golden_session), _SESSION_PLUGIN)


class _ReportListener:
    """Feeds every test and collection report to the golden session (the controller also hears xdist workers')."""

    def __init__(self, session: GoldenSession) -> None:
        self.session = session

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.session.note_test(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if not report.passed:  # a skipped or broken module: its goldens are not orphans
            self.session.protected.add(report.nodeid)

    def pytest_deselected(self, items: Any) -> None:
        self.session.deselected = True

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.session.collected.update(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        self.session.collected.update(ids)


def pytest_unconfigure(config: pytest.Config) -> None:
    listener = config.pluginmanager.get_plugin(_SESSION_PLUGIN)
    if listener is not None:
        config.pluginmanager.unregister(listener)
    golden_session = config.stash.get(GOLDEN, None)
    if golden_session is not None:
        golden_session.release()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Before any test (and before xdist starts workers): start from an empty harvest and diff folder.

    Also keeps torch's structured compile trace out of the captured logs pytest reports.
    """
    keep_torch_trace_out_of_logs(session.config)
    try:
        session.config.stash[GOLDEN].start()
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def graph_capture_config(config: pytest.Config) -> CaptureSession:
    """The session's resolved capture settings (for other plugins and conftest code)."""
    return config.stash[CAPTURE]


def _gpu_missing_reason() -> Optional[str]:
    import torch

    if torch.cuda.is_available():
        return None
    build = "ROCm" if getattr(torch.version, "hip", None) else ("CUDA" if torch.version.cuda else "CPU-only")
    return (
        f"needs a CUDA or ROCm GPU: torch.cuda.is_available() is False (torch {torch.__version__}, "
        f"{build} build); run on a GPU runner to include this test"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    before_test(item)
    if item.get_closest_marker("gpu") is not None:
        reason = _gpu_missing_reason()
        if reason:
            pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Show errors from the plugin as a short message, not our traceback.

    A user-caused error (bad trace, bad golden, bad option) is one line.  A
    :class:`~pytest_graphcapture.errors.CaptureError` — the user's forward failed —
    names the key and stage and shows the user's own frames, where the cause is.
    """
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if report.failed and excinfo is not None and excinfo.errisinstance(GraphCaptureError):
        report.longrepr = f"{excinfo.typename}: {excinfo.value}"
        if excinfo.errisinstance(CaptureError):
            report.longrepr += "".join(user_frames(excinfo.value.cause))


def user_frames(error: BaseException, *, limit: int = 5) -> list[str]:
    """The innermost traceback frames of ``error`` outside this plugin, torch and pytest, formatted.

    That is where a failing forward's cause is; our capture loop around it is noise.
    """
    import traceback

    skip = tuple(str(Path(m.__file__).parent) + os.sep for m in _library_modules())
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return []
    return ["\nin your code (innermost last):\n", *traceback.format_list(frames[-limit:])]


def _library_modules() -> list[Any]:
    import _pytest
    import pluggy

    modules = [sys.modules[__name__.partition(".")[0]], _pytest, pluggy]
    torch = sys.modules.get("torch")
    return modules + ([torch] if torch is not None else [])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[CAPTURE].merge_rank_traces()
    golden_session = session.config.stash[GOLDEN]
    if golden_session.is_worker:
        session.config.workeroutput[WORKER_OUTPUT_KEY] = golden_session.report.to_dict()  # type: ignore[attr-defined]
    else:
        golden_session.finalize(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        if golden_session.report.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # asked-for output is missing: not a success


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: merge a finished worker's report."""
    data = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
    if data is not None:
        node.config.stash[GOLDEN].report.merge(data)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    for line in torch_warning_lines(config) + config.stash[CAPTURE].terminal_lines():
        terminalreporter.write_line(line)
    golden_session = config.stash[GOLDEN]
    if golden_session.is_worker:
        return
    golden_session.finalize(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    if not golden_session.report.empty:
        terminalreporter.write_sep("=", "graph capture goldens")
        for line in golden_session.terminal_lines():
            terminalreporter.write_line(line)


__all__ = [
    "GoldenChecker",
    "GraphCapture",
    "CaptureSession",
    "GoldenSession",
    "graph_capture_config",
    "SETTINGS",
    "capture_contract",
    "decode_runner",
    "fake_backend",
    "recording_profiler",
    "golden",
    "graph_capture",
]
