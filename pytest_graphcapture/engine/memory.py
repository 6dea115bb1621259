"""The CUDA allocator's history during capture, written as one snapshot per runner and rank.

``torch.cuda.memory._record_memory_history`` records every allocation with its
stack; ``_dump_snapshot`` writes it as a pickle that PyTorch's memory viz
(``pytorch.org/memory_viz``) opens.  A reference engine dumps it to one fixed
name in the working directory, so ranks overwrite each other; here the file is
named by runner and rank (:func:`~pytest_graphcapture.naming.memory_snapshot_path`)
and written atomically into the trace directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Protocol

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


class Recording:
    """One capture phase's recording: :meth:`finish` writes the snapshot, :meth:`abandon` drops it.

    ``history`` None (no CUDA allocator, or no snapshot asked for) records nothing.
    The recorder is stopped either way; a failed capture writes no file.
    """

    def __init__(self, history: Optional[MemoryHistory], path: Path) -> None:
        self.history, self.path = history, path
        if history is not None:
            history.start()

    def finish(self) -> Optional[Path]:
        """Write the snapshot to ``path`` (atomically) and stop; the path, or None when nothing was recorded."""
        history, self.history = self.history, None
        if history is None:
            return None
        try:
            write_via(self.path, history.dump)
        finally:
            history.stop()
        return self.path

    def abandon(self) -> None:
        """Stop recording without writing anything (the capture failed)."""
        history, self.history = self.history, None
        if history is not None:
            history.stop()
