"""Kernel expectations: claims a PR makes ("fuses four kernels into two", "no elementwise copy at bs ≥ 16")
checked per batch size, independent of the goldens — on CPU over ops (fake capture), on a GPU platform over
the kernels of the shared real sglang capture (pytester).
"""

from __future__ import annotations

import json

import pytest
from helpers import fake_project, real_traces_dir, run

from pytest_graphcapture import Expect, UsageError

GOLDEN = "goldens/cpu/test_model.py/test_decode/Fake_bs_2.json"
SGLANG_CAPTURE = "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"


def _check(expect: str) -> str:
    return f"""
from pytest_graphcapture import Expect


def test_decode(fake_capture, golden):
    golden.check(fake_capture(), expect={expect})
"""


def _failure(result: pytest.RunResult) -> list[str]:
    out = result.outlines
    return [line for line in out if ": expected " in line and not line.startswith("FAILED")]


@pytest.mark.parametrize(
    "expect",
    [
        '[Expect.op("aten::mm", count=2), Expect.op("aten::add", min=1, max=3), Expect.op("mm")]',
        '[{"op": "aten::relu", "forbid": True}, {"op": "aten::*", "min": 5}]',
        '[Expect.op("aten::relu", count=2, bs="> 8")]',  # no size in range: nothing to hold
    ],
    ids=["counted-bounded-present", "forbidden-absent-dicts", "out-of-range"],
)
def test_expectations_that_hold_pass(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, expect: str) -> None:
    fake_project(pytester, monkeypatch, _check(expect))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    run(pytester).assert_outcomes(passed=1)


def test_a_forbidden_op_fails_naming_the_expectation_size_and_what_was_found(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_project(pytester, monkeypatch, _check('[Expect.op("aten::relu", forbid=True, bs=">= 2")]'))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")  # adds aten::relu ×2 at every size; the goldens now differ too
    run(pytester, "--update-golden").assert_outcomes(failed=1)  # accepting the goldens does not meet it
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert _failure(result) == [
        f"bs={bs}: expected no op 'aten::relu' at bs >= 2 (golden.check(expect=...)); found 2: aten::relu ×2"
        for bs in (2, 4)
    ]  # bs=1 is outside the range
    assert "--update-golden cannot fix it" in result.stdout.str()
    assert "(expectation not met)" in result.stdout.str()


def test_counted_and_bounded_ops_fail_with_the_count_found(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_project(pytester, monkeypatch, _check('[Expect.op("aten::mm", count=1, bs="1..2"), Expect.op("add", max=2)]'))
    result = run(pytester, "--update-golden")
    result.assert_outcomes(failed=1)  # written, and still failing: the expectations are not the goldens'
    lines = _failure(result)
    assert (
        "bs=1: expected op 'aten::mm' exactly 1× at bs 1..2 (golden.check(expect=...)); found 2: aten::mm ×2" in lines
    )
    assert not any(line.startswith("bs=4: expected op 'aten::mm'") for line in lines)
    assert "bs=4: expected op 'add' at most 2× at every size (golden.check(expect=...)); found 3: aten::add ×3" in lines


def test_expectations_in_a_golden_file_are_checked_and_kept_by_update(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_project(pytester, monkeypatch, _check("None"))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    path = pytester.path / GOLDEN
    data = json.loads(path.read_text())
    data["expect"] = [{"op": "aten::relu", "forbid": True}]
    path.write_text(json.dumps(data, indent=1))
    run(pytester).assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")
    result = run(pytester, "--update-golden")
    result.assert_outcomes(failed=1)
    assert json.loads(path.read_text())["expect"] == [{"op": "aten::relu", "forbid": True}]  # kept
    assert _failure(result) == [
        f"bs=2: expected no op 'aten::relu' at every size (expect in {GOLDEN}); found 2: aten::relu ×2"
    ]
    data = json.loads(path.read_text())
    data["expect"] = [{"op": "aten::relu", "at_most": 2}]
    path.write_text(json.dumps(data))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{GOLDEN}*unknown expectation field 'at_most'*"])


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ('[{"op": "x", "kernel": "y"}]', "names exactly one 'kernel' or 'op' glob"),
        ('[Expect.op("x", count=-1)]', "count=-1 must be a non-negative integer"),
        ('[Expect.op("x", bs="big")]', "bs='big' is not a batch-size range"),
        ('[Expect.op("x", forbid=True, max=2)]', "forbid cannot be combined"),
        # A selector that selects no size would let a false expectation pass: refused.
        ('[Expect.op("aten::mm", count=9, bs="8..4")]', "the range 8..4 is reversed and selects no batch size"),
        ('[{"op": "aten::mm", "count": 9, "bs": ">= 16 and < 8"}]', "selects no batch size"),
        ('[Expect.op("aten::mm", count=9, bs="bs < 1")]', "selects no batch size"),
        ('[Expect.op("aten::mm", count=9, bs=0)]', "selects no batch size"),
    ],
)
def test_a_bad_expectation_is_one_line_naming_it(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, expect: str, message: str
) -> None:
    fake_project(pytester, monkeypatch, _check(expect))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    line = next(line for line in result.outlines if message in line)
    assert "golden.check(expect=...)" in line
    assert "Traceback" not in result.stdout.str()


def test_expect_round_trips_through_its_golden_form() -> None:
    for given in (
        Expect.kernel("*rmsnorm*", max=2, bs=">= 16", level="family"),
        Expect.kernel("*copy*", forbid=True),
        Expect.op("aten::silu", min=1, max=4, bs="1,2,4"),
    ):
        assert Expect.from_dict(given.to_dict()) == given
    with pytest.raises(UsageError, match="min=3 is above max=2"):
        Expect.kernel("x", min=3, max=2)


# --------------------------------------------------------------------------- a GPU platform: real kernels

REAL_CONFTEST = """
import copy
import pytest
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_file

TRACE = {trace!r}


@pytest.fixture(scope="session")
def real_capture():
    # The real sglang decode capture (ROCm, 36 layers) is bs=32; bs=8 is derived from it with the
    # elementwise copy kernels taken out, as a change that removes them at small sizes would.
    real = summarize_trace_file(TRACE, key=CaptureKey("decode", 32), level="exact")
    small = copy.deepcopy(real)
    small.key = CaptureKey("decode", 8)
    small.kernels = [k for k in small.kernels if "elementwise_kernel" not in k["name"]]
    result = CaptureResult(runner_name="decode", platform=real.platform)
    for summary in (real, small):
        result.keys[summary.key] = KeyResult(key=summary.key, summary=summary)
    return result
"""


def _real_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, expect: str) -> pytest.Pytester:
    trace = real_traces_dir() / SGLANG_CAPTURE
    if not trace.is_file():
        pytest.skip(f"real trace {SGLANG_CAPTURE} not found in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES")
    test = f"""
from pytest_graphcapture import Expect


def test_decode(real_capture, golden):
    golden.check(real_capture, expect={expect})
"""
    return fake_project(pytester, monkeypatch, test, conftest=REAL_CONFTEST.format(trace=str(trace)))


