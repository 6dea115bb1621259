"""Every setting of the plugin: command line, environment variable and ini key, declared once.

Each setting is a :class:`Setting`; the declaration adds the command-line option
and the ini key, and :func:`resolve` reads the value with the documented
precedence **command line > environment variable > ini key > default**.
:func:`resolve_path` turns a path setting into an absolute path by the one rule
for relative paths, :func:`naming.setting_path` (``graphcapture accept`` uses it
too).  The registry :data:`SETTINGS` is what the
configuration reference in ``docs/`` is generated from.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import pytest

from ..errors import UsageError
from ..golden.store import CI_OFF_VALUES, CI_VARIABLES, ci_environment  # noqa: F401  (the plugin reads them here)
from ..naming import GOLDEN_DIR_DEFAULT, GOLDEN_DIR_ENV, GOLDEN_DIR_OPTION, setting_path


@dataclass(frozen=True)
class Setting:
    """One user-facing setting: its option, environment variable and ini key."""

    option: str
    env: str
    help: str
    default: Optional[str] = None
    choices: Optional[tuple[str, ...]] = None
    # ``const`` is the value of a bare flag (``--graph-capture-trace`` alone).
    const: Optional[str] = None
    metavar: Optional[str] = None
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def ini(self) -> str:
        return self.option.lstrip("-").replace("-", "_")

    @property
    def dest(self) -> str:
        return self.ini


SETTINGS: dict[str, Setting] = {}


def declare(setting: Setting) -> Setting:
    """Register ``setting`` in :data:`SETTINGS` (once per option name)."""
    SETTINGS[setting.ini] = setting
    return setting


def add_setting(group: Any, parser: pytest.Parser, setting: Setting) -> None:
    """Add ``setting``'s command-line option to ``group`` and its ini key to ``parser``."""
    kwargs: dict[str, Any] = {"dest": setting.dest, "default": None, "metavar": setting.metavar}
    help_text = f"{setting.help} (env {setting.env}, ini {setting.ini}"
    help_text += f", default {setting.default})" if setting.default is not None else ")"
    if setting.const is not None:
        kwargs.update(nargs="?", const=setting.const)
    if setting.choices:
        # Validated in resolve() so the error names the option and the source.
        help_text += f"; one of {', '.join(setting.choices)}"
    group.addoption(setting.option, help=help_text, **kwargs)
    parser.addini(setting.ini, help=setting.help, default=None)


def resolve_with_source(config: pytest.Config, setting: Setting) -> tuple[Optional[str], str]:
    """Return ``(value, source)``; source is ``option``, ``env``, ``ini`` or ``default``."""
    value = config.getoption(setting.dest, default=None)
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
        where = setting.option if source == "option" else source
        hint = ""
        if source == "option" and setting.const is not None:
            hint = (
                f" (a bare {setting.option} takes the next word as its value: put test paths before it, "
                f"or write {setting.option}={setting.const})"
            )
        raise UsageError(f"{where}: {value!r} is not one of {', '.join(setting.choices)}{hint}")
    return value, source


def resolve(config: pytest.Config, setting: Setting) -> Optional[str]:
    """The value of ``setting`` with precedence command line > environment > ini > default."""
    return resolve_with_source(config, setting)[0]


#: The largest batch size accepted: far above what engines capture, far below an allocation that cannot succeed.
MAX_BATCH_SIZE = 65536


def parse_batch_sizes(text: str, where: str) -> list[int]:
    """Parse ``"1,2,4"`` into ``[1, 2, 4]``; ``where`` names the option in errors.

    ASCII digits only (``int()`` would also take ``1_0`` and other scripts' digits),
    each size from 1 to :data:`MAX_BATCH_SIZE`.
    """
    sizes: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        if not (part.isascii() and part.isdigit()):
            raise UsageError(f"{where}: {part!r} is not an integer batch size (expected e.g. 1,2,4)")
        size = int(part)
        if size < 1:
            raise UsageError(f"{where}: batch size {size} must be at least 1")
        if size > MAX_BATCH_SIZE:
            raise UsageError(f"{where}: batch size {size} is larger than the largest accepted, {MAX_BATCH_SIZE}")
        sizes.append(size)
    if not sizes:
        raise UsageError(f"{where}: no batch sizes given (expected e.g. 1,2,4)")
    return sorted(set(sizes))


