"""The fixtures users request: ``decode_runner``, ``graph_capture`` and ``golden``, one module each.

:mod:`.runner_fixture` (the runner captured by default), :mod:`.capture_fixture`
(capturing) and :mod:`.golden_fixture` (comparing with goldens); the plugin module
registers them from here.
"""

from __future__ import annotations

from .capture_fixture import GraphCapture, graph_capture
from .golden_fixture import GoldenChecker, golden
from .runner_fixture import decode_runner
from .stash import CAPTURE, GOLDEN

__all__ = ["CAPTURE", "GOLDEN", "GoldenChecker", "GraphCapture", "decode_runner", "golden", "graph_capture"]
