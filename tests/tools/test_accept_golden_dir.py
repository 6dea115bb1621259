"""``graphcapture accept`` finds the golden tree the plugin uses, by the plugin's one rule for relative paths.

Command line and environment: relative to where the command starts; the ini key: relative to the ini
file's folder; the default: ``goldens`` in the rootdir pytest finds from there.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fake_project, run

from pytest_graphcapture.golden import store
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.model import Summary
from pytest_graphcapture.tools.cli import main

FOLDER = "cpu/tests/test_x.py/test_y"


def _accept(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["accept", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _harvest(root: Path) -> Path:
    """A harvest folder holding one golden, ``Eng`` at bs=1."""
    summary = Summary(key=CaptureKey("Eng", 1), platform="cpu", kernels=[], ops=[]).to_dict()
    path = root / "harvest" / FOLDER / "Eng_bs_1.json"
    path.parent.mkdir(parents=True)
    path.write_text(store.dumps(summary))
    return root / "harvest"


def _harvested_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ini: str) -> Path:
    """A project whose goldens were written, then a change harvested under ``harvest/``; returns the harvest."""
    fake_project(pytester, monkeypatch, "def test_decode(fake_capture, golden):\n    golden.check(fake_capture())\n")
    pytester.makeini(ini)
    (pytester.path / "sub").mkdir()
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    run(pytester, "--golden-out", "harvest").assert_outcomes(failed=1)
    return pytester.path / "harvest"


@pytest.mark.parametrize(
    ("ini", "tree"),
    [
        pytest.param("[pytest]\ngolden_dir = ci/goldens\n", "ci/goldens", id="ini-key"),
        pytest.param("[pytest]\n", "goldens", id="default"),
    ],
)
def test_accept_from_a_subfolder_writes_the_tree_pytest_reads(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, ini: str, tree: str
) -> None:
    harvest = _harvested_project(pytester, monkeypatch, ini)
    assert (pytester.path / tree).is_dir()
    monkeypatch.chdir(pytester.path / "sub")
    code, out, err = _accept(capsys, str(harvest))
    assert code == 0, err
    assert out.splitlines()[-1] == f"accepted into {pytester.path / tree}: 0 created, 3 changed, 0 unchanged"
    assert not (pytester.path / "sub" / "goldens").exists()
    monkeypatch.chdir(pytester.path)
    run(pytester).assert_outcomes(passed=1)  # pytest now reads the accepted goldens


def test_ini_key_in_pyproject_is_relative_to_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.pytest.ini_options]\ngolden_dir = "gold"\n')
    (tmp_path / "a" / "b").mkdir(parents=True)
    harvest = _harvest(tmp_path)
    monkeypatch.delenv("GRAPH_CAPTURE_GOLDEN_DIR", raising=False)
    monkeypatch.chdir(tmp_path / "a" / "b")
    code, out, err = _accept(capsys, str(harvest), "--dry-run")
    assert code == 0, err
    assert out.splitlines()[-1] == f"dry run: 1 created, 0 changed, 0 unchanged in {tmp_path / 'gold'}; nothing written"


@pytest.mark.parametrize("how", ["option", "environment"])
def test_a_typed_golden_dir_is_relative_to_where_the_command_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, how: str
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ngolden_dir = from_ini\n")
    (tmp_path / "sub").mkdir()
    harvest = _harvest(tmp_path)
    monkeypatch.chdir(tmp_path / "sub")
    args = [str(harvest), "--dry-run"]
    if how == "option":
        monkeypatch.delenv("GRAPH_CAPTURE_GOLDEN_DIR", raising=False)
        args += ["--golden-dir", "mine"]
    else:
        monkeypatch.setenv("GRAPH_CAPTURE_GOLDEN_DIR", "mine")
    code, out, err = _accept(capsys, *args)
    assert code == 0, err
    assert out.splitlines()[-1] == "dry run: 1 created, 0 changed, 0 unchanged in mine; nothing written"


def test_an_unreadable_ini_file_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.pytest.ini_options\n")
    harvest = _harvest(tmp_path)
    monkeypatch.delenv("GRAPH_CAPTURE_GOLDEN_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = _accept(capsys, str(harvest), "--dry-run")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "cannot read the pytest configuration" in err and "internal error" not in err
