"""The adapter: your engine's decode graph runner as a pytest-graphcapture runner.

The plugin's contract (:class:`pytest_graphcapture.GraphRunner`) is four methods.  The
adapter maps them onto the engine without copying its model code, so the gate
captures exactly what the engine captures:

* ``batch_sizes()`` → the engine's capture batch sizes;
* ``variants()``    → the engine's per-batch-size graph variants (``None`` = plain graph);
* ``forward_for(key)`` → the engine's own captured body for that batch size and variant;
* ``runner_name``   → the name in trace and golden file names.

The plugin then does what the engine's ``capture()`` does: keys in descending batch
size order (``capture_order``), two warmups each, one capture; on a GPU with real
``torch.cuda.CUDAGraph`` objects in one shared memory pool on a dedicated stream.
"""

from __future__ import annotations

from typing import Optional, Sequence

from mini_engine import MiniEngineGraphRunner

from pytest_graphcapture import CaptureKey, GraphRunner
from pytest_graphcapture.engine.runner import Forward


class EngineAdapter(GraphRunner):
    """Expose a :class:`MiniEngineGraphRunner` to the ``graph_capture`` fixture."""

    runner_name = "MiniEngine"

    def __init__(self, engine: MiniEngineGraphRunner) -> None:
        self.engine = engine
        self.device = engine.device  # graph_capture() captures on the runner's device

    def batch_sizes(self) -> Sequence[int]:
        return self.engine.capture_bs

    def variants(self) -> Sequence[Optional[str]]:
        return self.engine.variants

    def forward_for(self, key: CaptureKey) -> Forward:
        bs, variant = key.batch_size, key.variant
        if bs not in self.engine.capture_bs or variant not in self.engine.variants:
            raise KeyError(f"the engine captures no graph for bs={bs} variant={variant!r}")
        return lambda: self.engine.forward_decode(bs, variant)

    def use_graphs(self, result: object, backend: object) -> None:
        """Let the engine serve decode from the graphs the plugin captured (for replay checks)."""
        for key_result in result:  # type: ignore[attr-defined]
            key = key_result.key
            self.engine.graphs[(key.batch_size, key.variant)] = lambda graph=key_result.graph: backend.replay(graph)  # type: ignore[attr-defined]
