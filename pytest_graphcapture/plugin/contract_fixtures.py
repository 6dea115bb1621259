"""Fixtures for contract-testing your own capture code on a CPU-only machine.

``fake_backend`` (a :class:`~pytest_graphcapture.testing.FakeBackend` and its call log),
``recording_profiler`` (steps land in the same log) and ``capture_contract`` (a
:class:`~pytest_graphcapture.testing.CaptureContract` over both).  torch is imported
when a test requests one of them, never when the plugin loads.
"""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def fake_backend() -> Any:
    """A FakeBackend recording every call in ``fake_backend.log``; ``fake_backend.inject_fault(stage, key)`` fails one stage."""
    from ..testing import CallLog, FakeBackend

    return FakeBackend(CallLog())


@pytest.fixture
def recording_profiler(fake_backend: Any) -> Any:
    """A RecordingProfiler whose ``step()`` calls land in ``fake_backend.log``."""
    from ..testing import RecordingProfiler

    return RecordingProfiler(fake_backend.log)


@pytest.fixture
def capture_contract(fake_backend: Any, recording_profiler: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Checks the capture step contract: ``check_runner(runner)`` or ``check_capture(fn, forward=..., key=...)``.

    Per key two warmups then the capture, a profiler step after each and none inside
    the graph, largest batch size first, one trace per key; a failure shows the
    expected-vs-actual call listing.
    """
    from ..testing import CaptureContract

    return CaptureContract(fake_backend, recording_profiler, tmp_path_factory.mktemp("capture-contract"))
