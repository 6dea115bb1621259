"""The pytest plugin: options, the ``gpu`` marker and the capture fixtures.

Installing the package activates it (``pytest11`` entry point).  The golden gate
(``golden`` fixture, ``--update-golden``, session report) lives in
:mod:`pytest_graphcapture.golden_plugin`, loaded from here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from . import config as settings_mod
from .config import (SETTINGS, Setting, add_setting, declare, parse_batch_sizes, parse_profiler_flags, resolve,
                     resolve_with_source)
from .errors import CaptureError, GraphCaptureError, UsageError

pytest_plugins = ["pytest_graphcapture.golden_plugin"]

PLATFORM = declare(Setting(
    "--graph-capture-platform", "GRAPH_CAPTURE_PLATFORM",
    "platform key goldens are stored under, instead of the detected one (e.g. cuda-sm90)", metavar="KEY"))
PROFILER_FLAGS = declare(Setting(
    "--graph-capture-profiler-flags", "GRAPH_CAPTURE_PROFILER_FLAGS",
    "extra recording in exported traces: any of stack,flops,memory, or all / none",
    default="all", metavar="FLAGS"))
REPLAY = declare(Setting(
    "--graph-capture-replay", "GRAPH_CAPTURE_REPLAY",
    "replay each captured graph once under the profiler to read its kernels (auto = on GPU graphs)",
    default="auto", choices=("auto", "on", "off"), metavar="WHEN"))

ENGINE_SETTINGS = (settings_mod.TRACE, settings_mod.DIR, settings_mod.BATCH_SIZES, settings_mod.DEVICE,
                   PLATFORM, PROFILER_FLAGS, REPLAY)

_STATE = pytest.StashKey["GraphCaptureConfig"]()


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    caller = getattr(pluginmanager.hook, "pytest_graphcapture_postprocess_summary", None)
    if caller is None or caller.spec is None:  # another copy of the plugin may have added them
        pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphcapture", "CUDA-graph capture regression gate (pytest-graphcapture)")
    for setting in ENGINE_SETTINGS:
        add_setting(group, parser, setting)


def resolve_trace_mode(config: pytest.Config) -> tuple[str, Optional[str]]:
    """The trace mode and, when two sources disagree on per-bs vs single, a warning text.

    Precedence is command line > environment > ini, except that when one source
    asks for ``single`` and another for ``per-bs`` the older single-trace
    behaviour wins, with a warning.
    """
    setting = settings_mod.TRACE
    mode, source = resolve_with_source(config, setting)
    mode = mode or "off"
    asked = {}
    option_value = config.getoption(setting.dest, default=None)
    if option_value:
        asked["option " + setting.option] = option_value
    if os.environ.get(setting.env):
        asked["environment variable " + setting.env] = os.environ[setting.env].strip()
    ini_value = config.getini(setting.ini)
    if ini_value:
        asked["ini key " + setting.ini] = str(ini_value).strip()
    values = set(asked.values())
    if {"single", "per-bs"} <= values:
        sources = ", ".join(f"{where}={value}" for where, value in asked.items())
        return "single", (f"graph capture trace modes conflict ({sources}); single wins (one trace for the "
                          f"whole capture phase) — drop one of them to silence this warning")
    return mode, None


@dataclass
class GraphCaptureConfig:
    """The session's resolved capture settings (see :func:`pytest_configure`)."""

    config: pytest.Config
    trace: str
    out_dir: Path
    batch_sizes: Optional[list[int]]
    device_choice: str
    platform_override: Optional[str]
    profiler_flags: frozenset
    replay: Optional[bool]
    _device: Any = field(default=None, init=False)
    _platform: Optional[str] = field(default=None, init=False)

    @property
    def device(self) -> Any:
        """The capture device: ``auto`` picks the GPU when torch sees one."""
        if self._device is None:
            import torch

            if self.device_choice == "cpu":
                self._device = torch.device("cpu")
            elif self.device_choice == "cuda":
                if not torch.cuda.is_available():
                    raise UsageError("--graph-capture-device=cuda, but torch.cuda.is_available() is False "
                                     f"(torch {torch.__version__}); use auto or cpu on this machine")
                self._device = torch.device("cuda", torch.cuda.current_device())
            else:
                self._device = (torch.device("cuda", torch.cuda.current_device())
                                if torch.cuda.is_available() else torch.device("cpu"))
        return self._device

    @property
    def platform(self) -> str:
        """Platform key: the option, else the platform hook, else the detected device."""
        if self._platform is None:
            from .platform import detect_platform

            key = self.platform_override
            if not key:
                key = self.config.hook.pytest_graphcapture_platform(config=self.config, device=self.device)
            self._platform = key or detect_platform(self.device)
        return self._platform

    def capture_settings(self, *, trace: Optional[str] = None, summarize: bool = True,
                         progress: Optional[Callable[[str], None]] = None) -> Any:
        from .capture import CaptureSettings
        from .platform import environment_from_device

        trace = trace or self.trace
        environment = dict(environment_from_device(self.device))
        # What the profiler actually recorded: stack/flops/memory only go into exported per-bs traces.
        environment["profiler_flags"] = ["record_shapes"] + (sorted(self.profiler_flags) if trace == "per-bs" else [])
        return CaptureSettings(trace=trace, summarize=summarize, out_dir=self.out_dir,
                               platform=self.platform, level="exact", replay=self.replay,
                               profiler_flags=self.profiler_flags, environment=environment, progress=progress)