PROFILER_FLAGS = ("stack", "flops", "memory")


def parse_profiler_flags(text: str, where: str) -> frozenset[str]:
    """Parse ``stack,flops,memory`` (or ``none``/``all``) into a set of flags."""
    text = str(text).strip().lower()
    if text in ("", "none", "off"):
        return frozenset()
    if text == "all":
        return frozenset(PROFILER_FLAGS)
    flags = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(flags - set(PROFILER_FLAGS))
    if unknown:
        raise UsageError(
            f"{where}: unknown profiler flag(s) {', '.join(unknown)}; use any of "
            f"{', '.join(PROFILER_FLAGS)}, 'all' or 'none'"
        )
    return flags


def parse_seconds(value: object, where: str) -> float:
    """A positive, finite number of seconds from an option's text or a marker's argument (``30``, ``"2.5"``).

    UsageError naming ``where`` otherwise: 0 is not "the default", and NaN or
    infinity would never time out (or fail far from here).
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


def resolve_path(config: pytest.Config, setting: Setting) -> Optional[Path]:
    """The absolute path a path setting names (relative paths: :func:`naming.setting_path`), or None."""
    value, source = resolve_with_source(config, setting)
    if value is None:
        return None
    return setting_path(
        value,
        source,
        invocation_dir=config.invocation_params.dir,
        inipath=config.inipath,
        rootdir=config.rootpath,
    )


def where(setting: Setting, source: str) -> str:
    """How an error names the place a value came from: the option, or the variable / ini key."""
    return setting.option if source == "option" else source


# --------------------------------------------------------------------------- the capture engine

TRACE = declare(
    Setting(
        "--graph-capture-trace",
        "GRAPH_CAPTURE_TRACE",
        "export capture traces: per-bs (one trace per captured graph) or single (one trace for the whole capture "
        "phase, and no per-batch-size summaries: every golden.check then fails, saying so)",
        choices=("per-bs", "single", "off"),
        const="per-bs",
        metavar="MODE",
    )
)
DIR = declare(
    Setting(
        "--graph-capture-dir",
        "GRAPH_CAPTURE_DIR",
        "directory under which traces go: DIR/graph_capture_profile/<test file>/<test>/, the folder of the test's goldens below the platform",
        default=".",
        metavar="DIR",
    )
)
BATCH_SIZES = declare(
    Setting(
        "--graph-capture-batch-sizes",
        "GRAPH_CAPTURE_BATCH_SIZES",
        "comma-separated batch sizes to capture, e.g. 1,2,4 (ASCII digits, 1 to 65536): every runner, the "
        "embedded one included, is built as for a full run and captures only these of its sizes (a size it does "
        "not list is an error), so each is checked against the goldens a full run wrote; a runner of your own must "
        "size its static buffers the same whichever sizes are selected (docs/adapting.md)",
        metavar="LIST",
    )
)
DEVICE = declare(
    Setting(
        "--graph-capture-device",
        "GRAPH_CAPTURE_DEVICE",
        "device to capture on: auto (GPU when present), cpu or cuda",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        metavar="DEVICE",
    )
)
PLATFORM = declare(
    Setting(
        "--graph-capture-platform",
        "GRAPH_CAPTURE_PLATFORM",
        "platform key goldens are stored under, instead of the detected one (e.g. cuda-sm90)",
        metavar="KEY",
    )
)
PROFILER_FLAGS_SETTING = declare(
    Setting(
        "--graph-capture-profiler-flags",
        "GRAPH_CAPTURE_PROFILER_FLAGS",
        "extra recording in exported traces: any of stack,flops,memory, or all / none",
        default="all",
        metavar="FLAGS",
    )
)
REPLAY = declare(
    Setting(
        "--graph-capture-replay",
        "GRAPH_CAPTURE_REPLAY",
        "replay each captured graph once under the profiler to read its kernels (auto = on GPU graphs)",
        default="auto",
        choices=("auto", "on", "off"),
        metavar="WHEN",
    )
)
RANK_TIMEOUT = declare(
    Setting(
        "--graph-capture-rank-timeout",
        "GRAPH_CAPTURE_RANK_TIMEOUT",
        "seconds a multi-rank capture (graph_capture_ranks marker) may take once its rank processes have started; "
        "a rank that hangs longer fails the test and every rank process is stopped",
        default="120",
        metavar="SECONDS",
    )
)
ISOLATE = declare(
    Setting(
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
)
MERGE = declare(
    Setting(
        "--graph-capture-merge",
        "GRAPH_CAPTURE_MERGE",
        "at session end, merge each multi-rank capture's per-rank traces into one Chrome trace per batch size "
        "({runner}_bs_{bs}_merged.json.gz, pids labelled [TP00], [TP01], ...); needs --graph-capture-trace",
        default="off",
        choices=("on", "off"),
        const="on",
        metavar="on|off",
    )
)

# --------------------------------------------------------------------------- the golden gate

GOLDEN_DIR = declare(
    Setting(
        GOLDEN_DIR_OPTION,
        GOLDEN_DIR_ENV,
        "directory of golden files",
        default=GOLDEN_DIR_DEFAULT,
        metavar="DIR",
    )
)
UPDATE_GOLDEN = declare(
    Setting(
        "--update-golden",
        "GRAPH_CAPTURE_UPDATE_GOLDEN",
        "write goldens: all (bare flag: create, rewrite changed, delete unused ones) or new (only create missing); "
        "refused on CI",
        choices=("all", "new"),
        const="all",
        metavar="MODE",
    )
)
GOLDEN_OUT = declare(
    Setting(
        "--golden-out",
        "GRAPH_CAPTURE_GOLDEN_OUT",
        "also write the obtained summaries under DIR in the golden layout, goldens untouched (allowed on CI)",
        metavar="DIR",
    )
)
GOLDEN_LEVEL = declare(
    Setting(
        "--golden-level",
        "GRAPH_CAPTURE_GOLDEN_LEVEL",
        "kernel-name normalization level of golden checks",
        default="name",
        choices=("exact", "name", "family"),
        metavar="LEVEL",
    )
)
VIEW_OPS = declare(
    Setting(
        "--golden-view-ops",
        "GRAPH_CAPTURE_GOLDEN_VIEW_OPS",
        "more view/metadata ops (fnmatch globs over op names, comma- or space-separated, e.g. mylib::view_*): "
        "a failure folds their lines into one line and lists compute ops first; added to the built-in list "
        "(as_strided, view, reshape, t, transpose, ...; see docs/golden-workflow.md)",
        metavar="GLOBS",
    )
)
COMPUTE_OPS = declare(
    Setting(
        "--golden-compute-ops",
        "GRAPH_CAPTURE_GOLDEN_COMPUTE_OPS",
        "more compute ops (fnmatch globs over op names, e.g. sglang::*): their lines lead a failure, before the "
        "built-in GEMM, attention, norm, activation, embedding, collective and fused classes",
        metavar="GLOBS",
    )
)
REPORT_MD = declare(
    Setting(
        "--graph-capture-report",
        "GRAPH_CAPTURE_REPORT",
        "add the golden session report as Markdown (with the diffs) to FILE, e.g. $GITHUB_STEP_SUMMARY",
        metavar="FILE",
    )
)
REPORT_JSON = declare(
    Setting(
        "--graph-capture-json", "GRAPH_CAPTURE_JSON", "write the golden session report as JSON to FILE", metavar="FILE"
    )
)
XDIST_GPU = declare(
    Setting(
        "--graph-capture-xdist-gpu",
        "GRAPH_CAPTURE_XDIST_GPU",
        "under pytest-xdist, pin worker gwN to visible GPU N mod count",
        default="off",
        choices=("on", "off"),
        const="on",
        metavar="on|off",
    )
)
