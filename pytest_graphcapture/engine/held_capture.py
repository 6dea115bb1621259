"""A capture forward that holds its key's graphs: the pieces an engine captures inside its forward.

Besides a graph that wraps one forward, an engine may capture several graphs *inside*
its forward (vLLM's PIECEWISE mode: one graph per piece, the attention between pieces
run eagerly).  When a key's warmups are done, the gate lets its next forward run as a
possible capture: the graphs begun inside it are that key's, in capture order.  Each
graph's capture is marked in the profile with a :data:`~..summary.split.PIECE_MARK`
range, so the key's summary is split into one graph per piece even where the trace
has no capture calls (the CPU stand-ins).  What runs between the pieces belongs to no
graph and is left out of the key, as in an engine's own capture traces.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional

import torch

from ..keys import CaptureKey
from ..summary.files import PIECE_MARK


class HeldCapture:
    """The capture forward of ``key`` running now, and the graphs begun inside it so far."""

    def __init__(self, key: CaptureKey) -> None:
        self.key = key
        self.graphs: list[Any] = []
        #: The graph whose capture is under way (None between pieces).
        self.open: Optional[Any] = None
        #: The exception being handled where the open graph began (an engine may capture inside an ``except``).
        self.handling: Optional[BaseException] = None
        self.started = 0.0
        self.memory: Optional[tuple[int, int]] = None
        self._range: Optional[Any] = None

    def begin(self, graph: Any) -> None:
        """A graph's capture begins inside the forward: its range opens in the profile."""
        if not self.graphs and self.open is None:
            self.started = time.perf_counter()
        self.open, self.handling = graph, sys.exc_info()[1]
        self._range = torch.profiler.record_function(PIECE_MARK)
        self._range.__enter__()

    def end(self, graph: Any, *, kept: bool) -> None:
        """The open graph's capture ended (``kept``: it ended well, so it is one of the key's graphs)."""
        self.close_range()
        self.open = None
        if kept:
            self.graphs.append(graph)

    def close_range(self) -> None:
        """Close the open graph's range (a forward that raised during a capture leaves it open)."""
        opened, self._range = self._range, None
        if opened is not None:
            opened.__exit__(None, None, None)


__all__ = ["HeldCapture"]
