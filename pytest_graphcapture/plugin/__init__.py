"""The pytest plugin (entry point ``graphcapture``): hooks hand off to the session; loading it imports no torch."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

from ..errors import UsageError
from . import hookspecs
from .fixtures import capture_contract, decode_runner, fake_backend, golden, graph_capture, recording_profiler
from .session import SESSION, Session, short_error
from .settings import SETTINGS, add_setting
from .torch_setup import (
    before_test,
    gpu_missing_reason,
    import_torch_early,
    keep_torch_trace_out_of_logs,
    pin_worker_gpu,
    torch_warning_lines,
)

_MARKERS = (
    "gpu: needs a CUDA or ROCm GPU; skipped with a reason when none is present",
    "graph_capture_ranks(n, timeout=None): graph_capture() in this test captures on n spawned ranks "
    "with torch.distributed initialized (gloo on CPU, nccl on GPUs); graph_capture.engine() refuses it; "
    "see docs/multi-rank.md",
    "graph_capture_isolated(timeout=None): graph_capture() in this test captures in a fresh subprocess, "
    "from a module-level runner factory, so no earlier profiler session in this process can affect it; "
    "graph_capture.engine() refuses it",
)


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
    for marker in _MARKERS:
        config.addinivalue_line("markers", marker)
    try:
        session = config.stash[SESSION] = Session(config)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    if (
        session.options.xdist_gpu
        and session.is_worker
        and pin_worker_gpu(config.workerinput.get("workerid", "")) is None
    ):
        warnings.warn(
            pytest.PytestWarning("--graph-capture-xdist-gpu: no visible GPU devices, worker not pinned"), stacklevel=1
        )
    # The session hears test reports; registered per config, so nested in-process runs stay apart.
    config.pluginmanager.register(session, "graphcapture-golden-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION in config.stash:
        config.stash[SESSION].release()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Before any test (and before xdist starts workers): start from an empty harvest and diff folder."""
    keep_torch_trace_out_of_logs(session.config)
    try:
        session.config.stash[SESSION].start()
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def graph_capture_config(config: pytest.Config) -> Session:
    """The session's resolved settings and capture device (for other plugins and conftest code)."""
    return config.stash[SESSION]


def pytest_runtest_setup(item: pytest.Item) -> None:
    before_test(item)
    if item.get_closest_marker("gpu") is not None and (reason := gpu_missing_reason()):
        pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Show a plugin error as a short message (with the user's frames for a failed forward), not our traceback."""
    report = (yield).get_result()
    text = short_error(call.excinfo) if report.failed else None
    if text is not None:
        report.longrepr = text


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[SESSION].finish(session, exitstatus)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    for line in torch_warning_lines(config):
        terminalreporter.write_line(line)
    config.stash[SESSION].terminal_summary(terminalreporter, exitstatus)


__all__ = ["capture_contract", "decode_runner", "fake_backend", "golden", "graph_capture", "recording_profiler"]
