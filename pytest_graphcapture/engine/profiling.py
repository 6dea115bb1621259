"""The profiler schedule: one recorded cycle — and at most one trace — per captured graph."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from .._io import write_via
from ..keys import CaptureKey
from ..naming import per_bs_trace_path, single_trace_path

#: Kineto's trace-point lines, printed to stderr on every profiler start and stop (whole lines, in a buffer).
_KINETO_NOISE_LINES = re.compile(rb"^USDT:[^\n]*\bprofiler_(?:start|stop)[ \t\r\f\v]*(?:\n|\Z)", re.MULTILINE)


class KinetoQuieter:
    """Drops Kineto's ``USDT: … profiler_start/profiler_stop`` lines from the stderr descriptor."""

    RESET_BYTES = 1 << 20

    def __init__(self) -> None:
        self._buffer: Optional[Any] = None

    @contextlib.contextmanager
    def __call__(self) -> Iterator[None]:
        fd = 2  # Kineto writes to the C runtime's stderr, whatever Python's sys.stderr is now
        try:
            saved = os.dup(fd)
        except OSError:  # no descriptor to filter (closed stderr): nothing to hide
            yield
            return
        try:
            if self._buffer is None:
                self._buffer = tempfile.TemporaryFile()
            buffer = self._buffer.fileno()
            # Descriptor 2 shares the file's offset while it points there: writes land after this.
            start = os.lseek(buffer, 0, os.SEEK_END)
            _flush_stderr()
            os.dup2(buffer, fd)
            try:
                yield
            finally:
                _flush_stderr()
                os.dup2(saved, fd)
                self._write_back(buffer, start, fd)
        finally:
            os.close(saved)

    def _write_back(self, buffer: int, start: int, fd: int) -> None:
        """Write what ``buffer`` received from ``start`` on to ``fd``, less Kineto's noise."""
        end = os.lseek(buffer, 0, os.SEEK_END)
        if end > start:
            os.lseek(buffer, start, os.SEEK_SET)
            chunks = []
            while chunk := os.read(buffer, max(end - start, 1 << 16)):
                chunks.append(chunk)
            kept = _KINETO_NOISE_LINES.sub(b"", b"".join(chunks))
            if kept:
                os.write(fd, kept)
        if end >= self.RESET_BYTES:
            os.ftruncate(buffer, 0)
        os.lseek(buffer, 0, os.SEEK_END)

    def close(self) -> None:
        buffer, self._buffer = self._buffer, None
        if buffer is not None:
            buffer.close()


@contextlib.contextmanager
def quiet_kineto() -> Iterator[None]:
    """One block of :class:`KinetoQuieter` (its temporary file removed afterwards)."""
    quieter = KinetoQuieter()
    try:
        with quieter():
            yield
    finally:
        quieter.close()


def _flush_stderr() -> None:
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass


def profiler_activities(device: torch.device) -> list[ProfilerActivity]:
    """CPU, plus CUDA when capturing on a GPU (HIP builds use the same activity)."""
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    return activities


_LAZY_MODULES_LOADED = False


def load_lazy_profiler_modules() -> None:
    """Import, once per process, the modules torch imports lazily at the first profiler start."""
    global _LAZY_MODULES_LOADED
    if _LAZY_MODULES_LOADED:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's own notes about an empty profile
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True):
            torch.zeros(1) + 1
    _LAZY_MODULES_LOADED = True


def _capture_schedule(warmups: int = 2) -> Callable[[int], Any]:
    """``schedule(wait=warmups, warmup=0, active=1, repeat=0)`` without torch's warmup warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*won't be using warmup.*", category=UserWarning)
        return schedule(wait=warmups, warmup=0, active=1, repeat=0)


def _export_trace(prof: profile, path: Path) -> None:
    """Export ``prof``'s cycle to ``path`` (gzipped for ``.gz``), atomically."""
    if not path.name.endswith(".gz"):
        write_via(path, lambda tmp: prof.export_chrome_trace(str(tmp)))
        return

    def export_gzipped(tmp: Path) -> None:
        plain = tmp.with_name(tmp.name[: -len(".gz")])  # a dot-file beside it: readers skip it
        try:
            prof.export_chrome_trace(str(plain))
            with open(plain, "rb") as source, gzip.open(tmp, "wb", compresslevel=6) as target:
                shutil.copyfileobj(source, target, 1 << 20)
        finally:
            plain.unlink(missing_ok=True)

    write_via(path, export_gzipped)


@dataclass
class _ProfiledKey:
    """What one recorded cycle produced for its key."""

    key: CaptureKey
    trace_path: Optional[Path] = None
    summary: Any = None


