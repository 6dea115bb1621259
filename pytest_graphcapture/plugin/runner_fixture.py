"""The ``decode_runner`` fixture: the runner ``graph_capture()`` captures when given none.

By default the embedded tiny decoder, built for its full list of batch sizes: a run
narrowed by ``--graph-capture-batch-sizes`` captures only the sizes asked for, from the
same runner a full run captures, so each size's graph is the full run's.  A project
overrides the fixture in its ``conftest.py`` or implements the
``pytest_graphcapture_make_runner`` hook.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..errors import UsageError
from .stash import CAPTURE


@pytest.fixture
def decode_runner(request: pytest.FixtureRequest) -> Any:
    """The runner ``graph_capture`` captures by default: the embedded tiny decoder.

    It is built for all its batch sizes whatever ``--graph-capture-batch-sizes`` selects
    (the capture takes only the selected ones), so its static buffers, and with them
    every graph, are those of a full run.  Override this fixture in your ``conftest.py``
    to capture your own runner, or implement the ``pytest_graphcapture_make_runner`` hook.
    """
    state = request.config.stash[CAPTURE]
    try:
        device = state.device
    except UsageError as exc:
        pytest.fail(str(exc), pytrace=False)
    runner = request.config.hook.pytest_graphcapture_make_runner(
        config=request.config, device=device, batch_sizes=state.batch_sizes
    )
    if runner is None:
        from ..engine.decode_model import TinyDecodeRunner

        runner = TinyDecodeRunner(device=device)
    return runner
