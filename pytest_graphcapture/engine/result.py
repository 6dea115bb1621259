"""What a capture run returns: per capture key, its trace path, summary and graph.

:meth:`CaptureResult.to_dict` / :meth:`CaptureResult.from_dict` carry a result
across a process boundary as plain data (a rank process sends its result to the
parent this way); graphs stay in the process that captured them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from ..keys import CaptureKey
from ..summary.model import Summary


@dataclass
class KeyResult:
    """The outcome of capturing one key.

    ``trace_path`` is set when a per-bs trace was exported, ``summary`` when the
    capture was profiled (a :class:`~pytest_graphcapture.summary.model.Summary`),
    ``graph`` is the backend's captured graph (replayable on GPU), and
    ``seconds`` the wall time of warmups plus capture.
    """

    key: CaptureKey
    trace_path: Optional[Path] = None
    summary: Any = None
    graph: Any = None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        """Plain data (no graph): key, summary dict, trace path and seconds."""
        return {
            "key": self.key.to_dict(),
            "summary": self.summary.to_dict() if self.summary is not None else None,
            "trace_path": str(self.trace_path) if self.trace_path else None,
            "seconds": self.seconds,
        }

    @classmethod
    def from_dict(cls, data: dict, *, source: str = "<result>") -> "KeyResult":
        """Inverse of :meth:`to_dict`; the summary is validated (TraceFormatError naming ``source``)."""
        key = CaptureKey.from_dict(data["key"])
        summary = (
            Summary.from_dict(data["summary"], source=f"{source} summary of {key}")
            if data.get("summary") is not None
            else None
        )
        return cls(
            key,
            trace_path=Path(data["trace_path"]) if data.get("trace_path") else None,
            summary=summary,
            seconds=float(data.get("seconds", 0.0)),
        )


@dataclass
class CaptureResult:
    """All keys captured for one runner, in capture order (largest batch size first)."""

    runner_name: str
    platform: str
    rank: int = 0
    keys: dict[CaptureKey, KeyResult] = field(default_factory=dict)
    single_trace_path: Optional[Path] = None
    mode: str = "per-bs"

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
