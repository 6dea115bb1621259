"""The CUDA allocator's history during capture, written as one snapshot per runner and rank.

``torch.cuda.memory._record_memory_history`` records every allocation with its
stack; ``_dump_snapshot`` writes it as a pickle that PyTorch's memory viz
(``pytorch.org/memory_viz``) opens.  A reference engine dumps it to one fixed
name in the working directory, so ranks overwrite each other; here the file is
named by runner and rank (:func:`~pytest_graphcapture.naming.memory_snapshot_path`)
and written atomically into the trace directory.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterator, Optional, Protocol

import torch

from .._io import write_via

#: Allocator events kept (the newest win); a decode capture stays far below this.
MAX_ENTRIES = 200_000


class MemoryHistory(Protocol):
    """What records the allocator's history: start, dump to a file, stop."""

    def start(self) -> None: ...

    def dump(self, path: Path) -> None: ...

    def stop(self) -> None: ...


class TorchMemoryHistory:
    """The CUDA caching allocator's own history recorder."""

    def start(self) -> None:
        torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES)

    def dump(self, path: Path) -> None:
        torch.cuda.memory._dump_snapshot(str(path))

    def stop(self) -> None:
        torch.cuda.memory._record_memory_history(enabled=None)


@contextlib.contextmanager
def recording(history: Optional[MemoryHistory], path: Path) -> Iterator[list]:
    """Record the allocator's history inside the block; on success write it to ``path``.

    Yields a list that holds ``path`` once the snapshot is written.  ``history`` None
    (no CUDA allocator) records nothing.  On failure nothing is written, and the
    recorder is always stopped.
    """
    written: list = []
    if history is None:
        yield written
        return
    history.start()
    try:
        yield written
        write_via(path, history.dump)
        written.append(path)
    finally:
        history.stop()
