"""What a capture run returns: per capture key, its trace path, summary and graph."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from .keys import CaptureKey


@dataclass
class KeyResult:
    """The outcome of capturing one key.

    ``trace_path`` is set when a per-bs trace was exported, ``summary`` when the
    capture was profiled (a :class:`~pytest_graphcapture.summary.Summary`),
    ``graph`` is the backend's captured graph (replayable on GPU), and
    ``seconds`` the wall time of warmups plus capture.
    """

    key: CaptureKey
    trace_path: Optional[Path] = None
    summary: Any = None
    graph: Any = None
    seconds: float = 0.0


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

    def for_batch_size(self, batch_size: int, variant: Optional[str] = None) -> KeyResult:
        """The result of ``batch_size`` (and ``variant``); KeyError naming what exists if absent."""
        for key, result in self.keys.items():
            if key.batch_size == batch_size and key.variant == variant:
                return result
        have = ", ".join(str(k) for k in self.keys) or "nothing"
        raise KeyError(f"no capture for bs={batch_size} variant={variant!r}; captured: {have}")

    @property
    def trace_paths(self) -> list[Path]:
        return [r.trace_path for r in self.keys.values() if r.trace_path is not None]
