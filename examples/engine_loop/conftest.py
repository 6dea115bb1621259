"""The example engine of ``../adapter`` (``mini_engine.py``), gated through its own capture loop.

One engine, two ways to gate it: ``../adapter`` wraps it in a runner the plugin captures;
this folder hands the plugin the engine's own ``capture()`` loop, with no adapter at all.
"""

import sys
from pathlib import Path

import pytest

ADAPTER_EXAMPLE = str(Path(__file__).resolve().parent.parent / "adapter")
if ADAPTER_EXAMPLE not in sys.path:
    sys.path.insert(0, ADAPTER_EXAMPLE)  # the engine lives beside the adapter example

from mini_engine import MiniEngineGraphRunner  # noqa: E402

from pytest_graphcapture.plugin import graph_capture_config  # noqa: E402


@pytest.fixture
def engine(request: pytest.FixtureRequest) -> MiniEngineGraphRunner:
    """A fresh engine on the device the gate captures on (``--graph-capture-device``, auto: the GPU when there is one)."""
    return MiniEngineGraphRunner(device=graph_capture_config(request.config).device)
