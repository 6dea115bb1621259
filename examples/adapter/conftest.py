"""Point the gate at the engine: override the plugin's ``decode_runner`` fixture.

Every test in this folder that calls ``graph_capture()`` without a runner now captures
the engine's decode graphs.  ``graph_capture_config(...).device`` honours
``--graph-capture-device`` (auto: the GPU when torch sees one, else CPU).
"""

import pytest
from adapter import EngineAdapter
from mini_engine import MiniEngineGraphRunner

from pytest_graphcapture.plugin import graph_capture_config


@pytest.fixture
def decode_runner(request: pytest.FixtureRequest) -> EngineAdapter:
    device = graph_capture_config(request.config).device
    return EngineAdapter(MiniEngineGraphRunner(device=device))
