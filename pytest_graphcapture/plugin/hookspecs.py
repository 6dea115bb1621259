"""Hooks a project implements in its ``conftest.py`` (or a plugin) to adapt the gate."""

from __future__ import annotations

from typing import Any, Optional

import pluggy
import pytest

# Hooks live in pytest's own namespace, so projects implement them like any pytest hook.
_hookspec = pluggy.HookspecMarker("pytest")


@_hookspec(firstresult=True)
def pytest_graphcapture_platform(config: pytest.Config, device: Any) -> Optional[str]:
    """Return the platform key goldens are stored under (e.g. ``cuda-sm90``).

    Called once per session with the capture device.  Return ``None`` to keep the
    detected key.  Use it to share goldens between close GPUs (``cuda-sm90`` for
    both H100 and H200) or to split one key by driver version.
    """


@_hookspec(firstresult=True)
def pytest_graphcapture_normalize_kernel(config: pytest.Config, name: str, level: str) -> Optional[str]:
    """Return the normalized form of kernel ``name`` at ``level`` (``exact``, ``name`` or ``family``).

    Return ``None`` to use the built-in normalization.  Called by ``golden.check``
    for every kernel name of the captured summary and of its golden before they
    are compared (and before a golden is written), so two spellings of one kernel
    can share a golden.  The result must be idempotent: normalizing a normalized
    name returns it unchanged.
    """


@_hookspec
def pytest_graphcapture_postprocess_summary(config: pytest.Config, summary: dict) -> None:
    """Edit a summary dict in place before it is compared or written.

    Use it to drop noise that is not a regression for your project (a logging
    kernel, an op that only shows up on some drivers).  Every implementation is
    called in turn.
    """


@_hookspec(firstresult=True)
def pytest_graphcapture_make_runner(config: pytest.Config, device: Any, batch_sizes: list) -> Any:
    """Return the runner the ``decode_runner`` fixture provides.

    Called when the default ``decode_runner`` fixture is used; return ``None`` to
    get the embedded :class:`~pytest_graphcapture.engine.decode_model.TinyDecodeRunner`.
    Overriding the ``decode_runner`` fixture in a ``conftest.py`` also works.

    ``batch_sizes`` is the run's ``--graph-capture-batch-sizes`` selection (None when it
    selects none): which sizes the plugin captures from the runner returned, not what to
    build.  Build the runner as for a full run (static buffers sized from its own largest
    size) so a narrowed run captures each selected size's graph as a full run does.
    """
