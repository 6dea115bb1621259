"""Every setting (option > environment variable > ini key > default), read once into :class:`Options`."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import pytest

from ..errors import UsageError
from ..golden.change import OpClasses, op_classes, parse_globs
from ..keys import parse_batch_sizes
from ..naming import GOLDEN_DIR_DEFAULT, GOLDEN_DIR_ENV, GOLDEN_DIR_OPTION, setting_path
from ..summary.tracefile import resolve_max_bytes


@dataclass(frozen=True)
class _Setting:
    """One user-facing setting: its option, environment variable and ini key."""

    option: str
    env: str
    help: str
    default: Optional[str] = None
    choices: Optional[tuple[str, ...]] = None
    # ``const`` is the value of a bare flag (``--graph-capture-trace`` alone).
    const: Optional[str] = None
    metavar: Optional[str] = None

    @property
    def ini(self) -> str:
        return self.option.lstrip("-").replace("-", "_")


SETTINGS: dict[str, _Setting] = {}


def _declare(*args: Any, **kwargs: Any) -> _Setting:
    setting = _Setting(*args, **kwargs)
    SETTINGS[setting.ini] = setting
    return setting


def add_setting(group: Any, parser: pytest.Parser, setting: _Setting) -> None:
    """Add ``setting``'s command-line option to ``group`` and its ini key to ``parser``."""
    kwargs: dict[str, Any] = {"dest": setting.ini, "default": None, "metavar": setting.metavar}
    help_text = f"{setting.help} (env {setting.env}, ini {setting.ini}"
    help_text += f", default {setting.default})" if setting.default is not None else ")"
    if setting.const is not None:
        kwargs.update(nargs="?", const=setting.const)
    if setting.choices:  # checked when read, so the error names the option and the source
        help_text += f"; one of {', '.join(setting.choices)}"
    group.addoption(setting.option, help=help_text, **kwargs)
    parser.addini(setting.ini, help=setting.help, default=None)


def _resolve(config: pytest.Config, setting: _Setting) -> tuple[Optional[str], str]:
    """``(value, source)``; source is ``option``, ``environment variable X``, ``ini key x`` or ``default``."""
    value = config.getoption(setting.ini, default=None)
    source = "option"
    if value is None:
        value = os.environ.get(setting.env) or None
        source = f"environment variable {setting.env}"
    if value is None:
        ini = config.getini(setting.ini)
        value = ini if ini not in (None, "", []) else None
        source = f"ini key {setting.ini}"
    if value is None:
        return setting.default, "default"
    value = str(value).strip()
    if setting.choices and value not in setting.choices:
        where = _where(setting, source)
        hint = ""
        if source == "option" and setting.const is not None:
            hint = (
                f" (a bare {setting.option} takes the next word as its value: put test paths before it, "
                f"or write {setting.option}={setting.const})"
            )
        raise UsageError(f"{where}: {value!r} is not one of {', '.join(setting.choices)}{hint}")
    return value, source


@dataclass(frozen=True)
class Options:
    """Every setting of one pytest process, resolved and checked once (UsageError naming a bad value's source)."""

    trace: str
    out_dir: Path
    batch_sizes: Optional[list[int]]
    device: str
    platform: Optional[str]
    profiler_flags: frozenset
    replay: Optional[bool]
    rank_timeout: float
    isolate: bool
    golden_dir: Path
    update: Optional[str]
    golden_out: Optional[Path]
    level: str
    op_classes: OpClasses
    report_md: Optional[Path]
    report_json: Optional[Path]
    xdist_gpu: bool
    # The batch-size selection as given (``--graph-capture-batch-sizes=8,2``), as messages name it.
    selection: Optional[str] = None
    sources: dict = field(default_factory=dict, compare=False)

    def where(self, setting: _Setting) -> str:
        """How messages name where ``setting``'s value came from: the option, or the variable / ini key."""
        return _where(setting, self.sources.get(setting.ini, "default"))

    @classmethod
    def from_config(cls, config: pytest.Config) -> "Options":
        values, sources = {}, {}
        for key, setting in SETTINGS.items():
            values[key], sources[key] = _resolve(config, setting)

        def where(setting: _Setting) -> str:
            return _where(setting, sources[setting.ini])

        def path(setting: _Setting) -> Optional[Path]:
            value = values[setting.ini]
            if value is None:
                return None
            dirs = {"invocation_dir": config.invocation_params.dir, "inipath": config.inipath}
            return setting_path(value, sources[setting.ini], rootdir=config.rootpath, **dirs)

        sizes = values[BATCH_SIZES.ini]
        try:
            batch_sizes = sorted(set(parse_batch_sizes(sizes))) if sizes else None
        except ValueError as exc:
            raise UsageError(f"{where(BATCH_SIZES)}: {exc}") from None
        flags = _profiler_flags(values[PROFILER_FLAGS_SETTING.ini], where(PROFILER_FLAGS_SETTING))
        resolve_max_bytes()  # a bad GRAPH_CAPTURE_MAX_TRACE_BYTES is refused now, not when a trace is read
        out_dir = path(DIR) or Path(config.rootpath)
        _check_trace_dir(out_dir, where(DIR))
        return cls(
            trace=values[TRACE.ini] or "off",
            out_dir=out_dir,
            batch_sizes=batch_sizes,
            selection=f"{where(BATCH_SIZES)}={sizes}" if batch_sizes else None,
            device=values[DEVICE.ini] or "auto",
            platform=values[PLATFORM.ini],
            profiler_flags=flags,
            replay={"auto": None, "on": True, "off": False}[values[REPLAY.ini] or "auto"],
            rank_timeout=_parse_seconds(str(values[RANK_TIMEOUT.ini]), where(RANK_TIMEOUT)),
            isolate=values[ISOLATE.ini] == "on",
            golden_dir=path(GOLDEN_DIR),  # type: ignore[arg-type]
            update=values[UPDATE_GOLDEN.ini],
            golden_out=path(GOLDEN_OUT),
            level=values[GOLDEN_LEVEL.ini] or "name",
            op_classes=op_classes(parse_globs(values[VIEW_OPS.ini] or ""), parse_globs(values[COMPUTE_OPS.ini] or "")),
            report_md=path(REPORT_MD),
            report_json=path(REPORT_JSON),
            xdist_gpu=values[XDIST_GPU.ini] == "on",
            sources=sources,
        )


