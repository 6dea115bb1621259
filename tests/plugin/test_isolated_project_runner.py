"""An isolated ``graph_capture()`` never swaps the project's runner for the embedded decoder (pytester).

In-process, ``graph_capture()`` captures the ``decode_runner`` fixture, which a project
overrides (the quickstart does) or builds through the ``pytest_graphcapture_make_runner``
hook.  Neither can run in the subprocess of an isolated capture, so such a test fails with
one line naming the option or marker, instead of checking the embedded decoder's keys.
"""

from __future__ import annotations

import pytest
from helpers import isolated_checkout, run

FIXTURE = """
import pytest

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


@pytest.fixture
def decode_runner():
    return TinyDecodeRunner([1, 2], device="cpu", config=DecoderConfig(num_layers=1, hidden_size=64))
"""

HOOK = """
from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


def pytest_graphcapture_make_runner(config, device, batch_sizes):
    return TinyDecodeRunner([1, 2], device=device, config=DecoderConfig(num_layers=1, hidden_size=64))
"""

TESTS = """
import pytest

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


def small_runner(ctx):
    return TinyDecodeRunner([1], device=ctx.device, config=DecoderConfig(num_layers=1, hidden_size=64))


def test_default(graph_capture, golden):
    golden.check(graph_capture())


@pytest.mark.graph_capture_isolated
def test_marked(graph_capture, golden):
    golden.check(graph_capture())


@pytest.mark.graph_capture_isolated
def test_factory(graph_capture, golden):
    golden.check(graph_capture(small_runner))
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    isolated_checkout(monkeypatch)
    pytester.makepyfile(test_model=TESTS)
    return pytester


def _refusals(result: pytest.RunResult) -> list[str]:
    return [
        line for line in result.stdout.lines if "an isolated capture builds its runner in a fresh subprocess" in line
    ]


@pytest.mark.parametrize(
    ("given", "named"),
    [
        (("--graph-capture-isolate=on",), "--graph-capture-isolate=on"),
        (("-o", "graph_capture_isolate=on"), "ini key graph_capture_isolate=on"),
    ],
)
def test_the_option_refuses_a_project_fixture_with_one_line_naming_it(
    project: pytest.Pytester, given: tuple[str, ...], named: str
) -> None:
    project.makeconftest(FIXTURE)
    result = run(project, "-k", "default", "--update-golden", *given)
    result.assert_outcomes(failed=1, deselected=2)
    [line] = _refusals(result)
    assert line.startswith(f"{named}: graph_capture() would capture the runner of this project's decode_runner ")
    assert "fixture (conftest.py:6), but" in line  # where the fixture is defined
    assert "Traceback" not in result.stdout.str()
    assert not (project.path / "goldens").exists(), "no golden of the embedded decoder's keys was written"


def test_the_marker_refuses_a_project_hook(project: pytest.Pytester) -> None:
    project.makeconftest(HOOK)
    result = run(project, "-k", "marked", "--update-golden")
    result.assert_outcomes(failed=1, deselected=2)
    [line] = _refusals(result)
    assert line.startswith(
        "@pytest.mark.graph_capture_isolated: graph_capture() would capture the runner of this project's "
        "pytest_graphcapture_make_runner hook (conftest.py), but"
    )
    assert not (project.path / "goldens").exists()


def test_a_factory_still_captures_in_isolation_beside_a_project_fixture(project: pytest.Pytester) -> None:
    project.makeconftest(FIXTURE)
    run(project, "-k", "factory", "--update-golden").assert_outcomes(passed=1, deselected=2)
    assert (project.path / "goldens/cpu/test_model.py/test_factory/TinyDecodeRunner_bs_1.json").is_file()
