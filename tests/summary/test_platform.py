"""Platform keys from live devices and from trace device properties."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pytest_graphcapture.engine.backend import detect_platform, environment_from_device
from pytest_graphcapture.golden.change import environment_note, toolchain_changes
from pytest_graphcapture.summary import platform as plat
from pytest_graphcapture.summary.platform import (
    ROCM_COMPUTE_TO_GFX,
    environment_from_trace,
    gfx_key,
    platform_from_trace,
    version_text,
)


def _trace(major: int, minor: int, **extra) -> dict:
    props = {"id": 0, "name": extra.pop("name", "GPU"), "computeMajor": major, "computeMinor": minor}
    props.update(extra.pop("props", {}))
    return {"schemaVersion": 1, "deviceProperties": [props], "traceEvents": [], **extra}


@pytest.mark.parametrize(
    "compute, gfx",
    [
        ((9, 4), "gfx942"),
        ((9, 0), "gfx90a"),
        ((9, 5), "gfx950"),
        ((11, 0), "gfx1100"),
        ((10, 3), "gfx1030"),
        ((12, 0), "gfx1200"),
        ((12, 1), "gfx1201"),
    ],
)
def test_rocm_compute_capability_table(compute: tuple, gfx: str) -> None:
    assert ROCM_COMPUTE_TO_GFX[compute] == gfx
    assert platform_from_trace(_trace(*compute, hip_runtime_version=70253211)) == f"rocm-{gfx}"


def test_every_table_entry_is_a_plain_gfx_name() -> None:
    for gfx in ROCM_COMPUTE_TO_GFX.values():
        assert gfx_key(gfx) == f"rocm-{gfx}"


def test_cuda_keys_from_traces() -> None:
    assert platform_from_trace(_trace(9, 0, cuda_runtime_version=12040)) == "cuda-sm90"
    assert platform_from_trace(_trace(8, 0)) == "cuda-sm80"  # 2023 traces carry no version keys
    assert platform_from_trace(_trace(8, 9, name="")) == "cuda-sm89"  # empty device name is fine
    assert platform_from_trace(_trace(10, 0)) == "cuda-sm100"


def test_rocm_detection_keys() -> None:
    assert platform_from_trace(_trace(9, 4, roctracer_version=4.1)) == "rocm-gfx942"
    assert platform_from_trace(_trace(9, 4, hip_driver_version=1)) == "rocm-gfx942"
    # an architecture name in the trace wins over the lossy table; feature flags are dropped
    assert (
        platform_from_trace(_trace(9, 0, hip_runtime_version=1, props={"gcnArchName": "gfx908:sramecc+:xnack-"}))
        == "rocm-gfx908"
    )
    # unknown capability: documented fallback
    assert platform_from_trace(_trace(13, 2, hip_runtime_version=1)) == "rocm-gfx1320"


def test_cpu_when_no_device_properties() -> None:
    assert platform_from_trace({"traceEvents": []}) == "cpu"
    assert platform_from_trace({"deviceProperties": [], "traceEvents": []}) == "cpu"
    assert platform_from_trace({"deviceProperties": [{"id": 0, "name": "x"}], "traceEvents": []}) == "cpu"
    assert platform_from_trace({"deviceProperties": "junk", "traceEvents": []}) == "cpu"


def test_gfx_key_drops_feature_flags() -> None:
    assert gfx_key("gfx942:sramecc+:xnack-") == "rocm-gfx942"
    assert gfx_key("gfx90a:xnack+") == "rocm-gfx90a"
    assert gfx_key("gfx1100") == "rocm-gfx1100"


def test_detect_platform_cpu() -> None:
    assert detect_platform("cpu") == "cpu"
    assert detect_platform(torch.device("cpu")) == "cpu"


def _fake_device(monkeypatch: pytest.MonkeyPatch, *, hip: str | None, major: int, minor: int, arch: str = "") -> None:
    props = SimpleNamespace(major=major, minor=minor, name="Fake GPU", gcnArchName=arch)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.version, "hip", hip)


def test_detect_platform_nvidia(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_device(monkeypatch, hip=None, major=9, minor=0)
    assert detect_platform("cuda:0") == "cuda-sm90"
    assert detect_platform(0) == "cuda-sm90"
    env = environment_from_device("cuda")
    assert env["device_name"] == "Fake GPU" and "cuda_runtime_version" in env


def test_detect_platform_rocm(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_device(monkeypatch, hip="7.2.0", major=9, minor=4, arch="gfx942:sramecc+:xnack-")
    assert detect_platform(torch.device("cuda", 0)) == "rocm-gfx942"
    assert environment_from_device("cuda:0")["gcn_arch_name"] == "gfx942:sramecc+:xnack-"
    _fake_device(monkeypatch, hip="6.0", major=9, minor=0, arch="")
    assert detect_platform("cuda:0") == "rocm-gfx90a"


def test_environment_from_trace() -> None:
    trace = _trace(
        9,
        0,
        name="NVIDIA H100",
        cuda_runtime_version=12040,
        record_shapes=1,
        with_stack=1,
        metadata={"torch_version": "2.6.0"},
        distributedInfo={"backend": "nccl", "rank": 3, "world_size": 8},
    )
    env = environment_from_trace(trace)
    assert env["device_name"] == "NVIDIA H100"
    assert env["torch_version"] == "2.6.0"
    assert env["cuda_runtime_version"] == "12.4"  # Kineto's 12040, spelled as torch.version.cuda
    assert env["profiler"] == {
        "record_shapes": True,
        "with_stack": True,
        "with_flops": False,
        "profile_memory": False,
        "with_modules": False,
    }
    assert env["distributed"] == {"backend": "nccl", "rank": 3, "world_size": 8}
    assert environment_from_trace({"traceEvents": []})["profiler"]["record_shapes"] is False


def test_environment_from_cpu_device() -> None:
    env = environment_from_device("cpu", profiler=SimpleNamespace(record_shapes=True, with_stack=False))
    assert env["device_name"] == "cpu"
    assert env["torch_version"] == str(torch.__version__)
    assert env["profiler"]["record_shapes"] is True and env["profiler"]["with_stack"] is False
    assert plat.CPU == "cpu"


@pytest.mark.parametrize(
    "key, recorded, spelled",
    [
        ("cuda_runtime_version", 13000, "13.0"),  # the H200 traces under tests/data (torch 2.11.0+cu130)
        ("cuda_runtime_version", 12040, "12.4"),
        ("cuda_runtime_version", 11080, "11.8"),
        ("cuda_driver_version", 12090, "12.9"),
        ("cuda_runtime_version", "13.0", "13.0"),  # the live spelling is left alone
        ("cuda_runtime_version", 12041, 12041),  # not CUDA's encoding: kept as recorded
        ("hip_runtime_version", 70253211, "7.2.53211"),  # the MI300X traces (ROCm 7.2)
        ("hip_driver_version", 60241133, "6.2.41133"),
        ("hip_runtime_version", "6.2.41133-dd7f95766", "6.2.41133"),  # torch.version.hip's git hash
        ("hip_runtime_version", 1, 1),  # not HIP_VERSION's encoding: kept as recorded
        ("cupti_version", 130001, 130001),  # no torch spelling to match
        ("roctracer_version", 4.1, 4.1),
    ],
)
def test_version_text_spells_runtimes_like_torch_version(key: str, recorded: object, spelled: object) -> None:
    assert version_text(key, recorded) == spelled


def test_trace_and_live_runtime_versions_read_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_device(monkeypatch, hip=None, major=9, minor=0)
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    live = environment_from_device("cuda:0")
    trace = environment_from_trace(_trace(9, 0, name="Fake GPU", cuda_runtime_version=12040))
    assert live["cuda_runtime_version"] == trace["cuda_runtime_version"] == "12.4"
    _fake_device(monkeypatch, hip="7.2.53211-1a2b3c4d5", major=9, minor=4, arch="gfx942")
    live = environment_from_device("cuda:0")
    trace = environment_from_trace(
        _trace(9, 4, name="Fake GPU", hip_runtime_version=70253211, hip_driver_version=70253211)
    )
    assert trace["hip_runtime_version"] == trace["hip_driver_version"] == "7.2.53211"
    # torch.version.hip keeps its git hash on the live side (engine/backend.py); the comparison drops it
    assert toolchain_changes(live, trace) == []


def test_environment_comparison_reads_old_integer_and_git_hash_spellings_as_the_same() -> None:
    old = {"cuda_runtime_version": 13000, "hip_runtime_version": "7.2.53211-1a2b3c4d5"}
    new = {"cuda_runtime_version": "13.0", "hip_runtime_version": "7.2.53211"}
    assert environment_note(old, new) is None
    assert toolchain_changes(old, new) == []
    newer = {"cuda_runtime_version": "13.1", "hip_runtime_version": "7.2.53211"}
    assert toolchain_changes(old, newer) == ["CUDA runtime 13000 → 13.1"]
    assert "cuda_runtime_version 13000 → 13.1" in (environment_note(old, newer) or "")