def test_real_kernels_present_counted_and_per_size_range_hold(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    expect = """[
        Expect.kernel("*paged_attention_ll4mi_QKV*", count=36),  # once per layer at every size
        Expect.kernel("Cijk_*", min=36 * 4),                      # the four GEMMs of each layer, at least
        Expect.kernel("*elementwise_kernel*", forbid=True, bs="<= 8"),
        Expect.kernel("*rotary_embedding_kernel*"),               # present
        Expect.kernel("*fused_moe*", forbid=True),                # a dense model: absent
    ]"""
    project = _real_project(pytester, monkeypatch, expect)
    run(project, "--update-golden").assert_outcomes(passed=1)
    assert sorted(p.name for p in (project.path / "goldens").rglob("*.json")) == [
        "decode_bs_32.json",
        "decode_bs_8.json",
    ]
    run(project).assert_outcomes(passed=1)


def test_real_kernels_forbidden_and_bounded_fail_per_size(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    expect = """[
        Expect.kernel("*elementwise_kernel*", forbid=True, bs=">= 16"),
        Expect.kernel("*rmsnorm*", max=2),
        Expect.kernel("*paged_attention_ll4mi_QKV*", count=18, bs="bs == 8"),
    ]"""
    project = _real_project(pytester, monkeypatch, expect)
    result = run(project, "--update-golden")
    result.assert_outcomes(failed=1)
    lines = _failure(result)
    copy_line = next(line for line in lines if "elementwise_kernel" in line)
    assert copy_line.startswith(
        "bs=32: expected no kernel '*elementwise_kernel*' at bs >= 16 (golden.check(expect=...)); found 73: "
    )
    assert not any(line.startswith("bs=8: expected no kernel '*elementwise_kernel*'") for line in lines)
    norm = [line for line in lines if "'*rmsnorm*' at most 2×" in line]
    assert [line.split(":")[0] for line in norm] == ["bs=32", "bs=8"] or [line.split(":")[0] for line in norm] == [
        "bs=8",
        "bs=32",
    ]
    assert all("found 145: " in line and "add_rmsnorm_quant_kernel" in line for line in norm)
    assert (
        "bs=8: expected kernel '*paged_attention_ll4mi_QKV*' exactly 18× at bs == 8 (golden.check(expect=...)); "
        "found 36: " in "\n".join(lines)
    )


def test_a_kernel_expectation_a_gpu_capture_cannot_evaluate_is_named_and_the_key_incomplete(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_project(pytester, monkeypatch, _check('[Expect.kernel("*fused_moe*", count=2, bs="<= 2")]'))
    monkeypatch.setenv("FAKE_PLATFORM", "cuda-sm90")
    monkeypatch.setenv("FAKE_INCOMPLETE", "the profiler recorded no kernels")
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    result = run(pytester)
    result.assert_outcomes(passed=1)
    lines = [line for line in result.outlines if line.startswith("incomplete: ")]
    assert len(lines) == 3
    skipped = [line for line in lines if "not evaluated: kernel '*fused_moe*' exactly 2× at bs <= 2" in line]
    assert [line.split()[2] for line in skipped] == ["bs=1:", "bs=2:"]  # bs=4 is outside its sizes
