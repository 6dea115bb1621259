"""Test-only fakes built on the public ones of :mod:`pytest_graphcapture.testing`."""

from __future__ import annotations

from typing import Callable, Optional

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.testing import CallLog, FakeBackend, InjectedFault


class GpuLikeBackend(FakeBackend):
    """A FakeBackend failing from the start where told, and replaying and checking kernel evidence as a GPU does."""

    def __init__(
        self,
        log: Optional[CallLog] = None,
        *,
        fail_stage: Optional[str] = None,
        fail_key: Optional[CaptureKey] = None,
        fault: Callable[[str], BaseException] = InjectedFault,
        replay_shows_kernels: bool = False,
        kernel_evidence_required: bool = False,
    ) -> None:
        super().__init__(log)
        if fail_stage is not None:
            self.inject_fault(fail_stage, fail_key, fault)
        self.replay_shows_kernels = replay_shows_kernels
        self.kernel_evidence_required = kernel_evidence_required
