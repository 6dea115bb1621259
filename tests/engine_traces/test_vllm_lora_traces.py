"""vLLM's capture traces as 0.26-0.33 write them: a file per captured shape (``graph_capture_rank_0.<time_ns>``), the
size in tokens, and with ``cudagraph_specialize_lora`` one file per LoRA case under the same ``capture_{N}_{mode}``."""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from pathlib import Path

import pytest
from helpers import check_cli as check
from helpers import run

#: The shapes in vLLM's capture order: PIECEWISE then FULL, each by (tokens, active LoRAs) descending; (tokens, label
#: mode, pieces). The draft label is the form proposed upstream for a speculator's graphs.
SHAPES = [(8, "PIECEWISE", 2), (8, "FULL", 1), (4, "FULL", 1), (8, "draft_FULL", 1)]
CASES = 2  # LoRA cases per shape, e.g. num_active_loras 1, 0
STAMP = 1773709742341309550


def _trace(capture, tokens: int, pieces: int, label: str, drop: bool) -> dict:
    events, end = capture.shape(tokens, capture.end + 100, pieces, 1 if drop else None)
    like = events[0]
    start = capture.end + 99
    mark = {"ph": "X", "cat": "user_annotation", "name": label, "pid": like["pid"], "tid": like["tid"]}
    return {**capture.top, "traceEvents": [{**mark, "ts": start, "dur": end + 1 - start}, *events]}


def write_run(capture, folder: Path, *, drop=None, start: int = STAMP, step: int = 2) -> Path:
    """One run's ``capture_traces/``: a file per shape and LoRA case; ``drop=(label, case)`` loses a launch there."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 0
    for tokens, mode, pieces in SHAPES:
        label = f"capture_{tokens}_{mode}"
        for case in range(1, CASES + 1):
            trace = _trace(capture, tokens, pieces, label, drop == (label, case))
            name = f"graph_capture_rank_0.{start + n * step}.pt.trace.json.gz"
            with gzip.open(folder / name, "wt", compresslevel=1) as f:
                json.dump(trace, f)
            n += 1
    return folder


@pytest.fixture(scope="module")
def slim(capture):
    """The capture window's first 400 events (of helpers.engine_capture's) and its end: a small graph, read many times."""
    part = copy.copy(capture)
    part.events = capture.events[:400] + capture.events[-1:]
    return part


@pytest.fixture(scope="module")
def runs(slim, tmp_path_factory):
    """The LoRA trace set, one with a regression in FULL bs=8 case 2, and its golden tree, built once."""
    root = tmp_path_factory.mktemp("vllm_lora")
    same = write_run(slim, root / "same" / "capture_traces")
    changed = write_run(slim, root / "changed" / "capture_traces", drop=("capture_8_FULL", 2))
    goldens = root / "goldens"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("CI", raising=False)
        from pytest_graphcapture.tools.cli import main

        assert main(["check", str(same), "--golden-dir", str(goldens), "--update"]) == 0
    return same, changed, goldens


def test_each_lora_case_is_a_key_of_its_own_and_the_size_is_tokens(runs, capsys):
    same, _, goldens = runs
    code, out, err = check(capsys, same, "--golden-dir", goldens)
    assert code == 0, out + err
    assert f"{len(SHAPES) * CASES} key(s) match their goldens" in out
    folder = goldens / "rocm-gfx942" / "engine-traces"
    names = sorted(p.name for p in folder.iterdir())
    assert "graph_capture_rank_0_bs_8_FULL_lora_case_1.json" in names
    assert "graph_capture_rank_0_bs_8_draft_FULL_lora_case_2.json" in names  # a draft label stays its own key
    assert len(names) == len(SHAPES) * CASES
    golden = json.loads((folder / "graph_capture_rank_0_bs_8_PIECEWISE_lora_case_2.json").read_text())
    assert golden["environment"]["batch_size_counts"] == "tokens"
    assert len(golden["graphs"]) == 2, "each file's pieces alone: LoRA cases are never merged"


def test_a_regression_in_one_lora_case_fails_that_key_only(runs, capsys):
    _, changed, goldens = runs
    code, out, _ = check(capsys, changed, "--golden-dir", goldens)
    assert code == 1
    assert "for bs=8 variant=FULL_lora_case_2 " in out and f"1 of {len(SHAPES) * CASES} keys" in out


def test_a_missing_lora_case_fails(runs, tmp_path, capsys):
    same, _, goldens = runs
    lacking = Path(shutil.copytree(same, tmp_path / "capture_traces"))
    sorted(lacking.iterdir())[2].unlink()  # FULL bs=8, case 1 of 2: case 2 is now the only one
    code, out, _ = check(capsys, lacking, "--golden-dir", goldens)
    assert code == 1 and "bs=8 variant=FULL_lora_case_2: not captured" in out


def test_one_label_from_two_runs_is_refused_not_taken_for_lora_cases(runs, tmp_path, capsys):
    mixed = Path(shutil.copytree(runs[0], tmp_path / "capture_traces"))
    for path in list(mixed.iterdir()):  # the next start-up's files, a second later
        stamp = int(path.name.split(".")[1])
        shutil.copy(path, mixed / path.name.replace(str(stamp), str(stamp + 10**9)))
    code, _, err = check(capsys, mixed, "--golden-dir", runs[2])
    assert code == 2 and err.count("\n") == 1
    assert "traces with other shapes' traces between them" in err


def test_the_pytest_route_keeps_lora_cases_apart_too(runs, pytester):
    same, changed, goldens = runs
    for test in ("test_same", "test_changed"):
        shutil.copytree(
            goldens / "rocm-gfx942" / "engine-traces", pytester.path / f"goldens/rocm-gfx942/test_lora.py/{test}"
        )
    pytester.makepyfile(
        test_lora=f"""
def test_same(golden):
    golden.check_traces({str(same)!r})


def test_changed(golden):
    golden.check_traces({str(changed)!r})
"""
    )
    result = run(pytester, "--golden-dir=goldens")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*FAILED test_lora.py::test_changed*"])
    assert "FULL_lora_case_2" in result.stdout.str()


def test_an_empty_capture_traces_folder_gives_no_advice_that_stops_vllm(tmp_path, capsys):
    empty = tmp_path / "capture_traces"
    empty.mkdir()
    code, _, err = check(capsys, empty, "--golden-dir", tmp_path / "g")
    assert code == 2 and err.count("\n") == 1
    assert "VLLM_USE_V2_MODEL_RUNNER=0" not in err  # vLLM 0.34 refuses to start with it
    assert "vLLM 0.26-0.33" in err and "graph_capture.engine" in err
