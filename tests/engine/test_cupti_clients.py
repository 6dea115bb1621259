"""One CUPTI client per process: another one refuses a GPU capture; a replay it silenced writes no golden."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch
from fakes import GpuLikeBackend

import pytest_graphcapture.engine.capture as capture_module
from pytest_graphcapture.engine.capture import (
    INJECTION,
    CaptureSettings,
    CuptiConflictError,
    active_clients,
    capture_runner,
    refuse_other_clients,
    silent_replay_reason,
    suspected_clients,
)
from pytest_graphcapture.golden.gate import check_result
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.summary import Summary
from pytest_graphcapture.testing import FakeBackend, FakeRunner

RECORDER = "/opt/vllm-ci/libkernel_recorder.so"


def proton(profiling_on: bool = False, command_line: bool = False, *, old_style: bool = False) -> Any:
    """``triton.profiler.flags``: a ``flags`` object in newer Proton, module globals in older releases."""
    module = types.ModuleType("triton.profiler.flags")
    holder = module if old_style else types.SimpleNamespace()
    holder.profiling_on, holder.command_line = profiling_on, command_line
    if not old_style:
        module.flags = holder
    return module


def cuspy(subscribed: bool) -> Any:
    """``torch.profiler._cuspy.core`` as torch 2.15 has it: ``has_live_subscription()`` creates nothing."""
    module = types.ModuleType("torch.profiler._cuspy.core")
    module.has_live_subscription = lambda: subscribed
    return module


def callbacks(registered: bool) -> Any:
    """``torch.cuda._graph_node_callbacks``: ``_HANDLER`` is set while the cupti annotation backend is registered."""
    module = types.ModuleType("torch.cuda._graph_node_callbacks")
    module._HANDLER = object() if registered else None
    return module


@pytest.mark.parametrize(
    ("environ", "modules", "named"),
    [
        ({INJECTION: RECORDER}, {}, f"a CUPTI injection library ({INJECTION}={RECORDER})"),
        ({}, {"triton.profiler.flags": proton(profiling_on=True)}, "Triton's Proton profiler"),
        ({}, {"triton.profiler.flags": proton(command_line=True)}, "Triton's Proton profiler"),
        ({}, {"triton.profiler.flags": proton(profiling_on=True, old_style=True)}, "Triton's Proton profiler"),
        ({}, {"torch.profiler._cuspy.core": cuspy(True)}, "torch's CUPTI-Python profiler backend"),
        ({}, {"torch.cuda._graph_node_callbacks": callbacks(True)}, "annotation_config={'backend': 'cupti'}"),
    ],
    ids=["injection", "proton session", "proton command", "older proton", "cuspy", "cupti annotations"],
)
def test_each_other_cupti_client_is_named_in_one_line_with_what_to_do(environ: dict, modules: dict, named: str) -> None:
    (client,) = active_clients(environ, modules)
    assert named in client.name
    with pytest.raises(CuptiConflictError) as info:
        refuse_other_clients("graph capture Engine", environ, modules)
    text = str(info.value)
    assert text.startswith("graph capture Engine: another CUPTI client is active in this process: ")
    assert named in text and client.fix in text and "\n" not in text


def test_a_process_without_another_client_is_not_refused() -> None:
    quiet = {
        "triton.profiler.flags": proton(),
        "torch.profiler._cuspy.core": cuspy(False),
        "torch.cuda._graph_node_callbacks": callbacks(False),
    }
    assert active_clients({INJECTION: ""}, quiet) == []
    refuse_other_clients("graph capture Engine", {}, quiet)


def test_a_cupti_python_import_is_only_a_suspect_it_cannot_be_asked_without_subscribing() -> None:
    modules = {"cupti.cupti": types.ModuleType("cupti.cupti")}
    assert active_clients({}, modules) == []
    assert suspected_clients({}, modules) == [
        "cupti-python is imported in this process (a subscriber it made holds CUPTI)"
    ]


def test_a_gpu_capture_with_an_injection_library_set_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INJECTION, RECORDER)
    monkeypatch.setattr(torch.version, "hip", None)
    backend = GpuLikeBackend(replay_shows_kernels=True, kernel_evidence_required=True)
    with pytest.raises(CuptiConflictError, match=f"graph capture FakeRunner: .*{INJECTION}={RECORDER}"):
        capture_runner(FakeRunner((1, 2)), backend, CaptureSettings(out_dir=tmp_path, trace="per-bs"))
    assert backend.log.calls == [] and list(tmp_path.iterdir()) == []


def test_cpu_and_rocm_captures_are_not_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUPTI is NVIDIA's: a CPU capture records no GPU kernels, a ROCm one records them through roctracer."""
    monkeypatch.setenv(INJECTION, RECORDER)
    capture_runner(FakeRunner((1,)), FakeBackend(), CaptureSettings(out_dir=tmp_path))
    monkeypatch.setattr(torch.version, "hip", "6.4")
    monkeypatch.setattr(capture_module, "check_capture_evidence", lambda key, summary: None)
    monkeypatch.setattr(capture_module, "check_replay_evidence", lambda *args: None)
    capture_runner(FakeRunner((1,)), GpuLikeBackend(kernel_evidence_required=True), CaptureSettings(out_dir=tmp_path))


