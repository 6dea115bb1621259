"""A failing check of a torch.compile'd runner reports its own logs, not torch's structured compile trace (pytester).

pytest attaches its log capture to every non-propagating logger, torch's ``torch.__trace``
(always at DEBUG, meant for ``TORCH_TRACE`` files) among them; without the plugin's filter
each compilation adds dozens of empty ``DEBUG torch.__trace`` lines to "Captured log call".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import isolated_checkout, run

CONFTEST = """
import pytest
import torch

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


class CompiledRunner(TinyDecodeRunner):
    # The eager backend: dynamo traces and logs each compilation like inductor does, without compiling C++.
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.model = torch.compile(self.model, dynamic=False, backend="eager")


@pytest.fixture
def decode_runner():
    return CompiledRunner([1, 2], device="cpu", config=DecoderConfig(num_layers=1, hidden_size=64))
"""

TEST = """
import logging

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def test_decode(graph_capture, golden):
    logging.getLogger("myproject").warning("the project's own record")
    golden.check(graph_capture())  # no goldens yet: fails
"""


@pytest.mark.slow
def test_the_failure_report_holds_the_projects_logs_and_no_torch_trace_records(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    isolated_checkout(monkeypatch)  # torch registers its loggers once per process: the run is a subprocess
    trace_dir = pytester.path / "torch_trace"
    monkeypatch.setenv("TORCH_TRACE", str(trace_dir))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_model=TEST)
    result = run(pytester, "--log-level=DEBUG", subprocess=True, timeout=600)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*graph capture of CompiledRunner has no golden for bs=1, bs=2*",
            "*- Captured log call -*",
            "WARNING  myproject:test_model.py:* the project's own record",
        ]
    )
    assert "torch.__trace" not in result.stdout.str()
    # torch's own trace output is not touched: TORCH_TRACE still gets the compile records.
    logs = list(Path(trace_dir).glob("*.log"))
    assert logs and any('"dynamo_start"' in p.read_text() for p in logs)
