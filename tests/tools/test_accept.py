"""``graphcapture accept``: harvested goldens brought into the golden tree, checked first, never half-applied."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import fake_project, run

from pytest_graphcapture import _io
from pytest_graphcapture.errors import GoldenError
from pytest_graphcapture.golden import store
from pytest_graphcapture.golden.store import LOCK_NAME, GoldenLock
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.model import Summary
from pytest_graphcapture.tools.cli import main

FOLDER = "cuda-sm90/tests/test_x.py/test_y"


def _summary(bs: int, *, extra: bool = False, platform: str = "cuda-sm90") -> dict:
    kernels = [{"name": "gemm", "kind": "kernel", "count": 2}]
    if extra:
        kernels.append({"name": "relu", "kind": "kernel", "count": 1})
    ops = [{"name": "aten::mm", "input_dims": [[bs, 64]], "input_types": ["float"], "count": 2}]
    return Summary(key=CaptureKey("Eng", bs), platform=platform, kernels=kernels, ops=ops).to_dict()


def _write(root: Path, rel: str, data: dict) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(store.dumps(data))
    return path


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def trees(tmp_path: Path) -> tuple[Path, Path]:
    goldens, harvest = tmp_path / "goldens", tmp_path / "harvest"
    _write(goldens, f"{FOLDER}/Eng_bs_1.json", _summary(1))
    _write(goldens, f"{FOLDER}/Eng_bs_2.json", _summary(2))
    _write(harvest, f"{FOLDER}/Eng_bs_1.json", _summary(1))  # unchanged
    _write(harvest, f"{FOLDER}/Eng_bs_2.json", _summary(2, extra=True))  # changed
    _write(harvest, f"{FOLDER}/Eng_bs_4.json", _summary(4))  # created
    return goldens, harvest


def _main(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_dry_run_then_accept_created_changed_unchanged(trees: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    goldens, harvest = trees
    before = _tree(goldens)
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens), "--dry-run")
    assert code == 0 and err == ""
    assert out.splitlines() == [
        f"unchanged {FOLDER}/Eng_bs_1.json",
        f"changed   {FOLDER}/Eng_bs_2.json",
        "    kernels: 1 added",
        "    + relu ×1",
        f"created   {FOLDER}/Eng_bs_4.json",
        f"dry run: 1 created, 1 changed, 1 unchanged in {goldens}; nothing written",
    ]
    assert _tree(goldens) == before
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
    assert code == 0 and out.splitlines()[-1] == f"accepted into {goldens}: 1 created, 1 changed, 1 unchanged"
    assert _tree(goldens) == {k: v for k, v in _tree(harvest).items()}
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
    assert code == 0 and out.splitlines()[-1].endswith("0 created, 0 changed, 3 unchanged")


def test_only_pattern(trees: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    goldens, harvest = trees
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens), "--only", "*_bs_4.json")
    assert code == 0 and out.splitlines() == [
        f"created   {FOLDER}/Eng_bs_4.json",
        f"accepted into {goldens}: 1 created, 0 changed, 0 unchanged",
    ]
    assert store.read_golden(goldens / FOLDER / "Eng_bs_2.json").kernels == [
        {"name": "gemm", "kind": "kernel", "count": 2}
    ]
    code, _, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens), "--only", "rocm*")
    assert code == 2 and "no harvested goldens matching --only 'rocm*'" in err


def test_files_outside_the_layout_or_not_summaries_are_refused_by_name(
    trees: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    goldens, harvest = trees
    _write(harvest, "Eng_bs_8.json", _summary(8))  # not below <platform>/<test path>/<test>/
    _write(harvest, f"rocm-gfx942/{FOLDER[10:]}/Eng_bs_8.json", _summary(8))  # platform folder mismatch
    _write(harvest, f"{FOLDER}/Eng_bs_16.json", _summary(8))  # name says bs 16, summary bs 8
    (harvest / FOLDER / "Eng_bs_32.json").write_text('{"schema_version": 1, "key": ')
    (harvest / FOLDER / "Eng_bs_64.json").write_text('{"schema_version": 1}')
    (harvest / FOLDER / "report.md").write_text("# report\n")
    _write(harvest, f"{FOLDER}/Eng_bs_0.json", {**_summary(1), "key": {**_summary(1)["key"], "batch_size": 0}})
    before = _tree(goldens)
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert lines[0] == "graphcapture accept: error: refusing to accept 7 of 10 files (nothing written):"
    problems = {line.split(": ", 1)[0].strip(): line.split(": ", 1)[1] for line in lines[1:]}
    assert problems == {
        f"{harvest}/Eng_bs_8.json": "not in the golden layout <platform>/<test file>/<test>/<runner>_bs_<bs>.json",
        f"{harvest}/rocm-gfx942/tests/test_x.py/test_y/Eng_bs_8.json": (
            "sits under platform folder 'rocm-gfx942' but holds a summary of platform 'cuda-sm90'"
        ),
        f"{harvest}/{FOLDER}/Eng_bs_16.json": "holds the summary of Eng[bs=8, rank=0], whose golden is named Eng_bs_8.json",
        f"{harvest}/{FOLDER}/Eng_bs_32.json": problems[f"{harvest}/{FOLDER}/Eng_bs_32.json"],
        f"{harvest}/{FOLDER}/Eng_bs_64.json": problems[f"{harvest}/{FOLDER}/Eng_bs_64.json"],
        f"{harvest}/{FOLDER}/report.md": "not a golden file (*.json)",
        f"{harvest}/{FOLDER}/Eng_bs_0.json": "its key does not say the batch size (bs=?); goldens are per batch size",
    }
    assert "JSON" in problems[f"{harvest}/{FOLDER}/Eng_bs_32.json"]
    assert "missing" in problems[f"{harvest}/{FOLDER}/Eng_bs_64.json"]
    assert _tree(goldens) == before


def test_a_failed_write_puts_back_what_was_written(
    trees: tuple[Path, Path], capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    goldens, harvest = trees
    before = _tree(goldens)
    real_write = _io.write_via
    calls = []

    def failing_write(path: Path, export: object, **kwargs: object) -> None:
        calls.append(path)
        if len(calls) == 2:
            raise GoldenError(path, "cannot write: No space left on device")
        real_write(path, export, **kwargs)

    monkeypatch.setattr(_io, "write_via", failing_write)
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "No space left on device; nothing was accepted" in err
    assert [p.name for p in calls[:2]] == ["Eng_bs_2.json", "Eng_bs_4.json"]
    assert _tree(goldens) == before  # the changed bs=2 golden restored, no bs=4 left behind


def test_the_command_a_failing_harvest_prints_accepts_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    fake_project(pytester, monkeypatch, "def test_decode(fake_capture, golden):\n    golden.check(fake_capture())\n")
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    failed = run(pytester, "--golden-out", "harvest")
    failed.assert_outcomes(failed=1)
    command = next(line.strip() for line in failed.outlines if line.strip().startswith("graphcapture accept "))
    assert command == "graphcapture accept harvest --golden-dir goldens --only 'cpu/test_model.py/test_decode/*'"
    monkeypatch.chdir(pytester.path)
    code, out, err = _main(
        capsys, "accept", "harvest", "--golden-dir", "goldens", "--only", "cpu/test_model.py/test_decode/*"
    )
    assert code == 0 and out.splitlines()[-1] == "accepted into goldens: 0 created, 3 changed, 0 unchanged", err
    assert "    ~ aten::mm [[1,256],[256,256]] → [[1,512],[512,256]]" in out.splitlines()
    run(pytester).assert_outcomes(passed=1)


# --------------------------------------------------------------------------- one writer, all or nothing


def test_accept_is_refused_while_an_update_run_holds_the_golden_lock(
    trees: tuple[Path, Path], capsys: pytest.CaptureFixture
) -> None:
    goldens, harvest = trees
    before = _tree(goldens)
    lock = GoldenLock(goldens)  # what a pytest --update-golden run holds for its whole session
    lock.acquire()
    try:
        code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
        assert {k: v for k, v in _tree(goldens).items() if k != LOCK_NAME} == before
    finally:
        lock.release()
    assert code == 2 and out == ""
    assert err == (
        f"graphcapture accept: error: {goldens}: another pytest run (pid {os.getpid()}) is writing goldens here "
        f"(--update-golden); one writer at a time: run again when it has finished\n"
    )
    # A dry run writes nothing and is not refused; once the run is over, accept writes.
    assert _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens), "--dry-run")[0] == 0
    assert _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))[0] == 0
    assert _tree(goldens) == _tree(harvest)


def test_an_update_run_is_refused_while_accept_writes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_project(pytester, monkeypatch, "def test_decode(fake_capture, golden):\n    golden.check(fake_capture())\n")
    lock = GoldenLock(pytester.path / "goldens", writer="accept")  # what graphcapture accept holds while it writes
    lock.acquire()
    try:
        result = run(pytester, "--update-golden")
    finally:
        lock.release()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--update-golden: *goldens: a graphcapture accept (pid {os.getpid()}) is writing goldens here; "
            f"one writer at a time: run again when it has finished"
        ]
    )
    assert not (pytester.path / "goldens").exists()


def _many(goldens: Path, harvest: Path, count: int) -> None:
    """``count`` changed goldens (bs 1..count): every one is rewritten, and put back by rewriting."""
    for bs in range(1, count + 1):
        _write(goldens, f"{FOLDER}/Eng_bs_{bs}.json", _summary(bs))
        _write(harvest, f"{FOLDER}/Eng_bs_{bs}.json", _summary(bs, extra=True))


def test_a_golden_that_cannot_be_encoded_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    goldens, harvest = tmp_path / "goldens", tmp_path / "harvest"
    _many(goldens, harvest, 18)
    # A lone surrogate arrives as a JSON escape; read, it is a str that UTF-8 cannot encode.
    bad = _summary(15, extra=True)
    bad["kernels"][1]["name"] = "relu_\ud800"
    (harvest / FOLDER / "Eng_bs_15.json").write_text(json.dumps(bad))
    before = _tree(goldens)
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
    assert code == 2 and out == "", err
    lines = err.splitlines()
    assert lines[0] == "graphcapture accept: error: refusing to accept 1 of 18 files (nothing written):"
    assert lines[1].startswith(f"  {harvest}/{FOLDER}/Eng_bs_15.json: cannot write: the text holds '\\ud800'")
    assert "lone surrogate" in lines[1] and len(lines) == 2
    assert _tree(goldens) == before


def test_a_golden_it_would_replace_that_cannot_be_read_is_refused_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    goldens, harvest = tmp_path / "goldens", tmp_path / "harvest"
    _many(goldens, harvest, 3)
    (goldens / FOLDER / "Eng_bs_3.json").unlink()
    (goldens / FOLDER / "Eng_bs_3.json").mkdir()  # in the way of the file accept would write
    before = _tree(goldens)
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
    assert code == 2 and out == ""
    assert err.splitlines()[1] == (
        f"  {harvest}/{FOLDER}/Eng_bs_3.json: the golden it replaces, {goldens}/{FOLDER}/Eng_bs_3.json, "
        f"is a directory, not a regular file"
    )
    assert _tree(goldens) == before


@pytest.mark.parametrize("when", ["before the rename", "after the rename"])
def test_ctrl_c_while_writing_puts_back_what_was_written_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch, when: str
) -> None:
    goldens, harvest = tmp_path / "goldens", tmp_path / "harvest"
    _many(goldens, harvest, 12)
    _write(harvest, f"{FOLDER}/Eng_bs_64.json", _summary(64))  # created: put back by removing it
    before = _tree(goldens)
    real_write = _io.write_via
    calls = []

    def interrupted_write(path: Path, export: object, **kwargs: object) -> None:
        calls.append(path)
        if len(calls) == 8 and when == "before the rename":
            raise KeyboardInterrupt
        real_write(path, export, **kwargs)
        if len(calls) == 8:
            raise KeyboardInterrupt

    monkeypatch.setattr(_io, "write_via", interrupted_write)
    code, out, err = _main(capsys, "accept", str(harvest), "--golden-dir", str(goldens))
    assert code == 130 and out == ""
    assert err == (
        "graphcapture: interrupted while writing golden 8 of 13; nothing was accepted "
        "(every golden written before was put back)\n"
    )
    assert _tree(goldens) == before


def test_ctrl_c_again_while_putting_back_names_what_is_left_and_the_command_that_finishes(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    goldens, harvest = tmp_path / "goldens", tmp_path / "harvest"
    _many(goldens, harvest, 12)
    real_write = _io.write_via
    calls = []

    def interrupted_write(path: Path, export: object, **kwargs: object) -> None:
        calls.append(path)
        if len(calls) in (8, 10):  # the 8th write, then the 2nd golden being put back
            raise KeyboardInterrupt
        real_write(path, export, **kwargs)

    monkeypatch.setattr(_io, "write_via", interrupted_write)
    monkeypatch.chdir(tmp_path)
    code, out, err = _main(capsys, "accept", "harvest", "--golden-dir", "goldens", "--only", "*/Eng_bs_*")
    assert code == 130 and out == ""
    # Written in file-name order (bs 1, 10, 11, 12, 2, ...); the 8th (bs 5) was interrupted, bs 5 put back.
    assert err == (
        "graphcapture: interrupted while writing golden 8 of 12; putting back stopped: 7 goldens hold the "
        f"harvest's version ({FOLDER}/Eng_bs_4.json, {FOLDER}/Eng_bs_3.json, {FOLDER}/Eng_bs_2.json and 4 more); "
        "finish accepting with: graphcapture accept harvest --golden-dir goldens --only '*/Eng_bs_*'\n"
    )
    monkeypatch.setattr(_io, "write_via", real_write)
    code, out, err = _main(capsys, "accept", "harvest", "--golden-dir", "goldens", "--only", "*/Eng_bs_*")
    assert code == 0 and out.splitlines()[-1] == "accepted into goldens: 0 created, 5 changed, 7 unchanged", err
    assert _tree(goldens) == _tree(harvest)
