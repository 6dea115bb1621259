"""What a capture run or a set of engine traces gives the gate: per key, its summary, trace and graph.

``to_dict``/``from_dict`` carry a result across a process boundary as plain data; graphs stay behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from ._io import format_bytes
from .keys import CaptureKey
from .summary.model import summary_from_dict

#: The memory figures of a capture, in bytes: what the capture added to the allocator's counters.
MEMORY_FIELDS = ("memory_allocated", "memory_reserved")


@dataclass
class KeyMetrics:
    """What one key's graph cost: warmup, capture and replay wall time, and the graph pool's growth in bytes.

    Memory is None without a CUDA allocator, replay None when not replayed; never stored in goldens.
    """

    warmup_seconds: float = 0.0
    capture_seconds: float = 0.0
    replay_seconds: Optional[float] = None
    memory_allocated: Optional[int] = None
    memory_reserved: Optional[int] = None

    def to_dict(self) -> dict:
        """Plain data; absent figures (None) are left out."""
        return {name: value for name, value in self.__dict__.items() if value is not None}

    @classmethod
    def from_dict(cls, data: dict) -> "KeyMetrics":
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{name: value for name, value in data.items() if name in known})

    def describe(self) -> str:
        """``warmups 0.120s, capture 0.031s, graph memory +2.0 MiB allocated / +20.0 MiB reserved, replay 0.4 ms``."""
        parts = [f"warmups {self.warmup_seconds:.3f}s", f"capture {self.capture_seconds:.3f}s"]
        if self.memory_allocated is not None and self.memory_reserved is not None:
            parts.append(
                f"graph memory +{format_bytes(self.memory_allocated)} allocated / "
                f"+{format_bytes(self.memory_reserved)} reserved"
            )
        if self.replay_seconds is not None:
            parts.append(f"replay {self.replay_seconds * 1e3:.3f} ms")
        return ", ".join(parts)


@dataclass
class KeyResult:
    """One key: its trace (per-bs or the engine's), its Summary when profiled, the backend's graph, its costs."""

    key: CaptureKey
    trace_path: Optional[Path] = None
    summary: Any = None
    graph: Any = None
    seconds: float = 0.0
    metrics: KeyMetrics = field(default_factory=KeyMetrics)
    #: Why no golden may be written from this key's capture (another CUPTI client silenced its replay).
    no_golden: Optional[str] = None

    def to_dict(self) -> dict:
        """Plain data (no graph): key, summary dict, trace path, seconds and metrics (and ``no_golden`` when set)."""
        data = {
            "key": self.key.to_dict(),
            "summary": self.summary.to_dict() if self.summary is not None else None,
            "trace_path": str(self.trace_path) if self.trace_path else None,
            "seconds": self.seconds,
            "metrics": self.metrics.to_dict(),
        }
        if self.no_golden is not None:
            data["no_golden"] = self.no_golden
        return data

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "<result>") -> "KeyResult":
        """Inverse of :meth:`to_dict`; the summary is validated (TraceFormatError naming ``source``)."""
        key = CaptureKey.from_dict(data["key"])
        summary = (
            summary_from_dict(data["summary"], f"{source} summary of {key}")
            if data.get("summary") is not None
            else None
        )
        return cls(
            key,
            trace_path=Path(data["trace_path"]) if data.get("trace_path") else None,
            summary=summary,
            seconds=float(data.get("seconds", 0.0)),
            metrics=KeyMetrics.from_dict(data.get("metrics") or {}),
            no_golden=str(data["no_golden"]) if data.get("no_golden") is not None else None,
        )


@dataclass
class CaptureResult:
    """All keys of one runner, in capture order (largest batch size first), or of a set of engine traces."""

    runner_name: str
    platform: str
    rank: int = 0
    keys: dict[CaptureKey, KeyResult] = field(default_factory=dict)
    single_trace_path: Optional[Path] = None
    mode: str = "per-bs"
    world_size: int = 1
    #: The engine traces read (``summary.files.TraceKeys``); empty for a capture run.
    traces: list = field(default_factory=list)
    #: False when only named traces were read: a golden of a key they do not hold is not checked.
    whole: bool = True
    #: The files of the folders read that are no trace, in words (``passed over 1 file that is not a trace: …``).
    passed_over: Optional[str] = None

    def __iter__(self) -> Iterator[KeyResult]:
        return iter(self.keys.values())

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, key: CaptureKey) -> KeyResult:
        return self.keys[key]

    def for_batch_size(self, batch_size: int, variant: Any = None) -> KeyResult:
        """The result of ``batch_size`` (and ``variant``, itself or its text); KeyError naming what exists if absent."""
        for key, result in self.keys.items():
            if key.batch_size == batch_size and (key.variant == variant or key.variant_name == variant):
                return result
        have = ", ".join(str(k) for k in self.keys) or "nothing"
        raise KeyError(f"no capture for bs={batch_size} variant={variant!r}; captured: {have}")

    def to_dict(self) -> dict:
        """Plain data: runner, platform, rank, mode, single trace and every key's :meth:`KeyResult.to_dict`."""
        return {
            "runner_name": self.runner_name,
            "platform": self.platform,
            "rank": self.rank,
            "mode": self.mode,
            "single_trace_path": str(self.single_trace_path) if self.single_trace_path else None,
            "keys": [item.to_dict() for item in self],
        }

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "<result>") -> "CaptureResult":
        """Inverse of :meth:`to_dict` (keys keep their order)."""
        result = cls(
            runner_name=data["runner_name"],
            platform=data["platform"],
            rank=int(data.get("rank", 0)),
            mode=data.get("mode", "per-bs"),
            single_trace_path=Path(data["single_trace_path"]) if data.get("single_trace_path") else None,
        )
        for item in data["keys"]:
            key_result = KeyResult.from_dict(item, source=source)
            result.keys[key_result.key] = key_result
        return result

    @property
    def trace_paths(self) -> list[Path]:
        return [r.trace_path for r in self.keys.values() if r.trace_path is not None]
