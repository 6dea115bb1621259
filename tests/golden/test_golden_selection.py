"""Goldens of keys a selection option left out are not unused: never reported, never deleted (pytester, real captures).

``--graph-capture-batch-sizes`` (or its variable / ini key) narrows which of a runner's
batch sizes are captured, as ``-k`` narrows which tests run; the goldens of the sizes
it left out were not checked because nobody asked, not because they are stale.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import isolated_checkout, run

CONFTEST = """
import pytest

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


@pytest.fixture
def decode_runner():
    return TinyDecodeRunner([1, 2, 4, 8], device="cpu", config=DecoderConfig(num_layers=1, hidden_size=64))
"""

TEST = """
def test_decode(graph_capture, golden):
    golden.check(graph_capture())
"""

FOLDER = "goldens/cpu/test_model.py/test_decode"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    isolated_checkout(monkeypatch)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_model=TEST)
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    return pytester


def _tree(root: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((root / FOLDER).iterdir())}


def _report(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    out = pytester.path / "report.json"
    result = run(pytester, *args, "--graph-capture-json", str(out))
    return result, json.loads(out.read_text())


def _stale_golden(root: Path, batch_size: int) -> str:
    """A golden of a runner the test no longer captures, at ``batch_size``: truly unused."""
    data = json.loads((root / FOLDER / f"TinyDecodeRunner_bs_{batch_size}.json").read_text())
    data["key"]["runner"] = "Renamed"
    (root / FOLDER / f"Renamed_bs_{batch_size}.json").write_text(json.dumps(data))
    return f"cpu/test_model.py/test_decode/Renamed_bs_{batch_size}.json"


def test_batch_sizes_option_neither_reports_nor_deletes_the_goldens_of_other_sizes(project: pytest.Pytester) -> None:
    before = _tree(project.path)
    assert sorted(before) == [f"TinyDecodeRunner_bs_{bs}.json" for bs in (1, 2, 4, 8)]
    result, data = _report(project, "--graph-capture-batch-sizes=2,4")
    result.assert_outcomes(passed=1)
    assert data["unused"] == [] and "unused: " not in result.stdout.str()
    assert data["counts"]["cpu"]["checked"] == 2

    result, data = _report(project, "--graph-capture-batch-sizes=2,4", "--update-golden")
    result.assert_outcomes(passed=1)
    assert data["deleted"] == [] and data["unused"] == []
    assert _tree(project.path) == before, "the goldens of bs=1 and bs=8 were kept, byte for byte"

    # A golden the selection did ask for and nothing used is still unused, and --update-golden deletes it;
    # one of a size the selection left out stays.
    wanted, left_out = _stale_golden(project.path, 2), _stale_golden(project.path, 8)
    result, data = _report(project, "--graph-capture-batch-sizes=2,4")
    assert [f["path"] for f in data["unused"]] == [wanted]
    result, data = _report(project, "--graph-capture-batch-sizes=2,4", "--update-golden")
    assert [f["path"] for f in data["deleted"]] == [wanted]
    assert (project.path / "goldens" / left_out).is_file()


def test_the_variable_and_the_ini_key_select_alike(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _tree(project.path)
    monkeypatch.setenv("GRAPH_CAPTURE_BATCH_SIZES", "2,4")
    for where in ("environment", "ini"):
        result, data = _report(project, "--update-golden")
        result.assert_outcomes(passed=1)
        assert data["counts"]["cpu"]["checked"] == 2, where
        assert data["deleted"] == [] and data["unused"] == [], where
        assert _tree(project.path) == before, where
        monkeypatch.delenv("GRAPH_CAPTURE_BATCH_SIZES", raising=False)
        project.makeini("[pytest]\ngraph_capture_batch_sizes = 2,4\n")
