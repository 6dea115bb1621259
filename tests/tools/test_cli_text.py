"""What ``graphcapture`` prints: control characters from traces and paths are shown, never sent raw; paths named right."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_graphcapture.tools.cli import main, printable

# A colour change, a window-title change (OSC), the one-byte CSI, a cursor-up, and a right-to-left override.
HOSTILE = [
    "void red\x1b[31m_kernel\x1b[0m",
    "void title\x1b]0;owned\x07",
    "void csi\x9b2J",
    "void up\x1b[1A\r",
    "x\u202egpj",
]
STEERING = {chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))} - {"\n", "\t"} | {"\u202e"}


def _trace(names: list[str], *, count: int = 1) -> dict:
    """An eager NVIDIA-style trace: each kernel of ``names`` launched ``count`` times."""
    events = []
    for i, name in enumerate(names * count):
        ts = 2 * i + 1
        args = {"correlation": ts}
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": ts, "dur": 1, "args": args})
        events.append({"ph": "X", "cat": "kernel", "name": name, "ts": ts + 1, "dur": 1, "args": args})
    props = [{"id": 0, "name": "GPU", "computeMajor": 9, "computeMinor": 0}]
    return {"schemaVersion": 1, "deviceProperties": props, "traceEvents": events}


def _write(path: Path, trace: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(trace), encoding="utf-8")
    return path


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _raw(text: str) -> set[str]:
    return set(text) & STEERING


def test_printable_escapes_every_steering_character_and_keeps_the_rest() -> None:
    assert printable("a\x1b[31mb\tc\nd\x9b\x7f\u202e é ü ×") == "a\\u001b[31mb\tc\nd\\u009b\\u007f\\u202e é ü ×"
    assert not _raw(printable("".join(STEERING)))


def test_show_and_diff_print_kernel_names_with_their_control_characters_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    _write(tmp_path / "a" / "eng_bs_1_rank0.json", _trace(HOSTILE))
    _write(tmp_path / "b" / "eng_bs_1_rank0.json", _trace(HOSTILE, count=2))
    code, out, err = _run(capsys, "show", str(tmp_path / "a"))
    assert code == 0, err
    assert not _raw(out)
    assert "void red\\u001b[31m_kernel\\u001b[0m" in out and "void title\\u001b]0;owned\\u0007" in out
    assert "void csi\\u009b2J" in out and "x\\u202egpj" in out
    files = [str(tmp_path / side / "eng_bs_1_rank0.json") for side in "ab"]
    for pair in ([str(tmp_path / "a"), str(tmp_path / "b")], files):
        code, out, err = _run(capsys, "diff", *pair)
        assert code == 1, err
        assert not _raw(out) and "void red\\u001b[31m_kernel\\u001b[0m" in out


def test_summarize_json_stays_valid_and_means_the_same_names(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    trace = _write(tmp_path / "eng_bs_1_rank0.json", _trace(HOSTILE))
    code, out, err = _run(capsys, "summarize", str(trace))
    assert code == 0, err
    assert not _raw(out)
    # The same data as the file --out writes (which is not terminal output: its names stay raw).
    assert main(["summarize", str(trace), "--out", str(tmp_path / "s.json")]) == 0
    written = (tmp_path / "s.json").read_text(encoding="utf-8")
    assert "\x9b" in written and json.loads(out) == json.loads(written)


def test_errors_and_paths_are_escaped_and_a_missing_path_is_called_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "a"
    _write(folder / "eng_bs_1_rank0.json", _trace(["k"]))
    missing = tmp_path / "gone\x1b]0;owned\x07"
    code, out, err = _run(capsys, "diff", str(folder), str(missing))
    assert code == 2 and out == ""
    assert err == f"graphcapture diff: error: {tmp_path}/gone\\u001b]0;owned\\u0007: no such file or directory\n"
    code, _, err = _run(capsys, "diff", str(tmp_path / "nothing"), str(folder))
    assert code == 2 and err.endswith("nothing: no such file or directory\n") and "a file" not in err
    code, _, err = _run(capsys, "diff", str(folder / "eng_bs_1_rank0.json"), str(folder))
    assert code == 2 and "got a file (" in err and "and a directory (" in err
    code, _, err = _run(capsys, "show", str(tmp_path / "nothing"))
    assert code == 2 and err.endswith("nothing: no such file or directory\n")
    code, _, err = _run(capsys, "show", str(folder / "eng_bs_1_rank0.json"))
    assert code == 2 and err.endswith("eng_bs_1_rank0.json: is not a directory (it is a file)\n")


def test_the_console_command_writes_no_raw_escape_to_its_stdout(tmp_path: Path) -> None:
    _write(tmp_path / "eng_bs_1_rank0.json", _trace(HOSTILE))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest_graphcapture",
            "show",
            str(tmp_path),
        ],
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert b"\x1b" not in proc.stdout and b"\xc2\x9b" not in proc.stdout and b"\\u001b[31m" in proc.stdout
