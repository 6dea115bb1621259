"""Traces in sglang's and vLLM's layouts, built once per session from the shared real sglang capture."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import engine_traces


@pytest.fixture(scope="session")
def make_traces():
    """The example script's module (skips with where to find the real traces when they are absent)."""
    return engine_traces()


@pytest.fixture(scope="session")
def capture(make_traces):
    """The real capture window, read once."""
    return make_traces.Capture(make_traces.SOURCE)


@pytest.fixture(scope="session")
def built(make_traces, capture, tmp_path_factory):
    """``build(layout, **changes) -> folder``: traces of ``layout`` (cached), in a fresh folder per distinct request."""
    cache: dict = {}

    def build(layout: str, **changes) -> Path:
        key = (layout, tuple(sorted(changes.items())))
        if key not in cache:
            folder = tmp_path_factory.mktemp(layout)
            make_traces.build(layout, folder, capture=capture, **changes)
            cache[key] = folder
        return cache[key]

    return build
