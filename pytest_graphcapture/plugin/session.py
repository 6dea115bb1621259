"""The plugin's per-session capture state: resolved capture settings and what multi-rank captures wrote.

One :class:`CaptureSession` and one :class:`GoldenSession` live in each pytest
process (controller or xdist worker), stored in ``config.stash``; the hooks in
:mod:`pytest_graphcapture.plugin` hand off to them.  Nothing here compares
summaries: that is :mod:`pytest_graphcapture.golden.gate`'s.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from ..errors import GraphCaptureError, UsageError
from ..summary.tracefile import resolve_max_bytes
from . import settings as s


@dataclass
class CaptureSession:
    """The session's resolved capture settings and what its multi-rank captures wrote."""

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
    #: Where ``batch_sizes`` came from, as messages name it (the option, variable or ini key).
    batch_sizes_origin: str = "--graph-capture-batch-sizes"
    isolate: bool = False
    #: Where ``isolate`` came from, as messages name it (the option, variable or ini key).
    isolate_origin: str = "--graph-capture-isolate"
    #: Per-rank trace files of this process's multi-rank captures, merged at session end with --graph-capture-merge.
    rank_traces: list = field(default_factory=list)
    merged: list = field(default_factory=list)
    _device: Any = field(default=None, init=False)
    _platform: Optional[str] = field(default=None, init=False)

    @classmethod
    def from_config(cls, config: pytest.Config) -> "CaptureSession":
        """Resolve every capture setting (UsageError naming the option or variable on a bad value)."""
        sizes_text, sizes_source = s.resolve_with_source(config, s.BATCH_SIZES)
        batch_sizes = s.parse_batch_sizes(sizes_text, s.where(s.BATCH_SIZES, sizes_source)) if sizes_text else None
        flags_text, flags_source = s.resolve_with_source(config, s.PROFILER_FLAGS_SETTING)
        flags = s.parse_profiler_flags(flags_text, s.where(s.PROFILER_FLAGS_SETTING, flags_source))
        replay = {"auto": None, "on": True, "off": False}[s.resolve(config, s.REPLAY) or "auto"]
        resolve_max_bytes()  # a bad GRAPH_CAPTURE_MAX_TRACE_BYTES is refused now, not when a trace is read
        isolate, isolate_source = s.resolve_with_source(config, s.ISOLATE)
        return cls(
            config=config,
            trace=s.resolve(config, s.TRACE) or "off",
            out_dir=_trace_dir(config),
            batch_sizes=batch_sizes,
            device_choice=s.resolve(config, s.DEVICE) or "auto",
            platform_override=s.resolve(config, s.PLATFORM),
            profiler_flags=flags,
            replay=replay,
            rank_timeout=_rank_timeout(config),
            merge=s.resolve(config, s.MERGE) == "on",
            batch_sizes_origin=s.where(s.BATCH_SIZES, sizes_source),
            isolate=isolate == "on",
            isolate_origin=s.where(s.ISOLATE, isolate_source),
        )

    @property
    def device(self) -> Any:
        """The capture device: ``auto`` picks the GPU when torch sees one."""
        if self._device is None:
            import torch

            if self.device_choice == "cpu":
                self._device = torch.device("cpu")
            elif self.device_choice == "cuda":
                if not torch.cuda.is_available():
                    raise UsageError(
                        "--graph-capture-device=cuda, but torch.cuda.is_available() is False "
                        f"(torch {torch.__version__}); use auto or cpu on this machine"
                    )
                self._device = torch.device("cuda", torch.cuda.current_device())
            else:
                self._device = (
                    torch.device("cuda", torch.cuda.current_device())
                    if torch.cuda.is_available()
                    else torch.device("cpu")
                )
        return self._device

    @property
    def platform(self) -> str:
        """Platform key: the option, else the platform hook, else the detected device."""
        if self._platform is None:
            from ..engine.backend import detect_platform

            key = self.platform_override
            if not key:
                key = self.config.hook.pytest_graphcapture_platform(config=self.config, device=self.device)
            self._platform = key or detect_platform(self.device)
        return self._platform

    def capture_settings(
        self,
        *,
        trace: Optional[str] = None,
        summarize: bool = True,
        progress: Optional[Callable[[str], None]] = None,
        trace_group: Optional[str] = None,
    ) -> Any:
        """The engine's :class:`~pytest_graphcapture.engine.capture.CaptureSettings` for one capture.

        The session's batch sizes apply to every runner (the embedded one is built
        with them; any other captures only those of its sizes).
        """
        from ..engine.backend import environment_from_device
        from ..engine.capture import CaptureSettings

        trace = trace or self.trace
        environment = dict(environment_from_device(self.device))
        # What the profiler actually recorded: stack/flops/memory only go into exported per-bs traces.
        environment["profiler_flags"] = ["record_shapes"] + (sorted(self.profiler_flags) if trace == "per-bs" else [])
        return CaptureSettings(
            trace=trace,
            summarize=summarize,
            out_dir=self.out_dir,
            platform=self.platform,
            level="exact",
            replay=self.replay,
            profiler_flags=self.profiler_flags,
            environment=environment,
            progress=progress,
            batch_sizes=tuple(self.batch_sizes) if self.batch_sizes else None,
            batch_sizes_origin=self.batch_sizes_origin,
            trace_group=trace_group,
        )

    def merge_rank_traces(self) -> None:
        """``--graph-capture-merge``: merge the per-rank traces this process's multi-rank captures wrote.

        Each pytest process (an xdist worker too) merges only the files it wrote, so
        stale traces of earlier runs never join a merged trace.
        """
        if not self.merge or not self.rank_traces:
            return
        from ..tools.merge import merge_rank_traces

        by_dir: dict = {}
        for path in dict.fromkeys(self.rank_traces):
            if path.exists():
                by_dir.setdefault(path.parent, []).append(path)
        for folder, files in sorted(by_dir.items()):
            try:
                self.merged.extend(merge_rank_traces(folder, only=files))
            except GraphCaptureError as exc:
                warnings.warn(pytest.PytestWarning(f"--graph-capture-merge: {exc}"), stacklevel=1)

    def terminal_lines(self) -> list[str]:
        if not self.merged:
            return []
        folders = sorted({str(p.parent) for p in self.merged})
        return [f"graph-capture: {len(self.merged)} merged multi-rank trace(s) written to {', '.join(folders)}"]


def _trace_dir(config: pytest.Config) -> Path:
    """``--graph-capture-dir``: a folder (existing or to be made), never a file."""
    path = s.resolve_path(config, s.DIR) or Path(config.rootpath)
    where = s.where(s.DIR, s.resolve_with_source(config, s.DIR)[1])
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
    return path


def _rank_timeout(config: pytest.Config) -> float:
    text, source = s.resolve_with_source(config, s.RANK_TIMEOUT)
    return s.parse_seconds(str(text), s.where(s.RANK_TIMEOUT, source))
