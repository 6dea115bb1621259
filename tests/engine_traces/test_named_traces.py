"""What a check of engine traces should have captured: a named folder every golden of its check, a named trace its own keys.

A key whose golden is there and whose traces do not hold it fails, in ``golden.check_traces``
as in ``graphcapture check``; a per-size trace named on its own leaves the other sizes'
goldens unchecked, says so, and its ``--update`` touches its own keys only.  Kernel
expectations a capture cannot evaluate are named, and the key is incomplete.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from helpers import check_cli as check
from helpers import run

TEST = """
def test_engine(golden):
    golden.check_traces({traces!r})
"""


def contents(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.rglob("*.json"))}


def per_size(folder: Path, bs: int) -> Path:
    (path,) = folder.glob(f"**/*_bs_{bs}_rank0.json.gz")
    return path


@pytest.mark.parametrize(
    "layout, full, fewer, gone",
    [
        ("vllm", {}, {"piecewise": None}, "bs=4 variant=PIECEWISE"),
        ("vllm", {}, {"sizes": (8, 2)}, "bs=4 variant=FULL"),
        ("sglang-per-bs", {}, {"sizes": (8, 4)}, "bs=2"),
    ],
    ids=["vllm-piecewise", "vllm-full-size", "sglang-size"],
)
def test_check_traces_fails_a_key_its_folder_no_longer_holds(pytester, built, layout, full, fewer, gone):
    pytester.makepyfile(test_engine=TEST.format(traces=str(built(layout, **full))))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    pytester.makepyfile(test_engine=TEST.format(traces=str(built(layout, **fewer))))
    result = run(pytester)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*{gone} (not captured)*", f"*{gone}: not captured, but *holds its golden*"])


def test_a_whole_capture_trace_named_on_its_own_still_holds_every_key(pytester, built, tmp_path, capsys):
    (full,) = built("vllm").glob("**/*.json.gz")
    (fewer,) = built("vllm", sizes=(8, 4)).glob("**/*.json.gz")
    assert check(capsys, full, "--golden-dir", tmp_path / "g", "--update")[0] == 0
    code, out, _ = check(capsys, fewer, "--golden-dir", tmp_path / "g")
    assert code == 1 and "bs=2 variant=FULL: not captured, but " in out
    pytester.makepyfile(test_engine=TEST.format(traces=str(full)))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    pytester.makepyfile(test_engine=TEST.format(traces=str(fewer)))
    run(pytester).assert_outcomes(failed=1)


def test_one_per_size_trace_named_checks_and_updates_its_own_key_only(pytester, built, tmp_path, capsys):
    folder = built("sglang-per-bs")
    golden = tmp_path / "g"
    assert check(capsys, folder, "--golden-dir", golden, "--update")[0] == 0
    before = contents(golden)
    # Another capture's bs=4 trace, named on its own: its key is rewritten, bs=2 and bs=8 are left as they were.
    changed = per_size(built("sglang-per-bs", drop=(4, None, 1)), 4)
    code, out, _ = check(capsys, changed, "--golden-dir", golden, "--update")
    assert code == 0, out
    assert "not checked: 2 golden(s) in " in out and "DecodeCudaGraphRunner_bs_2.json" in out
    assert "removed" not in out
    after = contents(golden)
    assert sorted(after) == sorted(before)
    assert {n for n in after if after[n] != before[n]} == {"DecodeCudaGraphRunner_bs_4.json"}
    code, out, _ = check(capsys, per_size(folder, 8), "--golden-dir", golden, "--report-md", tmp_path / "r.md")
    assert code == 0 and "1 key(s) match their goldens" in out and "(2 golden(s) not checked)" in out
    report = (tmp_path / "r.md").read_text()
    assert "### Not checked (narrowed run)" in report and "DecodeCudaGraphRunner_bs_4.json" in report
    # The same in a test: a narrowed check passes, says so, and its --update-golden removes nothing.
    pytester.makepyfile(test_engine=TEST.format(traces=str(folder)))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    tests_goldens = contents(pytester.path / "goldens")
    pytester.makepyfile(test_engine=TEST.format(traces=str(per_size(folder, 8))))
    result = run(pytester, "--update-golden")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*not checked: test_engine.py::test_engine: 2 golden(s), their keys are not in*"])
    assert "deleted:" not in result.stdout.str()
    assert contents(pytester.path / "goldens") == tests_goldens


def test_a_folder_update_removes_what_its_traces_no_longer_hold_naming_it(built, tmp_path, capsys):
    golden = tmp_path / "g"
    assert check(capsys, built("sglang-per-bs"), "--golden-dir", golden, "--update")[0] == 0
    code, out, _ = check(capsys, built("sglang-per-bs", sizes=(8, 4)), "--golden-dir", golden, "--update")
    assert code == 0 and "removed " in out and "DecodeCudaGraphRunner_bs_2.json: its key is not in the traces" in out
    assert sorted(contents(golden)) == ["DecodeCudaGraphRunner_bs_4.json", "DecodeCudaGraphRunner_bs_8.json"]


def _nameless(source: Path, target: Path) -> Path:
    """``source`` with the kernel name taken from every launch: a capture with no kernel evidence."""
    with gzip.open(source, "rt", encoding="utf-8") as f:
        data = json.load(f)
    for event in data["traceEvents"]:
        event.get("args", {}).pop("kernel", None)
    target.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(target, "wt", encoding="utf-8", compresslevel=1) as f:
        f.write(json.dumps(data))
    return target


def _set_expect(golden: Path, expect: list) -> None:
    (path,) = golden.rglob("*.json")
    data = json.loads(path.read_text())
    data["expect"] = expect
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


def test_a_kernel_expectation_without_kernel_evidence_is_named_and_its_key_incomplete(built, tmp_path, capsys):
    trace = _nameless(per_size(built("sglang-per-bs"), 4), tmp_path / "t" / "DecodeCudaGraphRunner_bs_4_rank0.json.gz")
    golden = tmp_path / "g"
    assert check(capsys, trace, "--golden-dir", golden, "--update")[0] == 0
    _set_expect(golden, [{"kernel": "*fused_moe*", "count": 2}, {"kernel": "*rmsnorm*", "max": 1, "bs": ">= 8"}])
    code, out, _ = check(capsys, trace, "--golden-dir", golden)
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("incomplete: bs=4: ")]
    assert "not evaluated: kernel '*fused_moe*' exactly 2× at every size (expect in " in line
    assert "rmsnorm" not in line  # bs >= 8: it does not apply to bs=4
    assert out.splitlines()[-1].endswith("(1 incomplete)")


@pytest.mark.parametrize("bs", ["8..4", ">= 16 and < 8", "0"])
def test_a_golden_expectation_selecting_no_size_is_refused_in_one_line(pytester, built, tmp_path, capsys, bs):
    folder = built("sglang-per-bs", sizes=(4,))
    golden = tmp_path / "g"
    assert check(capsys, folder, "--golden-dir", golden, "--update")[0] == 0
    _set_expect(golden, [{"kernel": "*no_such_kernel*", "count": 2, "bs": bs}])
    code, out, err = check(capsys, folder, "--golden-dir", golden)
    assert code != 0
    (line,) = [line for line in (out + err).splitlines() if "selects no batch size" in line]
    assert "DecodeCudaGraphRunner_bs_4.json" in line
    pytester.makepyfile(test_engine=TEST.format(traces=str(folder)))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    _set_expect(pytester.path / "goldens", [{"kernel": "*no_such_kernel*", "count": 2, "bs": bs}])
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert "Traceback" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*DecodeCudaGraphRunner_bs_4.json*selects no batch size*"])