#: ``(profile, key, a function exporting the cycle's trace once and returning its path, or None) -> summary``.
_Summarizer = Callable[[profile, CaptureKey, Optional[Callable[[], Path]]], Any]


@dataclass
class PerBatchSizeProfiler:
    """One scheduled profiler for the capture phase; one cycle per captured key."""

    device: torch.device
    export_dir: Optional[Path] = None
    summarizer: Optional[_Summarizer] = None
    flags: frozenset = frozenset()
    #: Sub-folder of the trace folder (see :func:`~pytest_graphcapture.naming.trace_dir`).
    group: Optional[str] = None
    #: Profiler steps before each key's recorded one: the key's warmup forwards.
    warmups: int = 2
    results: dict = field(default_factory=dict)
    _prof: Optional[profile] = field(default=None, init=False, repr=False)
    _active: Optional[CaptureKey] = field(default=None, init=False)
    _aborted: bool = field(default=False, init=False)
    _quiet: KinetoQuieter = field(default_factory=KinetoQuieter, init=False, repr=False)

    def _make_profile(self) -> profile:
        export = self.export_dir is not None
        return profile(
            activities=profiler_activities(self.device),
            schedule=_capture_schedule(self.warmups),
            on_trace_ready=self._on_trace_ready,
            record_shapes=True,
            # Stack, FLOPs and memory only matter for a human reading an exported
            # trace; the summary needs none of them.
            with_stack=export and "stack" in self.flags,
            with_flops=export and "flops" in self.flags,
            profile_memory=export and "memory" in self.flags,
        )

    def __enter__(self) -> "PerBatchSizeProfiler":
        self._prof = self._make_profile()
        with self._quiet():
            self._prof.__enter__()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the profiler; a cycle still open is discarded, never attributed."""
        prof, self._prof = self._prof, None
        if prof is None:
            return
        self._aborted = True
        try:
            with self._quiet():
                prof.__exit__(None, None, None)
        finally:
            self._aborted = False
            self._active = None
            self._quiet.close()

    def begin_key(self, key: CaptureKey) -> None:
        """The next recorded cycle belongs to ``key``."""
        if self._prof is None:
            raise RuntimeError("PerBatchSizeProfiler.begin_key() called outside its context")
        self._active = key

    def step(self) -> None:
        if self._prof is not None:
            with warnings.catch_warnings():
                # Each cycle must start empty (that is the point); torch warns about it.
                warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle.*")
                with self._quiet():
                    self._prof.step()

    def add_metadata(self, metrics: dict) -> None:
        """Record the current key's metrics in its cycle (the exported trace's ``graph_capture_metrics``)."""
        if self._prof is not None and self._active is not None:
            self._prof.add_metadata_json("graph_capture_metrics", json.dumps(metrics, sort_keys=True))

    def abort_key(self) -> None:
        """Discard the current key's partial cycle and leave the profiler stopped."""
        self.stop()

    def _on_trace_ready(self, prof: profile) -> None:
        key, self._active = self._active, None
        if key is None or self._aborted:
            return  # a partial cycle of a failed key: no file, no summary
        done = _ProfiledKey(key)

        def export() -> Path:
            # Once: a profile exports only once, and reading its events after the export is unsafe
            # (torch frees them), so the summary reads the events first unless it needs the export.
            if done.trace_path is None:
                path = per_bs_trace_path(self.export_dir, key, self.group)
                _export_trace(prof, path)
                done.trace_path = path
            return done.trace_path

        if self.summarizer is not None:
            try:
                done.summary = self.summarizer(prof, key, export if self.export_dir is not None else None)
            except BaseException:
                if done.trace_path is not None:  # a key that failed leaves no file
                    done.trace_path.unlink(missing_ok=True)
                raise
        if self.export_dir is not None:
            export()
        self.results[key] = done


@dataclass
class SingleTraceProfiler:
    """One unscheduled profiler around the whole capture phase, exported once."""

    device: torch.device
    export_dir: Path
    runner_name: str
    rank: int = 0
    group: Optional[str] = None
    trace_path: Optional[Path] = None
    _prof: Optional[profile] = field(default=None, init=False, repr=False)

    def __enter__(self) -> "SingleTraceProfiler":
        self._prof = profile(activities=profiler_activities(self.device), record_shapes=True)
        with quiet_kineto():
            self._prof.__enter__()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        prof, self._prof = self._prof, None
        if prof is None:
            return
        with quiet_kineto():
            prof.__exit__(exc_type, exc, tb)
        if exc_type is None:
            path = single_trace_path(self.export_dir, self.runner_name, self.rank, self.group)
            _export_trace(prof, path)
            self.trace_path = path
