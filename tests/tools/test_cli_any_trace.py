"""The CLI on any trace (batch size unknown or set) and ``graphcapture diff DIR_A DIR_B``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from helpers import real_traces_dir

from pytest_graphcapture.engine.runner import GraphRunner
from pytest_graphcapture.errors import TraceFormatError
from pytest_graphcapture.keys import UNKNOWN_BATCH_SIZE, CaptureKey, key_label
from pytest_graphcapture.naming import key_from_trace_name
from pytest_graphcapture.summary.model import Summary
from pytest_graphcapture.tools.cli import main

REAL = real_traces_dir()
H100 = REAL / "tracelens_h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
A100 = REAL / "hta_negative_queue_length_values_check__rank0.json.gz"
SGLANG_DECODE = REAL / "tracelens_sglang_decode__sglang_Qwen3-8B_decode.json.gz"
SGLANG_CAPTURE = REAL / "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
needs_real = pytest.mark.skipif(not H100.exists(), reason=f"real traces not found under {REAL}")


def _run(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


# --------------------------------------------------------------------------- keys


def test_unknown_batch_size_is_a_key_that_says_so() -> None:
    key = key_from_trace_name("eager.json", ["ProfilerStep#1"], unknown_ok=True)
    assert key == CaptureKey("eager", UNKNOWN_BATCH_SIZE) and str(key) == "eager[bs=?, rank=0]"
    assert key_label(key) == "bs=?"
    assert key_from_trace_name("x.json", ["bs=8", "bs=16"], unknown_ok=True).batch_size == UNKNOWN_BATCH_SIZE
    assert key_from_trace_name("x.json", ["bs=8", "bs=16"], batch_size=4) == CaptureKey("x", 4)
    assert key_from_trace_name("eng_bs_2_rank1.json", batch_size=8) == CaptureKey("eng", 8, None, 1)
    with pytest.raises(TraceFormatError, match="cannot tell the batch size"):
        key_from_trace_name("eager.json")  # the plugin's reading stays strict


def test_runners_still_cannot_capture_batch_size_zero() -> None:
    class Zero(GraphRunner):
        def batch_sizes(self):  # type: ignore[no-untyped-def]
            return [4, 0]

    with pytest.raises(ValueError, match="not a positive integer"):
        Zero().capture_keys()


# --------------------------------------------------------------------------- real traces


@needs_real
def test_summarize_and_show_the_h100_trace_without_batch_size(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code, out, err = _run(capsys, "summarize", str(H100))
    assert code == 0 and json.loads(out)["key"]["batch_size"] == UNKNOWN_BATCH_SIZE
    assert "does not say its batch size" in err
    code, out, _ = _run(capsys, "summarize", str(H100), "--batch-size", "16")
    assert code == 0 and json.loads(out)["key"]["batch_size"] == 16
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(H100, folder / H100.name)
    code, out, _ = _run(capsys, "show", str(folder))
    assert code == 0 and out.splitlines()[1].lstrip().startswith("bs=?")
    code, out, _ = _run(capsys, "show", str(folder), "--batch-size", "16")
    assert code == 0 and out.splitlines()[1].lstrip().startswith("bs=16")


@needs_real
def test_diff_of_the_h100_and_a100_traces(capsys: pytest.CaptureFixture) -> None:
    code, out, err = _run(capsys, "diff", str(H100), str(A100))
    assert code == 1 and err == ""
    lines = out.splitlines()
    assert "  ~ platform: cuda-sm90 → cuda-sm80" in lines
    assert any(line.startswith("  kernels: ") and "added" in line for line in lines)
    code, out, _ = _run(capsys, "diff", str(H100), str(H100))
    assert code == 0 and out == "equal (level name)\n"


@needs_real
def test_diff_of_two_capture_directories_of_real_traces(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Two runs' capture dirs: the model trace changed GPUs (H100 -> A100), the sglang decode trace is
    the same, the sglang bs=32 capture only in A."""
    a, b = tmp_path / "A" / "graph_capture_profile", tmp_path / "B" / "graph_capture_profile"
    a.mkdir(parents=True)
    b.mkdir(parents=True)
    shutil.copy(SGLANG_DECODE, a / "decode.json.gz")
    shutil.copy(SGLANG_DECODE, b / "decode.json.gz")
    shutil.copy(H100, a / "model.json.gz")
    shutil.copy(A100, b / "model.json.gz")
    shutil.copy(SGLANG_CAPTURE, a / SGLANG_CAPTURE.name)
    code, out, err = _run(capsys, "diff", str(a.parent), str(b.parent))
    assert code == 1 and err == ""
    lines = out.splitlines()
    title = lines.index("graph_capture_profile: model rank 0")
    assert lines[title + 1].split()[:3] == ["bs=?", "kind", "kernel"]
    assert any(line.split()[:2] == ["-241", "kernel"] for line in lines[title:])  # the H100 cuBLAS GEMMs
    assert "  only in A: bs=32" in lines
    assert "per key:" in lines and "graph_capture_profile: model rank 0 bs=?:" in lines
    assert "graph_capture_profile: decode rank 0" not in lines  # equal keys are not listed
    assert lines[-1] == "2 keys in both, 1 differ, 1 only in A, 0 only in B (level name)"