def _resolve_dir(config: pytest.Config, setting: Setting) -> Path:
    value, source = resolve_with_source(config, setting)
    path = Path(value or ".")
    if source.startswith("ini") or source == "default":
        return config.rootpath / path  # ini values and the default are relative to the rootdir
    return path.absolute()


def _load_config(config: pytest.Config) -> GraphCaptureConfig:
    trace, conflict = resolve_trace_mode(config)
    if conflict:
        config.issue_config_time_warning(pytest.PytestConfigWarning(conflict), stacklevel=2)
    sizes_text, sizes_source = resolve_with_source(config, settings_mod.BATCH_SIZES)
    where = settings_mod.BATCH_SIZES.option if sizes_source == "option" else sizes_source
    batch_sizes = parse_batch_sizes(sizes_text, where) if sizes_text else None
    flags_text, flags_source = resolve_with_source(config, PROFILER_FLAGS)
    flags = parse_profiler_flags(flags_text, PROFILER_FLAGS.option if flags_source == "option" else flags_source)
    replay = {"auto": None, "on": True, "off": False}[resolve(config, REPLAY) or "auto"]
    return GraphCaptureConfig(
        config=config, trace=trace, out_dir=_resolve_dir(config, settings_mod.DIR), batch_sizes=batch_sizes,
        device_choice=resolve(config, settings_mod.DEVICE) or "auto", platform_override=resolve(config, PLATFORM),
        profiler_flags=flags, replay=replay)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA or ROCm GPU; skipped with a reason when none is present")
    try:
        config.stash[_STATE] = _load_config(config)
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None


def graph_capture_config(config: pytest.Config) -> GraphCaptureConfig:
    """The session's resolved settings (for other plugins and conftest code)."""
    return config.stash[_STATE]


def _gpu_missing_reason() -> Optional[str]:
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return "needs a CUDA or ROCm GPU: torch is not importable"
    if torch.cuda.is_available():
        return None
    build = "ROCm" if getattr(torch.version, "hip", None) else ("CUDA" if torch.version.cuda else "CPU-only")
    return (f"needs a CUDA or ROCm GPU: torch.cuda.is_available() is False (torch {torch.__version__}, "
            f"{build} build); run on a GPU runner to include this test")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None:
        reason = _gpu_missing_reason()
        if reason:
            pytest.skip(reason)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """Show errors a user caused (bad trace, bad golden, bad option) as one line, not our traceback.

    A :class:`~pytest_graphcapture.errors.CaptureError` keeps its traceback: its
    cause is in the user's own forward, where the traceback is what helps.
    """
    outcome = yield
    report = outcome.get_result()
    excinfo = call.excinfo
    if report.failed and excinfo is not None and excinfo.errisinstance(GraphCaptureError) \
            and not excinfo.errisinstance(CaptureError):
        report.longrepr = f"{excinfo.typename}: {excinfo.value}"


@pytest.fixture
def decode_runner(request: pytest.FixtureRequest) -> Any:
    """The runner ``graph_capture`` captures by default: the embedded tiny decoder.

    Override this fixture in your ``conftest.py`` to capture your own runner, or
    implement the ``pytest_graphcapture_make_runner`` hook.
    """
    state = graph_capture_config(request.config)
    try:
        device = state.device
    except UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    runner = request.config.hook.pytest_graphcapture_make_runner(
        config=request.config, device=device, batch_sizes=state.batch_sizes)
    if runner is None:
        from .decode_model import TinyDecodeRunner

        runner = TinyDecodeRunner(state.batch_sizes, device=device)
    return runner


class GraphCapture:
    """What the ``graph_capture`` fixture returns: call it with a runner to capture it."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._state = graph_capture_config(request.config)
        self.backend: Any = None

    def __call__(self, runner: Any = None, *, backend: Any = None, trace: Optional[str] = None,
                 summarize: bool = True) -> Any:
        """Capture every key of ``runner`` (default: the ``decode_runner`` fixture).

        ``trace`` overrides the session's ``--graph-capture-trace`` mode for this
        call; ``summarize=False`` skips the summaries (no golden checks then).
        """
        from .backend import make_backend
        from .capture import capture_runner

        if runner is None:
            runner = self._request.getfixturevalue("decode_runner")
        try:
            device = getattr(runner, "device", None) or self._state.device
        except UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        self.backend = backend if backend is not None else make_backend(device)
        settings = self._state.capture_settings(trace=trace, summarize=summarize, progress=self._progress())
        return capture_runner(runner, self.backend, settings)

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

    Returns a :class:`~pytest_graphcapture.result.CaptureResult` holding, per
    capture key, its summary and — with ``--graph-capture-trace`` — its trace path.
    """
    return GraphCapture(request)


__all__ = ["GraphCapture", "GraphCaptureConfig", "graph_capture_config", "SETTINGS"]
