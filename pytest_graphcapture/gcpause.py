"""Pause the cyclic garbage collector while building large acyclic JSON data.

Parsing a trace or a golden, or summarizing a profile, allocates many containers in
bursts; each burst makes the collector re-traverse everything already built (with
torch loaded, a full collection of a large heap), although JSON data cannot form
cycles.  Pausing it for the duration is a plain, large saving.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC inside the block; the previous state is always restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
