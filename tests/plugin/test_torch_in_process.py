"""The plugin in users' own test setups: pytester runs in-process, warnings as errors, no numpy."""

from __future__ import annotations

import pytest
from helpers import run, use_this_checkout

# A user's project testing its own conftest with pytester: the inner run captures (its
# profiler start is the first in the process), then the outer test captures too.  This
# project has no workaround of its own: the plugin must keep the second capture working.
USER_CONFTEST = """
pytest_plugins = ["pytester"]
"""

USER_TEST = '''
from pytest_graphcapture.testing import FakeRunner

INNER = """
from pytest_graphcapture.testing import FakeRunner

def test_inner(graph_capture):
    result = graph_capture(FakeRunner((1, 2)), trace="off")
    assert len(result) == 2 and all(r.summary is not None for r in result)
"""


def test_capture_after_an_inline_pytester_run(pytester, graph_capture):
    pytester.makepyfile(test_inner=INNER)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
    result = graph_capture(FakeRunner((1, 2, 4)), trace="off")
    assert len(result) == 3 and all(r.summary is not None for r in result)
'''


@pytest.mark.slow
def test_capturing_after_an_in_process_pytester_run_works(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_this_checkout(monkeypatch)
    pytester.makepyfile(conftest=USER_CONFTEST, test_user=USER_TEST)  # no workaround of its own
    result = run(pytester, subprocess=True, timeout=600)
    assert "Only a single TORCH_LIBRARY" not in result.stdout.str()
    result.assert_outcomes(passed=1)


NUMPY_MISSING = 'raise ModuleNotFoundError("No module named \'numpy\'", name="numpy")\n'

TEST_WITH_TORCH = """
import torch
from pytest_graphcapture.testing import FakeRunner


def test_capture(graph_capture):
    result = graph_capture(FakeRunner((1, 2)), trace="off")
    assert len(result) == 2 and torch.ones(2).sum() == 2
"""


@pytest.mark.slow
def test_warnings_as_errors_without_numpy_cannot_break_torch(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch warns "Failed to initialize NumPy" while importing; as an error it would abort torch half-way."""
    hidden = pytester.mkdir("hidden")
    (hidden / "numpy").mkdir()
    (hidden / "numpy" / "__init__.py").write_text(NUMPY_MISSING)
    use_this_checkout(monkeypatch)
    import os

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hidden), os.environ["PYTHONPATH"]]))
    pytester.makeconftest("import torch\n")  # a user's conftest importing torch first
    pytester.makepyfile(test_user=TEST_WITH_TORCH)
    result = run(pytester, "-W", "error", subprocess=True, timeout=600)
    assert result.ret == 0, result.stdout.str()[-3000:]
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["graph-capture: torch warned while being imported *Failed to initialize NumPy*"])