def test_a_replay_silenced_by_a_named_client_names_it_and_no_golden_is_written_or_replaced(tmp_path: Path) -> None:
    key = CaptureKey("Engine", 4)
    reason = silent_replay_reason(["cupti-python is imported in this process (a subscriber it made holds CUPTI)"])
    assert "another CUPTI client holds CUPTI (cupti-python is imported" in reason and "no golden is written" in reason
    summary = Summary(
        key=key,
        platform="cuda-sm90",
        kernels=[{"name": "sgemm", "kind": "kernel", "count": 1}],
        ops=[],
        launches={"total": 1, "by_api": {"cudaLaunchKernel": 1}},
        complete=False,
        incomplete_reason=reason,
    )
    result = CaptureResult(runner_name="Engine", platform="cuda-sm90")
    result.keys[key] = KeyResult(key, summary=summary, no_golden=reason)
    for update in ("new", "all"):
        outcome = check_result(result, golden_dir=tmp_path, folder=tmp_path, update=update)
        (out,) = outcome.keys
        assert out.failed and out.lines == [f"{out.label}: not written: {reason}"]
        assert list(tmp_path.iterdir()) == []
    # A golden already there is left as it was.
    complete = Summary(
        key=key,
        platform="cuda-sm90",
        kernels=[{"name": "gemv", "kind": "kernel", "count": 1}],
        ops=[],
        launches={"total": 1, "by_api": {}},
    )
    good = CaptureResult(runner_name="Engine", platform="cuda-sm90")
    good.keys[key] = KeyResult(key, summary=complete)
    check_result(good, golden_dir=tmp_path, folder=tmp_path, update="new")
    (golden,) = tmp_path.iterdir()
    written = golden.read_bytes()
    (out,) = check_result(result, golden_dir=tmp_path, folder=tmp_path, update="all").keys
    assert golden.read_bytes() == written
    # It travels with a rank's or an isolated capture's result.
    assert KeyResult.from_dict(result.keys[key].to_dict()).no_golden == reason


def test_an_empty_replay_without_a_readout_fails_naming_the_cupti_suspects_first() -> None:
    from pytest_graphcapture.engine.capture import EmptyCaptureError, check_replay_evidence

    suspect = "cupti-python is imported in this process (a subscriber it made holds CUPTI)"
    with pytest.raises(EmptyCaptureError) as info:
        check_replay_evidence(CaptureKey("Engine", 4), [], [suspect])
    text = str(info.value)
    assert f"(1) another CUPTI client holds CUPTI, so the profiler records no GPU activity: {suspect}" in text
    assert "no golden is written" in text and "\n" not in text
