"""Failure text a reviewer reads at a glance (issue 42): one headline for a shared change, a GEMM once,
old and new always told apart, no profiler-flag noise, the Markdown summary merged like the terminal."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, check_cli, run

from pytest_graphcapture.golden.change import _fit_line
from pytest_graphcapture.golden.diff import _fit_pair
from pytest_graphcapture.golden.store import CI_VARIABLES

SIZES = (1, 2, 4)
#: A decode step's ops: ``ops(bs, dtype, gemms, adds)`` -> ``[(name, dims, types, count)]``; the pytester
#: projects' conftest runs the same text.
OPS = """
def ops(bs, dtype="float", gemms=2, adds=3):
    t = dtype
    return [
        ("aten::linear", [[bs, 64], [128, 64], []], [t, t, ""], gemms),
        ("aten::matmul", [[bs, 64], [64, 128]], [t, t], gemms),
        ("aten::mm", [[bs, 64], [64, 128]], [t, t], gemms),
        ("aten::silu", [[bs, 128]], [t], 1),
        ("aten::mul", [[bs, 128], [bs, 128]], [t, t], 1),
        ("aten::add", [[bs, 64], [bs, 64], []], [t, t, "Scalar"], adds),
        ("aten::softmax", [[bs, 4, 32], [], []], [t, "Scalar", ""], 1),
        ("aten::argmax", [[bs, 256], [], []], [t, "Scalar", "Scalar"], 1),
    ]
