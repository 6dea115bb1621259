"""The runner contract: what a model under test gives the capture engine."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from ..errors import UsageError
from ..keys import CaptureKey, capture_order

Forward = Callable[[], Any]


class RunnerContractError(UsageError, NotImplementedError):
    """A runner lacks a method of the runner contract; the message names the runner, the method and its job."""


class GraphRunner:
    """Base class for runners; subclass it and implement :meth:`forward_for`."""

    #: Overrides the class name in file names when set.
    runner_name: Optional[str] = None

    @property
    def name(self) -> str:
        return self.runner_name or type(self).__name__

    def batch_sizes(self) -> Sequence[int]:
        raise RunnerContractError(
            f"runner {self.name} ({type(self).__name__}) does not implement batch_sizes(): a GraphRunner returns "
            f"the batch sizes to capture from it, e.g. [1, 2, 4] (docs/adapting.md)"
        )

    def variants(self) -> Sequence[Optional[str]]:
        return (None,)

    def forward_for(self, key: CaptureKey) -> Forward:
        raise RunnerContractError(
            f"runner {self.name} ({type(self).__name__}) does not implement forward_for(key): a GraphRunner returns "
            f"from it the function that runs one forward of the key on its static buffers (docs/adapting.md)"
        )

    def post_warmup(self, key: CaptureKey) -> None:
        """Called after each warmup forward; the default does nothing."""

    def capture_keys(self, rank: int = 0) -> list[CaptureKey]:
        """All keys of this runner in capture order (largest batch size first)."""
        sizes = list(dict.fromkeys(_batch_size(self.name, bs) for bs in self.batch_sizes()))
        if not sizes:
            raise ValueError(f"runner {self.name} lists no batch sizes to capture")
        variants = list(dict.fromkeys(self.variants()))
        if not variants:
            raise ValueError(f"runner {self.name} lists no variants (use [None] for the plain graph)")
        return capture_order(CaptureKey(self.name, bs, variant, rank) for bs in sizes for variant in variants)


def _batch_size(runner: str, value: Any) -> int:
    """A runner's batch size as an int (numpy integers too); ValueError naming the runner otherwise."""
    try:
        as_int = None if isinstance(value, (bool, float, str)) else int(value)
    except (TypeError, ValueError):
        as_int = None
    if as_int is None or as_int != value or as_int < 1:
        raise ValueError(f"runner {runner} lists batch size {value!r}, which is not a positive integer")
    return as_int


def default_batch_sizes(max_batch_size: int = 32) -> list[int]:
    """The serving engines' decode batch-size list shape, cut at ``max_batch_size``."""
    if max_batch_size < 1:
        raise ValueError(f"max batch size must be at least 1, got {max_batch_size}")
    sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, max(max_batch_size, 272) + 1, 16))
    return [bs for bs in sizes if bs <= max_batch_size]
