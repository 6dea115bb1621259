"""Traces in sglang's and vLLM's layouts, built once per session from the shared real sglang capture."""

from __future__ import annotations

import contextlib
import functools
import io
import shutil
from pathlib import Path

import pytest
from helpers import built_engine_traces, engine_capture, engine_traces

from pytest_graphcapture.golden.store import CI_VARIABLES
from pytest_graphcapture.tools.cli import main


@pytest.fixture(scope="session")
def make_traces():
    """The example script's module (skips with where to find the real traces when they are absent)."""
    return engine_traces()


@pytest.fixture(scope="session")
def capture(make_traces):
    """The real capture window, read once per process, three of its 36 decoder layers kept (helpers.engine_capture)."""
    return engine_capture()


@pytest.fixture(scope="session")
def built(make_traces, tmp_path_factory):
    """``build(layout, **changes) -> folder``: traces of ``layout``, built once per process in a folder of their own."""
    return functools.partial(built_engine_traces, tmp_path_factory)


@pytest.fixture(scope="module")
def baseline(built, tmp_path_factory):
    """The golden tree ``--update`` writes from the vLLM-layout traces, written once for the module."""
    golden = tmp_path_factory.mktemp("baseline") / "goldens"
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        for name in CI_VARIABLES:  # outside any test, so tests/conftest.py has not taken CI's variables away
            patch.delenv(name, raising=False)
        code = main(["check", str(built("vllm")), "--golden-dir", str(golden), "--update"])
    assert code == 0, out.getvalue()
    return golden


@pytest.fixture
def goldens(tmp_path, baseline):
    """A copy of the baseline golden tree of its own for each test (tests change and update it)."""
    return Path(shutil.copytree(baseline, tmp_path / "goldens"))
