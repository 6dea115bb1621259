"""KinetoQuieter: one temporary file for many blocks, Kineto's trace points dropped, every other line kept."""

from __future__ import annotations

import os

import pytest

from pytest_graphcapture.engine.profiling import KinetoQuieter, quiet_kineto

START = b"USDT:2026-11-30 23:56:17 12491:12491 SyncActivityProfilerHandler.cpp:52] profiler_start\n"
STOP = b"USDT:2026-11-30 23:56:17 12491:12491 SyncActivityProfilerHandler.cpp:59] profiler_stop\n"


def test_each_block_writes_back_its_own_lines_in_order(capfd: pytest.CaptureFixture[str]) -> None:
    quieter = KinetoQuieter()
    for index in range(3):
        with quieter():
            os.write(2, b"before " + str(index).encode() + b"\n" + START + b"after\n" + STOP)
        # written back when the block ends, before the next one starts
        assert capfd.readouterr().err == f"before {index}\nafter\n"
    with quieter():
        pass
    assert capfd.readouterr().err == ""
    quieter.close()


def test_lines_that_only_look_like_trace_points_are_kept(capfd: pytest.CaptureFixture[str]) -> None:
    kept = b"USDT: profiler_start, and more\nxUSDT: profiler_stop\nno newline at the end"
    with quiet_kineto():
        os.write(2, START + kept + b"\n" + STOP + b"USDT: x profiler_stop  ")
    assert capfd.readouterr().err.encode() == kept + b"\n"


def test_the_file_is_emptied_once_it_grows_past_the_reset_size(
    capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(KinetoQuieter, "RESET_BYTES", 64)
    quieter = KinetoQuieter()
    for index in range(4):
        with quieter():
            os.write(2, START + f"line {index}\n".encode())
        assert capfd.readouterr().err == f"line {index}\n"
        assert os.fstat(quieter._buffer.fileno()).st_size < 64 + len(START) + 8
    quieter.close()
    assert quieter._buffer is None
    quieter.close()  # twice is harmless


def test_a_failing_block_still_restores_stderr_and_writes_back(capfd: pytest.CaptureFixture[str]) -> None:
    quieter = KinetoQuieter()
    with pytest.raises(RuntimeError), quieter():
        os.write(2, START + b"why it failed\n")
        raise RuntimeError("boom")
    os.write(2, b"stderr is back\n")
    assert capfd.readouterr().err == "why it failed\nstderr is back\n"
    quieter.close()
