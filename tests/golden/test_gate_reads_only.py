"""The golden gate only reads a capture: whatever it checks, writes or harvests, the summaries stay as captured.

The gate normalizes and compares without copying the capture's entries, so a test
that checks a result and then inspects it (or checks it again at another level)
relies on the gate never writing through them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_graphcapture.golden import store
from pytest_graphcapture.golden.gate import CheckOptions, check_result
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.summary.model import Summary

NODEID = "tests/test_model.py::test_decode"


def summary(bs: int) -> Summary:
    op = {"name": "aten::mm", "input_dims": [[bs, 64], [64, 64]]}
    return Summary(
        key=CaptureKey("Fake", bs),
        platform="cpu",
        kernels=[
            {"name": "void at::native::gemv_kernel<float>(int)", "kind": "kernel", "count": 2, "op": op},
            {"name": "void at::native::gemv_kernel<half>(int)", "kind": "kernel", "count": 1, "op": op},
        ],
        ops=[
            {"name": "aten::mm", "input_dims": [[bs, 64], [64, 64]], "input_types": ["float", "float"], "count": 2},
            {
                "name": "aten::add",
                "input_dims": [[bs, 64], [bs, 64], []],
                "input_types": ["float"] * 2 + [""],
                "count": 1,
            },
        ],
        launches={"total": 3, "by_api": {"cudaLaunchKernel": 3}},
        level="exact",
        environment={"torch_version": "2.13.0"},
    )


def capture() -> CaptureResult:
    result = CaptureResult("Fake", "cpu")
    for bs in (1, 2, 4):
        result.keys[CaptureKey("Fake", bs)] = KeyResult(CaptureKey("Fake", bs), summary=summary(bs))
    return result


@pytest.mark.parametrize("update", [None, "new", "all"])
@pytest.mark.parametrize("goldens", ["missing", "equal", "with budgets", "different"])
@pytest.mark.parametrize("options", [{}, {"level": "family", "ignore_ops": ("aten::add",)}], ids=["name", "filtered"])
def test_checking_leaves_the_captured_summaries_as_they_were(
    tmp_path: Path, update: str | None, goldens: str, options: dict
) -> None:
    golden_dir = tmp_path / "goldens"
    folder = store.golden_folder(golden_dir, "cpu", NODEID)
    level = options.get("level", "name")
    if goldens != "missing":
        for kr in capture():
            data = kr.summary.normalized(level, ignore_ops=options.get("ignore_ops", ())).to_dict()
            if goldens == "with budgets":
                data.update(launch_budget=10, graph_memory_budget=1 << 30)
            if goldens == "different":
                data["ops"][0]["count"] += 1
            store.write_golden(store.golden_path(golden_dir, "cpu", NODEID, kr.key), data)
    result = capture()
    before = copy.deepcopy([kr.summary.to_dict() for kr in result])
    outcome = check_result(
        result,
        golden_dir=golden_dir,
        folder=folder,
        out_folder=tmp_path / "out",
        update=update,
        options=CheckOptions(**options),
    )
    assert [kr.summary.to_dict() for kr in result] == before
    assert bool(outcome.failed) == (goldens == "missing" and not update or goldens == "different" and update != "all")
    for path in sorted((tmp_path / "out").rglob("*.json")):
        assert "launch_budget" in json.loads(path.read_text()) or goldens != "with budgets"


def test_normalized_and_to_dict_hand_out_their_own_entries() -> None:
    original = summary(8)
    before = copy.deepcopy(original.to_dict())
    normalized = original.normalized("name")
    normalized.ops[0]["count"] = 99
    normalized.kernels[0]["count"] = 99
    data = original.to_dict()
    data["ops"][0]["count"] = 77
    data["kernels"][0]["count"] = 77
    assert original.to_dict() == before


def test_a_key_is_judged_on_one_look_at_its_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A golden removed after the gate read it (another process cleaning up) does not turn into "missing"."""
    golden_dir = tmp_path / "goldens"
    for kr in capture():
        store.write_golden(
            store.golden_path(golden_dir, "cpu", NODEID, kr.key), kr.summary.normalized("name").to_dict()
        )
    parse = store.parse_golden_file

    def parse_then_lose(path: Path) -> dict:
        data = parse(path)
        path.unlink()
        return data

    monkeypatch.setattr(store, "parse_golden_file", parse_then_lose)
    outcome = check_result(capture(), golden_dir=golden_dir, folder=store.golden_folder(golden_dir, "cpu", NODEID))
    assert [k.outcome for k in outcome.keys] == ["passed"] * 3
    assert not any(k.missing for k in outcome.keys)