def _where(setting: _Setting, source: str) -> str:
    return setting.option if source == "option" else source


_PROFILER_FLAGS = ("stack", "flops", "memory")


def _profiler_flags(text: str, where: str) -> frozenset[str]:
    """``stack,flops,memory`` (or ``none``/``all``) as a set of flags."""
    text = str(text).strip().lower()
    if text in ("", "none", "off"):
        return frozenset()
    if text == "all":
        return frozenset(_PROFILER_FLAGS)
    flags = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(flags - set(_PROFILER_FLAGS))
    if unknown:
        raise UsageError(
            f"{where}: unknown profiler flag(s) {', '.join(unknown)}; use any of "
            f"{', '.join(_PROFILER_FLAGS)}, 'all' or 'none'"
        )
    return flags


def _parse_seconds(value: object, where: str) -> float:
    """A positive, finite number of seconds from an option's text or a marker's argument, else UsageError.

    0 is not "the default", and NaN or infinity would never time out.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UsageError(f"{where}: {value!r} is not a number of seconds")
    try:
        seconds = float(value)
    except (ValueError, OverflowError):
        raise UsageError(f"{where}: {value!r} is not a number of seconds") from None
    if not 0 < seconds < math.inf:
        raise UsageError(f"{where}: the timeout must be a positive, finite number of seconds, got {value!r}")
    return seconds


def _check_trace_dir(path: Path, where: str) -> None:
    """``--graph-capture-dir``: a folder (existing or to be made), never a file."""
    if any(ch in str(path) for ch in "\n\r\0"):
        raise UsageError(f"{where}: {str(path)!r} contains a line break or NUL; give a plain folder name")
    try:
        for folder in (path, *path.parents):
            if folder.exists():
                if not folder.is_dir():
                    raise UsageError(f"{where} {path}: {folder} is a file, expected a folder for the traces")
                break
    except OSError as exc:  # a symlink loop, a name too long
        raise UsageError(f"{where} {path}: {exc.strerror or exc}") from None


# --------------------------------------------------------------------------- markers and graph_capture() arguments

RANKS = "graph_capture_ranks"
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
        values["timeout"] = _parse_seconds(values["timeout"], f"{where}(timeout=...)")
    return values


def _rank_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: the number of ranks must be a positive integer, got {value!r}")
    return value


def capture_arguments(
    ranks: Any, timeout: Any, ranks_marker: Any, isolated_marker: Any
) -> tuple[Optional[int], Optional[float], bool]:
    """``(ranks, timeout, isolated)`` of a ``graph_capture()`` call: its arguments, else the test's markers.

    Every argument and marker is checked like an option (UsageError naming it), whether or not it decides anything.
    """
    if ranks is not None:
        ranks = _rank_count(ranks, "graph_capture(ranks=...)")
    if timeout is not None:
        timeout = _parse_seconds(timeout, "graph_capture(timeout=...)")
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


# --------------------------------------------------------------------------- the capture engine

TRACE = _declare(
    "--graph-capture-trace",
    "GRAPH_CAPTURE_TRACE",
    "export capture traces: per-bs (one trace per captured graph) or single (one trace for the whole capture "
    "phase, which golden.check splits by its capture windows; a CPU capture has none, and its check fails)",
    choices=("per-bs", "single", "off"),
    const="per-bs",
    metavar="MODE",
)
DIR = _declare(
    "--graph-capture-dir",
    "GRAPH_CAPTURE_DIR",
    "directory under which traces go: DIR/graph_capture_profile/<test file>/<test>/, the folder of the test's goldens below the platform",
    default=".",
    metavar="DIR",
)
BATCH_SIZES = _declare(
    "--graph-capture-batch-sizes",
    "GRAPH_CAPTURE_BATCH_SIZES",
    "comma-separated batch sizes to capture, e.g. 1,2,4 (ASCII digits, 1 to 65536): every runner, the "
    "embedded one included, is built as for a full run and captures only these of its sizes (a size it does "
    "not list is an error), so each is checked against the goldens a full run wrote; a runner of your own must "
    "size its static buffers the same whichever sizes are selected (docs/adapting.md)",
    metavar="LIST",
)
DEVICE = _declare(
    "--graph-capture-device",
    "GRAPH_CAPTURE_DEVICE",
    "device to capture on: auto (GPU when present), cpu or cuda",
    default="auto",
    choices=("auto", "cpu", "cuda"),
    metavar="DEVICE",
)
PLATFORM = _declare(
    "--graph-capture-platform",
    "GRAPH_CAPTURE_PLATFORM",
    "platform key goldens are stored under, instead of the detected one (e.g. cuda-sm90)",
    metavar="KEY",
)
PROFILER_FLAGS_SETTING = _declare(
    "--graph-capture-profiler-flags",
    "GRAPH_CAPTURE_PROFILER_FLAGS",
    "extra recording in exported traces: any of stack,flops,memory, or all / none",
    default="all",
    metavar="FLAGS",
)
REPLAY = _declare(
    "--graph-capture-replay",
    "GRAPH_CAPTURE_REPLAY",
    "replay each captured graph once under the profiler to read its kernels (auto = on GPU graphs)",
    default="auto",
    choices=("auto", "on", "off"),
    metavar="WHEN",
)
RANK_TIMEOUT = _declare(
    "--graph-capture-rank-timeout",
    "GRAPH_CAPTURE_RANK_TIMEOUT",
    "seconds a multi-rank capture (graph_capture_ranks marker) may take once its rank processes have started; "
    "a rank that hangs longer fails the test and every rank process is stopped",
    default="120",
    metavar="SECONDS",
)
ISOLATE = _declare(
    "--graph-capture-isolate",
    "GRAPH_CAPTURE_ISOLATE",
    "run every graph_capture() call in a fresh subprocess (as the graph_capture_isolated marker does), "
    "so no profiler session of another test can leave kernel collection dead; the runner then comes "
    "from a module-level factory, and graph_capture.engine() (which runs in the test process) fails "
    "saying so",
    default="off",
    choices=("on", "off"),
    const="on",
    metavar="on|off",
)
# --------------------------------------------------------------------------- the golden gate

GOLDEN_DIR = _declare(
    GOLDEN_DIR_OPTION,
    GOLDEN_DIR_ENV,
    "directory of golden files",
    default=GOLDEN_DIR_DEFAULT,
    metavar="DIR",
)
UPDATE_GOLDEN = _declare(
    "--update-golden",
    "GRAPH_CAPTURE_UPDATE_GOLDEN",
    "write goldens: all (bare flag: create, rewrite changed, delete unused ones) or new (only create missing); "
    "refused on CI",
    choices=("all", "new"),
    const="all",
    metavar="MODE",
)
GOLDEN_OUT = _declare(
    "--golden-out",
    "GRAPH_CAPTURE_GOLDEN_OUT",
    "also write the obtained summaries under DIR in the golden layout, goldens untouched (allowed on CI)",
    metavar="DIR",
)
GOLDEN_LEVEL = _declare(
    "--golden-level",
    "GRAPH_CAPTURE_GOLDEN_LEVEL",
    "kernel-name normalization level of golden checks",
    default="name",
    choices=("exact", "name", "family"),
    metavar="LEVEL",
)
VIEW_OPS = _declare(
    "--golden-view-ops",
    "GRAPH_CAPTURE_GOLDEN_VIEW_OPS",
    "more view/metadata ops (fnmatch globs over op names, comma- or space-separated, e.g. mylib::view_*): "
    "a failure folds their lines into one line and lists compute ops first; added to the built-in list "
    "(as_strided, view, reshape, t, transpose, ...; see docs/golden-workflow.md)",
    metavar="GLOBS",
)
COMPUTE_OPS = _declare(
    "--golden-compute-ops",
    "GRAPH_CAPTURE_GOLDEN_COMPUTE_OPS",
    "more compute ops (fnmatch globs over op names, e.g. sglang::*): their lines lead a failure, before the "
    "built-in GEMM, attention, norm, activation, embedding, collective and fused classes",
    metavar="GLOBS",
)
REPORT_MD = _declare(
    "--graph-capture-report",
    "GRAPH_CAPTURE_REPORT",
    "add the golden session report as Markdown (with the diffs) to FILE, e.g. $GITHUB_STEP_SUMMARY",
    metavar="FILE",
)
REPORT_JSON = _declare(
    "--graph-capture-json", "GRAPH_CAPTURE_JSON", "write the golden session report as JSON to FILE", metavar="FILE"
)
XDIST_GPU = _declare(
    "--graph-capture-xdist-gpu",
    "GRAPH_CAPTURE_XDIST_GPU",
    "under pytest-xdist, pin worker gwN to visible GPU N mod count",
    default="off",
    choices=("on", "off"),
    const="on",
    metavar="on|off",
)