# --------------------------------------------------------------------------- summary directories


def _summary(bs: int, *, extra: bool = False, hidden: int = 64, variant: str | None = None) -> Summary:
    kernels = [
        {"name": "gemm", "kind": "kernel", "count": 2},
        {"name": "add", "kind": "kernel", "count": 5 if extra else 3},
    ]
    ops = [{"name": "aten::mm", "input_dims": [[bs, hidden]], "input_types": ["float"], "count": 2}]
    if extra:
        kernels.append({"name": "relu", "kind": "kernel", "count": 1})
    return Summary(key=CaptureKey("Eng", bs, variant), platform="cuda-sm90", kernels=kernels, ops=ops)


def _tree(root: Path, summaries: list[Summary], folder: str = "cuda-sm90/tests/test_x.py/test_y") -> Path:
    target = root / folder
    target.mkdir(parents=True, exist_ok=True)
    for s in summaries:
        (target / f"Eng_bs_{s.key.batch_size}{'_' + s.key.variant if s.key.variant else ''}.json").write_text(
            s.to_json()
        )
    return root


def test_diff_of_two_summary_directories(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = _tree(tmp_path / "a", [_summary(1), _summary(4), _summary(8), _summary(4, variant="lp")])
    same = _tree(tmp_path / "same", [_summary(1), _summary(4), _summary(8), _summary(4, variant="lp")])
    b = _tree(tmp_path / "b", [_summary(1), _summary(4, extra=True), _summary(8, hidden=128), _summary(16)])
    code, out, _ = _run(capsys, "diff", str(a), str(same))
    assert code == 0 and out.splitlines()[-1] == "4 keys in both, 0 differ, 0 only in A, 0 only in B (level name)"
    code, out, _ = _run(capsys, "diff", str(a), str(b))
    assert code == 1
    lines = out.splitlines()
    start = lines.index("cuda-sm90/tests/test_x.py/test_y: Eng rank 0")
    assert [line.split() for line in lines[start + 1 : start + 5]] == [
        ["bs=4", "bs=8", "kind", "kernel"],
        ["3→5", ".", "kernel", "add"],
        ["+1", ".", "kernel", "relu"],
        [".", "~", "op", "aten::mm"],
    ]
    assert "  only in B: bs=16" in lines
    assert "  only in A: bs=4 variant=lp" in lines
    assert "cuda-sm90/tests/test_x.py/test_y: Eng rank 0 bs=4:" in lines
    assert "  + relu ×1" in lines
    assert lines[-1] == "3 keys in both, 2 differ, 1 only in A, 1 only in B (level name)"


def test_diff_directories_bad_input_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    a = _tree(tmp_path / "a", [_summary(1)])
    b = _tree(tmp_path / "b", [_summary(1)])
    bad = b / "notes.json"
    bad.write_text('{"hello": 1}')
    code, out, err = _run(capsys, "diff", str(a), str(b))
    assert code == 2 and out == "" and err.count("\n") == 1 and str(bad) in err
    code, _, err = _run(capsys, "diff", str(a), str(next(a.rglob("*.json"))))
    assert code == 2 and "two files or two directories" in err
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = _run(capsys, "diff", str(a), str(empty))
    assert code == 2 and "contains no summary JSON or trace files" in err
