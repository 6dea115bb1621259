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

RANK_TIMEOUT = declare(Setting(
    "--graph-capture-rank-timeout", "GRAPH_CAPTURE_RANK_TIMEOUT",
    "seconds a multi-rank capture (graph_capture_ranks marker) may take once its rank processes have started; "
    "a rank that hangs longer fails the test and every rank process is stopped",
    default="120", metavar="SECONDS"))
MERGE = declare(Setting(
    "--graph-capture-merge", "GRAPH_CAPTURE_MERGE",
    "at session end, merge each multi-rank capture's per-rank traces into one Chrome trace per batch size "
    "({runner}_bs_{bs}_merged.json.gz, pids labelled [TP00], [TP01], ...); needs --graph-capture-trace",
    default="off", choices=("on", "off"), const="on", metavar="on|off"))

ENGINE_SETTINGS = (settings_mod.TRACE, settings_mod.DIR, settings_mod.BATCH_SIZES, settings_mod.DEVICE,
                   PLATFORM, PROFILER_FLAGS, REPLAY, RANK_TIMEOUT, MERGE)

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
    rank_timeout: float = 120.0
    merge: bool = False
    #: Per-rank trace files of this process's multi-rank captures, merged at session end with --graph-capture-merge.
    rank_traces: list = field(default_factory=list)
    merged: list = field(default_factory=list)
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
        profiler_flags=flags, replay=replay, rank_timeout=_rank_timeout(config), merge=resolve(config, MERGE) == "on")


def _rank_timeout(config: pytest.Config) -> float:
    text, source = resolve_with_source(config, RANK_TIMEOUT)
    where = RANK_TIMEOUT.option if source == "option" else source
    try:
        value = float(str(text))
    except ValueError:
        raise UsageError(f"{where}: {text!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise UsageError(f"{where}: the rank timeout must be a positive number of seconds, got {text!r}")
    return value


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA or ROCm GPU; skipped with a reason when none is present")
    config.addinivalue_line(
        "markers", "graph_capture_ranks(n, timeout=None): graph_capture() in this test captures on n spawned ranks "
        "with torch.distributed initialized (gloo on CPU, nccl on GPUs); see docs/multi-rank.md")
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
                 summarize: bool = True, ranks: Optional[int] = None, timeout: Optional[float] = None) -> Any:
        """Capture every key of ``runner`` (default: the ``decode_runner`` fixture).

        ``trace`` overrides the session's ``--graph-capture-trace`` mode for this
        call; ``summarize=False`` skips the summaries (no golden checks then).

        ``ranks=n`` (or the test's ``graph_capture_ranks(n)`` marker) captures on
        ``n`` spawned ranks instead: ``runner`` is then a runner *factory* — a
        module-level function taking a :class:`~pytest_graphcapture.distributed.RankContext`,
        or a ``"module:function"`` string (default: the tensor-parallel embedded
        decoder) — and the result holds every rank's keys.  ``timeout`` overrides
        ``--graph-capture-rank-timeout``.
        """
        from .backend import make_backend
        from .capture import capture_runner

        marker = self._request.node.get_closest_marker("graph_capture_ranks")
        if ranks is None and marker is not None:
            ranks = marker.args[0] if marker.args else marker.kwargs.get("n")
            if ranks is None:
                pytest.fail("@pytest.mark.graph_capture_ranks needs the number of ranks, e.g. "
                            "@pytest.mark.graph_capture_ranks(2)", pytrace=False)
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
        settings = self._state.capture_settings(trace=trace, summarize=summarize, progress=self._progress())
        return capture_runner(runner, self.backend, settings)

    def _capture_on_ranks(self, factory: Any, ranks: Any, *, trace: Optional[str], summarize: bool,
                          timeout: Optional[float]) -> Any:
        from .distributed import DEFAULT_FACTORY, RankError, capture_on_ranks

        try:
            device = self._state.device
            if factory is not None and callable(getattr(factory, "capture_keys", None)):
                raise UsageError(f"graph_capture(ranks={ranks}) got a runner object ({type(factory).__name__}); "
                                 f"each rank builds its own runner: pass a module-level factory function "
                                 f"(RankContext -> runner) or a 'module:function' string")
            settings = self._state.capture_settings(trace=trace, summarize=summarize, progress=self._progress())
            result = capture_on_ranks(factory or DEFAULT_FACTORY, ranks, settings, device_type=device.type,
                                      timeout=float(timeout or self._state.rank_timeout),
                                      batch_sizes=self._state.batch_sizes)
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


def pytest_sessionfinish(session: pytest.Session) -> None:
    """``--graph-capture-merge``: merge the per-rank traces this process's multi-rank captures wrote.

    Each pytest process (an xdist worker too) merges only the files it wrote, so
    stale traces of earlier runs never join a merged trace.
    """
    state = session.config.stash.get(_STATE, None)
    if state is None or not state.merge or not state.rank_traces:
        return
    from .errors import GraphCaptureError
    from .merge import merge_rank_traces

    paths = [p for p in dict.fromkeys(state.rank_traces) if p.exists()]
    by_dir: dict = {}
    for path in paths:
        by_dir.setdefault(path.parent, []).append(path)
    for folder, files in sorted(by_dir.items()):
        try:
            state.merged.extend(merge_rank_traces(folder, only=files))
        except GraphCaptureError as exc:
            import warnings

            warnings.warn(pytest.PytestWarning(f"--graph-capture-merge: {exc}"))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None and state.merged:
        folders = sorted({str(p.parent) for p in state.merged})
        terminalreporter.write_line(f"graph-capture: {len(state.merged)} merged multi-rank trace(s) written to "
                                    f"{', '.join(folders)}")


@pytest.fixture
def graph_capture(request: pytest.FixtureRequest) -> GraphCapture:
    """Capture a runner's graphs per batch size: ``result = graph_capture(runner)``.

    Returns a :class:`~pytest_graphcapture.result.CaptureResult` holding, per
    capture key, its summary and — with ``--graph-capture-trace`` — its trace path.
    """
    return GraphCapture(request)


__all__ = ["GraphCapture", "GraphCaptureConfig", "graph_capture_config", "SETTINGS"]