"""
exec(OPS)


def _trace(ops: list, flags: dict | None = None) -> dict:
    events, ts = [], 0
    for name, dims, types, count in ops:
        for _ in range(count):
            ts += 2
            args = {"Input Dims": dims, "Input type": types}
            events.append(
                {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 1, "pid": 1, "tid": 1, "args": args}
            )
    return {"schemaVersion": 1, "traceEvents": events, **(flags or {})}  # a CPU capture


def _traces(folder: Path, flags: dict | None = None, **change) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for bs in SIZES:
        (folder / f"eng_bs_{bs}_rank0.json").write_text(json.dumps(_trace(ops(bs, **change), flags)))  # noqa: F821
    return folder


def _check(tmp_path: Path, capsys: pytest.CaptureFixture, flags: dict | None = None, **change) -> tuple[str, str]:
    """Goldens from the base traces, then ``graphcapture check`` of changed ones: (stdout, Markdown report)."""
    goldens = tmp_path / "goldens"
    assert check_cli(capsys, _traces(tmp_path / "base"), "--golden-dir", goldens, "--update")[0] == 0
    report = tmp_path / "report.md"
    code, out, _ = check_cli(
        capsys, _traces(tmp_path / "new", flags, **change), "--golden-dir", goldens, "--report-md", report
    )
    assert code == 1, out
    return out, report.read_text()


def _ops_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("bs=") and ": " in line]


def test_dtype_change_leads_once_and_only_the_rest_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, md = _check(tmp_path, capsys, dtype="c10::BFloat16", adds=4)
    for text in (out, md):  # terminal (CLI) and Markdown alike, each change once across sizes
        assert (
            text.count(
                "dtype changed: float32 → bfloat16 in 6 ops (mm, silu, softmax, add, argmax, mul; below: only what that does not explain)"
            )
            == 1
        )
        assert text.count("~ aten::") == 1, text
        assert _ops_lines(text) == [
            "bs=1,2,4: ~ aten::add [[bs,64],[bs,64],[]] (float, float, Scalar) → "
            "[[bs,64],[bs,64],[]] (c10::BFloat16, c10::BFloat16, Scalar) (count 3 → 4)"
        ], text


def test_gemm_change_shows_the_launching_op_once(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    out, md = _check(tmp_path, capsys, gemms=4)
    for text in (out, md):
        assert _ops_lines(text) == ["bs=1,2,4: ~ aten::mm (from linear › matmul) [[bs,64],[64,128]] count 2 → 4"], text


def test_old_and_new_are_told_apart(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # Two shapes alike but for their types: each side says its types, and the counts say "count".
    goldens, new = tmp_path / "goldens", tmp_path / "new"
    for folder, (kept, gone) in ((tmp_path / "base", ("float", "c10::Half")), (new, ("float", "c10::BFloat16"))):
        folder.mkdir()
        same = [("aten::to", [[1, 64]], [gone], 2), ("aten::to", [[1, 32]], [kept], 1)]
        added = [("aten::copy_", [[1, 8]], [t], 1) for t in (kept, gone)] if folder == new else []
        recounted = [
            ("aten::add", [[1, 8]], [t], n + 1 + (folder == new)) for n, t in enumerate(("float", "c10::Half"))
        ]
        (folder / "eng_bs_1_rank0.json").write_text(json.dumps(_trace(same + added + recounted)))
    assert check_cli(capsys, tmp_path / "base", "--golden-dir", goldens, "--update")[0] == 0
    code, out, _ = check_cli(capsys, new, "--golden-dir", goldens)
    assert code == 1
    assert "~ aten::to [[1,64]] (c10::Half) → [[1,64]] (c10::BFloat16)" in out
    assert "+ aten::copy_ [[1,8]] (c10::BFloat16) ×1" in out and "+ aten::copy_ [[1,8]] (float) ×1" in out
    assert "~ aten::add [[1,8]] (c10::Half) count 2 → 3, [[1,8]] (float) count 1 → 2" in out


@pytest.mark.parametrize(
    "was, now",
    [
        (
            "cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4",
            "cutlass_80_tensorop_s1688gemm_256x128_32x3_nn_align4",
        ),
        (
            "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32",
            "sm90_xmma_gemm_bf16bf16_bf16f32_bf16_nn_n_tilesize128x128x32",
        ),
    ],
)
def test_a_cut_keeps_where_old_and_new_differ(was: str, now: str) -> None:
    wrapped = [f"void cutlass::Kernel2<{n}>({n}::Params)" for n in (was, now)]
    line = _fit_line(f"~ aten::mm: {wrapped[0]} → {wrapped[1]} (×2)", 170)
    assert len(line) <= 170 and line.endswith(" (×2)") and line.count(" → ") == 1
    old, new = line[len("~ aten::mm: ") : -len(" (×2)")].split(" → ")
    differ = next(i for i, (a, b) in enumerate(zip(was, now)) if a != b)
    assert was[differ - 3 : differ + 3] in old and now[differ - 3 : differ + 3] in new, line
    a, b = _fit_pair(*wrapped, 80)
    assert was[differ - 3 : differ + 3] in a and now[differ - 3 : differ + 3] in b, (a, b)


@pytest.mark.parametrize("flag, noted", [("with_stack", False), ("profile_memory", False), ("record_shapes", True)])
def test_profiler_flags_noted_only_when_they_can_change_what_is_gated(
    tmp_path: Path, capsys: pytest.CaptureFixture, flag: str, noted: bool
) -> None:
    out, md = _check(tmp_path, capsys, {flag: 1}, adds=4)
    for text in (out, md):
        assert ("may explain the diff" in text) is noted, text
        assert (f"profiler.{flag} False → True" in text) is noted


CONFTEST = (
    FAKE_CONFTEST
    + OPS
    + """

def make_summary(bs, runner, platform):
    dtype, adds = os.environ.get("FAKE_DTYPE", "float"), int(os.environ.get("FAKE_ADDS", "3"))
    entries = [{"name": n, "input_dims": d, "input_types": t, "count": c} for n, d, t, c in ops(bs, dtype, adds=adds)]
    return Summary(key=CaptureKey(runner, bs), platform=platform, kernels=[], ops=entries,
                   launches={"total": 0, "by_api": {}}, complete=True, incomplete_reason=None, environment={})
"""
)


def test_pytest_route_says_the_same(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FAKE_BATCH_SIZES", ",".join(map(str, SIZES)))
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_model="def test_decode(fake_capture, golden):\n    golden.check(fake_capture())\n")
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_DTYPE", "c10::BFloat16")
    monkeypatch.setenv("FAKE_ADDS", "4")
    result = run(pytester, "--graph-capture-report=report.md")
    result.assert_outcomes(failed=1)
    md = (pytester.path / "report.md").read_text()
    for text in ("\n".join(result.outlines), md):
        assert text.count("dtype changed: float32 → bfloat16 in 6 ops (mm, silu, softmax, add, argmax, mul;") == 1, text
        assert [line.split(": ", 1)[0] for line in _ops_lines(text)] == ["bs=1,2,4"], text  # once for every size
        assert text.count("~ aten::") == 1, text
