"""Capture keys (runner, batch size, variant, rank), their messages and batch-size lists, and file-name-safe names.

Every file of a graph is named from its key (:mod:`.naming`), never from a position in a list.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import re
import unicodedata
from dataclasses import dataclass
from typing import Any, Hashable, Iterable, Optional

_UNSAFE = re.compile(r"[^A-Za-z0-9._+=-]+")
MAX_NAME_LENGTH = 80


def safe_name(raw: str, *, max_length: int = MAX_NAME_LENGTH) -> str:
    """``raw`` as one path component that cannot leave its directory: ASCII ``[A-Za-z0-9._+=-]``, no leading dot.

    When anything changed, or the name was cut, a short hash of the original keeps distinct names distinct."""
    raw = str(raw)
    folded = unicodedata.normalize("NFKD", raw).encode("ascii", "ignore").decode("ascii")
    cleaned = _UNSAFE.sub("_", folded).strip("_")
    cleaned = cleaned.lstrip(".") or "_"
    changed = cleaned != raw
    if len(cleaned) > max_length:
        cleaned = cleaned[: max_length - 9]
        changed = True
    if changed:
        digest = hashlib.sha1(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        cleaned = f"{cleaned}-{digest}"
    return cleaned


#: Batch size of a key read from a trace that does not say its batch size (an eager or
#: replay-only trace, a trace someone sent): shown as ``bs=?``.  Runners never capture it.
UNKNOWN_BATCH_SIZE = 0


def is_int(value: object) -> bool:
    """A JSON integer: ``int`` but not ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def _variant_text(variant: Any) -> Optional[str]:
    """A variant's text for files, labels and summaries: None stays None, an enum member is its name, else ``str()``."""
    if variant is None:
        return None
    if isinstance(variant, enum.Enum):
        return variant.name
    return str(variant)


def _variant_shown(variant: Any) -> str:
    """A variant in messages; one spelled like the plain graph (``None``) is quoted."""
    text = _variant_text(variant) or ""
    return f'"{text}"' if text == "None" else text


@functools.total_ordering
@dataclass(frozen=True)
class CaptureKey:
    """What was captured: runner, batch size (or UNKNOWN_BATCH_SIZE), variant (None, or any hashable the runner gets
    back in ``forward_for``) and rank. A key has one or more graphs; keys order by runner, size, variant text, rank."""

    runner: str
    batch_size: int
    variant: Optional[Hashable] = None
    rank: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) or self.batch_size < 0:
            raise ValueError(f"batch size must be a positive integer, got {self.batch_size!r}")
        if not isinstance(self.rank, int) or self.rank < 0:
            raise ValueError(f"rank must be a non-negative integer, got {self.rank!r}")
        if self.variant is not None:
            try:
                hash(self.variant)
            except TypeError:
                raise ValueError(f"a variant must be hashable, got {self.variant!r}") from None
            if not _variant_text(self.variant):
                raise ValueError(f"a variant needs a non-empty string form, got {self.variant!r}")

    @property
    def variant_name(self) -> Optional[str]:
        """The variant's string form (:func:`_variant_text`): what files and summaries hold."""
        return _variant_text(self.variant)

    def _order(self) -> tuple:
        return (self.runner, self.batch_size, self.variant is not None, self.variant_name or "", self.rank)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CaptureKey):
            return NotImplemented
        return self._order() < other._order()

    def to_dict(self) -> dict:
        return {"runner": self.runner, "batch_size": self.batch_size, "variant": self.variant_name, "rank": self.rank}

    @classmethod
    def from_dict(cls, data: dict) -> "CaptureKey":
        return cls(str(data["runner"]), int(data["batch_size"]), data.get("variant"), int(data.get("rank", 0)))

    def __str__(self) -> str:
        variant = f", variant={_variant_shown(self.variant)}" if self.variant is not None else ""
        return f"{self.runner}[bs={batch_size_text(self.batch_size)}{variant}, rank={self.rank}]"


def batch_size_text(batch_size: int) -> str:
    """How messages show a batch size: the number, or ``?`` when unknown."""
    return "?" if batch_size == UNKNOWN_BATCH_SIZE else str(batch_size)


#: The largest batch size accepted: far above what engines capture, far below an allocation that cannot succeed.
MAX_BATCH_SIZE = 65536


def parse_batch_sizes(text: str) -> list[int]:
    """``"8,4,2"`` → ``[8, 4, 2]`` in the order given; ValueError saying the problem (callers name the option).

    ASCII digits only (``int()`` would also take ``1_0`` and other scripts' digits), each from 1 to MAX_BATCH_SIZE.
    """
    sizes: list[int] = []
    for part in str(text).replace(" ", "").split(","):
        if not part:
            continue
        if not (part.isascii() and part.isdigit()):
            raise ValueError(f"{part!r} is not an integer batch size (expected e.g. 1,2,4)")
        size = int(part)
        if size < 1:
            raise ValueError(f"batch size {size} must be at least 1")
        if size > MAX_BATCH_SIZE:
            raise ValueError(f"batch size {size} is larger than the largest accepted, {MAX_BATCH_SIZE}")
        sizes.append(size)
    if not sizes:
        raise ValueError("no batch sizes given (expected e.g. 1,2,4)")
    return sizes


def key_label(key: CaptureKey, *, explicit_rank: bool = False, runner: bool = False) -> str:
    """How messages name a key: ``[runner ]bs=4``, with ``variant=`` when set, ``rank=`` when not 0 or ``explicit_rank``."""
    label = f"{key.runner} " * runner + f"bs={batch_size_text(key.batch_size)}"
    if key.variant is not None:
        label += f" variant={_variant_shown(key.variant)}"
    if key.rank or explicit_rank:
        label += f" rank={key.rank}"
    return label


def capture_order(keys: Iterable[CaptureKey]) -> list[CaptureKey]:
    """Keys in the order engines capture them: largest batch size first (smaller graphs reuse the larger ones' pool).

    Stable: within a size, keys keep the runner's declared variant order."""
    return sorted(keys, key=lambda k: (-k.batch_size, k.rank, k.runner))
