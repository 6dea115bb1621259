"""The golden gate as users run it (pytester), over a fake capture whose model is steered by env vars.

FAKE_HIDDEN (op shapes), FAKE_EXTRA_OP (one more op and kernel launches), FAKE_BATCH_SIZES
(captured sizes), FAKE_MANY_OPS (a long diff), FAKE_INCOMPLETE, FAKE_NO_SUMMARY and FAKE_TORCH
(environment) simulate model changes without the capture engine.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, PLUGIN, QUIET, TEST_DECODE, run, use_this_checkout

from pytest_graphcapture.golden import store
from pytest_graphcapture.golden.change import MAX_DIFF_LINES
from pytest_graphcapture.golden.store import CI_VARIABLES, ci_environment
from pytest_graphcapture.plugin.torch_setup import pin_worker_gpu


@pytest.fixture
def gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester project with the fake capture; no CI or graph-capture variables leak in."""
    for name in CI_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name in list(os.environ):
        if name.startswith(("GRAPH_CAPTURE_", "FAKE_", "PYTEST_XDIST")):
            monkeypatch.delenv(name, raising=False)
    assert ci_environment() is None
    # xdist workers are fresh interpreters: let them import the package from this checkout.
    use_this_checkout(monkeypatch)
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_model=TEST_DECODE)
    return pytester


def lit(text: str) -> str:
    """``text`` as an fnmatch pattern matching itself (shapes are full of brackets)."""
    return "".join(f"[{c}]" if c in "[]*?" else c for c in text)


def golden_tree(root: Path) -> dict[str, bytes]:
    base = root / "goldens"
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*.json"))}


def report_json(pytester: pytest.Pytester, *args: str, warm: bool = False) -> tuple[pytest.RunResult, dict]:
    out = pytester.path / "report.json"
    if out.exists():
        out.unlink()
    result = run(pytester, *args, "--graph-capture-json", str(out), warm=warm)
    return result, json.loads(out.read_text())


# --------------------------------------------------------------------------- acceptance


def test_first_run_fails_then_update_creates_then_passes_byte_identically(gate: pytest.Pytester) -> None:
    first = run(gate)
    first.assert_outcomes(failed=2)
    first.stdout.fnmatch_lines(
        [
            "graph capture of Fake has no golden for bs=1, bs=2, bs=4 (platform cpu, level name, 3 of 3 keys)",
            "bs=1: missing golden goldens/cpu/test_model.py/test_decode/Fake_bs_1.json",
            "create them with: pytest test_model.py::test_decode --update-golden",
            "cpu: 6 checked, 0 passed, 6 failed, 0 created, 0 updated, 0 deleted, 0 unused, 0 incomplete",
        ]
    )
    assert not (gate.path / "goldens").exists()

    update, data = report_json(gate, "--update-golden")
    update.assert_outcomes(passed=2)
    assert data["totals"]["created"] == 6 and data["totals"]["checked"] == 6
    tree = golden_tree(gate.path)
    assert sorted(tree) == [
        f"cpu/test_model.py/{t}/Fake_bs_{bs}.json" for t in ("test_decode", "test_other") for bs in (1, 2, 4)
    ]
    for rel in tree:
        store.read_golden(gate.path / "goldens" / rel)

    run(gate).assert_outcomes(passed=2)
    again, data = report_json(gate, "--update-golden")
    again.assert_outcomes(passed=2)
    assert data["totals"]["passed"] == 6 and data["totals"]["updated"] == 0 and data["totals"]["created"] == 0
    assert golden_tree(gate.path) == tree


def test_changed_model_fails_with_a_diff_and_dropped_size_is_removed_once_the_test_passes(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")
    monkeypatch.setenv("FAKE_BATCH_SIZES", "2,4")
    monkeypatch.setenv("FAKE_TORCH", "2.5.1")
    changed, data = report_json(gate, "test_model.py::test_decode")
    changed.assert_outcomes(failed=1)
    changed.stdout.fnmatch_lines(
        [
            # bs=1 is no longer captured: that fails too, not only once the test passes.
            "graph capture of Fake does not match its goldens for bs=2, bs=4, bs=1 (not captured) "
            "(platform cpu, level name, 3 of 3 keys)",
            "bs=2,4 differ from their goldens; the kernel set first changes at bs=2:",
            "  kernels:",
            "    bs=2,4: ~ elementwise_kernel count 3 → 5",
            "  ops:",
            lit("    bs=2,4: ~ aten::mm [[bs,256],[256,256]] → [[bs,512],[512,256]]"),
            lit("    bs=2,4: + aten::relu [[bs,256]] ×2"),
            "  launches:",
            "    bs=2,4: ~ total launches 5 → 7",
            "    bs=2,4: ~ cudaLaunchKernel 5 → 7",
            "  note: bs=2,4: environment differs from the golden's (may explain the diff): torch 2.4.0 → 2.5.1",
            "bs=1: not captured, but goldens/cpu/test_model.py/test_decode/Fake_bs_1.json holds its golden*",
            "per-batch-size diff in *",
            "goldens: goldens/cpu/test_model.py/test_decode/",
            "accept them with: pytest test_model.py::test_decode --update-golden",
        ]
    )
    per_size = next(line for line in changed.outlines if line.startswith("per-batch-size diff in "))
    full = (gate.path / per_size.split(" in ", 1)[1]).read_text()
    assert "bs=4 (goldens/cpu/test_model.py/test_decode/Fake_bs_4.json):" in full
    assert "    ~ aten::mm [[4,256],[256,256]] → [[4,512],[512,256]]" in full
    # The test failed, so it may not have checked every key: nothing in its folder is called unused.
    assert "unused: " not in changed.stdout.str()
    assert data["unused"] == []
    assert data["counts"]["cpu"]["failed"] == 3

    updated, data = report_json(gate, "test_model.py::test_decode", "--update-golden")
    updated.assert_outcomes(passed=1)
    assert data["counts"]["cpu"] == {
        "checked": 2,
        "passed": 0,
        "failed": 0,
        "created": 0,
        "updated": 2,
        "deleted": 1,
        "unused": 0,
        "incomplete": 0,
    }
    tree = golden_tree(gate.path)
    assert "cpu/test_model.py/test_decode/Fake_bs_1.json" not in tree
    assert "cpu/test_model.py/test_other/Fake_bs_1.json" in tree
    assert json.loads(tree["cpu/test_model.py/test_decode/Fake_bs_4.json"])["environment"]["torch"] == "2.5.1"
    run(gate, "test_model.py::test_decode").assert_outcomes(passed=1)


def test_k_restricted_run_does_not_report_other_tests_goldens(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2")
    result, data = report_json(gate, "-k", "test_other", "--update-golden")
    result.assert_outcomes(passed=1, deselected=1)
    assert [f["path"] for f in data["deleted"]] == ["cpu/test_model.py/test_other/Fake_bs_4.json"]
    assert (gate.path / "goldens/cpu/test_model.py/test_decode/Fake_bs_4.json").exists()


def test_update_does_not_delete_in_folders_of_failed_tests(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate.makepyfile(
        test_model="""
import os

def test_decode(fake_capture, golden):
    golden.check(fake_capture())
    assert not os.environ.get("FAKE_FAIL_AFTER"), "a second check would have followed"
"""
    )
    run(gate, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2")
    monkeypatch.setenv("FAKE_FAIL_AFTER", "1")
    result, data = report_json(gate, "--update-golden")
    result.assert_outcomes(failed=1)
    assert data["deleted"] == [] and data["unused"] == []  # a failed test's folder is left alone
    monkeypatch.delenv("FAKE_FAIL_AFTER")
    result, data = report_json(gate, "--update-golden")
    assert [f["path"] for f in data["deleted"]] == ["cpu/test_model.py/test_decode/Fake_bs_4.json"]


def test_update_on_ci_is_a_usage_error(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    result = run(gate, "--update-golden")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--update-golden is refused on CI (environment variable CI is set)*"])
    monkeypatch.delenv("CI")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = run(gate, "--update-golden=new")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable GITHUB_ACTIONS is set*"])
    assert not (gate.path / "goldens").exists()


def test_golden_out_on_ci_harvests_without_touching_goldens(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    before = golden_tree(gate.path)
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    monkeypatch.setenv("FAKE_PLATFORM", "rocm-gfx942")
    result = run(gate, "--golden-out", "harvest")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "bs=1: missing golden goldens/rocm-gfx942/test_model.py/test_decode/Fake_bs_1.json",
            "obtained summaries written to harvest/rocm-gfx942/test_model.py/test_decode/; accept them with:",
            "  graphcapture accept harvest --golden-dir goldens --only 'rocm-gfx942/test_model.py/test_decode/*'",
            "*locally: updating is refused on CI, CI is set*",
        ]
    )
    assert golden_tree(gate.path) == before
    harvested = sorted(p.relative_to(gate.path / "harvest").as_posix() for p in (gate.path / "harvest").rglob("*.json"))
    assert harvested == [
        f"rocm-gfx942/test_model.py/{t}/Fake_bs_{bs}.json" for t in ("test_decode", "test_other") for bs in (1, 2, 4)
    ]
    harvested_summary = store.read_golden(gate.path / "harvest" / harvested[0])
    assert harvested_summary.platform == "rocm-gfx942"
    assert [op["input_dims"] for op in harvested_summary.ops if op["name"] == "aten::mm"] == [[[1, 512], [512, 256]]]
    # Accepting = copying: the next run on that platform passes.
    monkeypatch.delenv("CI")
    for rel in harvested:
        target = gate.path / "goldens" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((gate.path / "harvest" / rel).read_bytes())
    run(gate).assert_outcomes(passed=2)


def test_update_new_only_creates_missing(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4,8")
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    result, data = report_json(gate, "test_model.py::test_decode", "--update-golden=new")
    result.assert_outcomes(failed=1)
    assert data["counts"]["cpu"]["created"] == 1 and data["counts"]["cpu"]["failed"] == 3
    assert (gate.path / "goldens/cpu/test_model.py/test_decode/Fake_bs_8.json").exists()
    golden_1 = store.read_golden(gate.path / "goldens/cpu/test_model.py/test_decode/Fake_bs_1.json")
    assert golden_1.ops[1]["input_dims"] == [[1, 256], [256, 256]]


def test_missing_and_changed_keys_are_listed_together(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4,8")
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")
    result = run(gate, "test_model.py::test_decode")
    result.stdout.fnmatch_lines(
        [
            "graph capture of Fake does not match its goldens for bs=1, bs=2, bs=4, bs=8 (missing) *",
            "bs=8: missing golden goldens/cpu/test_model.py/test_decode/Fake_bs_8.json",
            "create only the missing ones with: pytest test_model.py::test_decode --update-golden=new",
        ]
    )


def test_long_diff_is_cut_with_the_full_diff_in_a_file(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_MANY_OPS", "80")  # 80 lines even with the batch sizes grouped
    result = gate.runpytest(*PLUGIN, *QUIET, "test_model.py::test_decode")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    marker = [line for line in text.splitlines() if "more lines; full diff in" in line]
    assert len(marker) == 1
    path = gate.path / marker[0].split("full diff in ")[1].strip()
    assert path.parent == gate.path / ".pytest_cache" / "d" / "graphcapture-diffs"
    full = path.read_text()
    last = "aten::op079 [[4,80]]"
    assert last in full and last not in text
    assert len(full.splitlines()) > MAX_DIFF_LINES
    # With --golden-out the full diff sits next to the obtained files.
    result = run(gate, "test_model.py::test_decode", "--golden-out", "out")
    assert (gate.path / "out/cpu/test_model.py/test_decode/diff.txt").exists()
    result.stdout.fnmatch_lines(["*full diff in out/cpu/test_model.py/test_decode/diff.txt"])


def test_markdown_report_has_the_diffs(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    monkeypatch.setenv("FAKE_HIDDEN", "128")
    result = run(gate, "--graph-capture-report", "summary/report.md")
    result.assert_outcomes(failed=2)
    text = (gate.path / "summary" / "report.md").read_text()
    assert "| `cpu` | 6 | 0 | 6 | 0 | 0 | 0 | 0 | 0 |" in text
    assert "bs=1,2,4: ~ aten::mm [[bs,256],[256,256]] → [[bs,128],[128,256]]" in text  # once for every size
    assert "<code>test_model.py::test_other</code>" in text


# --------------------------------------------------------------------------- check() behaviour


def test_no_summary_is_a_usage_error_not_a_mismatch(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_NO_SUMMARY", "1")
    result = run(gate, "test_model.py::test_decode", "--update-golden")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*golden.check: the capture result of Fake holds no summaries*summarize=False*"])
    assert "--update-golden" not in result.stdout.str().split("FAILURES")[1]
    assert "does not match" not in result.stdout.str()
    assert not (gate.path / "goldens").exists()


def test_incomplete_capture_compares_ops_only_and_is_counted(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(gate, "--update-golden").assert_outcomes(passed=2)
    before = golden_tree(gate.path)
    monkeypatch.setenv("FAKE_INCOMPLETE", "profiler dropped records")
    result, data = report_json(gate, "--update-golden")
    result.assert_outcomes(passed=2)
    assert data["totals"]["incomplete"] == 6 and data["totals"]["updated"] == 0
    assert golden_tree(gate.path) == before  # complete kernel evidence is never replaced by an incomplete one
    result.stdout.fnmatch_lines(["incomplete: test_model.py::test_decode bs=1: profiler dropped records"])
    monkeypatch.setenv("FAKE_HIDDEN", "64")
    result = run(gate, "test_model.py::test_decode")
    result.stdout.fnmatch_lines(["*note: *incomplete: profiler dropped records (kernels not compared)"])
    assert "elementwise_kernel" not in result.stdout.str()


def test_check_options_level_sections_ignores(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    gate.makepyfile(
        test_model="""
def test_decode(fake_capture, golden):
    golden.check(fake_capture(), sections=("kernels", "launches"), ignore_kernels=[r"^elementwise"],
                 level="family")

def test_bad(fake_capture, golden):
    golden.check(fake_capture(), sections=("kernel",))
"""
    )
    run(gate, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    data = json.loads((gate.path / "goldens/cpu/test_model.py/test_decode/Fake_bs_1.json").read_text())
    assert data["level"] == "family" and [k["name"] for k in data["kernels"]] == ["gemv_kernel"]
    monkeypatch.setenv("FAKE_HIDDEN", "512")  # ops are not compared here
    run(gate, "test_model.py::test_decode").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")  # launches are
    run(gate, "test_model.py::test_decode").stdout.fnmatch_lines(["*~ total launches 5 → 7"])
    result = run(gate, "test_model.py::test_bad")
    result.stdout.fnmatch_lines(["*sections=('kernel',): expected a non-empty subset of*"])


def test_postprocess_hook_edits_the_summary_before_compare_and_write(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate.makeconftest(
        FAKE_CONFTEST
        + """

def pytest_graphcapture_postprocess_summary(config, summary):
    summary["ops"] = [op for op in summary["ops"] if op["name"] != "aten::relu"]
"""
    )
    run(gate, "--update-golden").assert_outcomes(passed=2)
    assert b"aten::relu" not in b"".join(golden_tree(gate.path).values())
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")
    result = run(gate)
    result.stdout.fnmatch_lines(["*~ elementwise_kernel count 3 → 5"])
    assert "aten::relu" not in result.stdout.str()


def test_newer_golden_schema_says_upgrade_even_when_updating(gate: pytest.Pytester) -> None:
    run(gate, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    path = gate.path / "goldens/cpu/test_model.py/test_decode/Fake_bs_2.json"
    data = json.loads(path.read_text())
    data["schema_version"] = 99
    path.write_text(json.dumps(data))
    for extra in ((), ("--update-golden",)):
        result = run(gate, "test_model.py::test_decode", *extra)
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(
            ["*Fake_bs_2.json: schema_version 99 is newer than this pytest-graphcapture*upgrade the plugin*"]
        )


def test_corrupt_golden_fails_naming_it_and_update_repairs_it(gate: pytest.Pytester) -> None:
    run(gate, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    path = gate.path / "goldens/cpu/test_model.py/test_decode/Fake_bs_1.json"
    path.write_text('{"schema_version": 1, "schema_version": 1}')
    run(gate, "test_model.py::test_decode").stdout.fnmatch_lines(["*Fake_bs_1.json: duplicate key 'schema_version'*"])
    run(gate, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    store.read_golden(path)


def test_names_from_classes_and_parametrize_ids_are_sanitized(gate: pytest.Pytester) -> None:
    gate.makepyfile(
        test_model="""
import pytest

class TestDecode:
    @pytest.mark.parametrize("cfg", ["a/b", "../up", "ü"])
    def test_y(self, fake_capture, golden, cfg):
        golden.check(fake_capture())
"""
    )
    run(gate, "--update-golden").assert_outcomes(passed=3)
    files = [p for p in (gate.path / "goldens").rglob("*.json")]
    assert len(files) == 9
    folders = {p.parent.relative_to(gate.path / "goldens").parts for p in files}
    for parts in folders:
        assert parts[:3] == ("cpu", "test_model.py", "TestDecode") and len(parts) == 4
        assert parts[3].startswith("test_y_") and parts[3] not in (".", "..")
    run(gate).assert_outcomes(passed=3)


# --------------------------------------------------------------------------- settings


def test_golden_dir_precedence_cli_env_ini_default(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    gate.makeini("[pytest]\ngolden_dir = from_ini\n")
    run(gate, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    assert (gate.path / "from_ini/cpu/test_model.py/test_decode/Fake_bs_1.json").exists()
    monkeypatch.setenv("GRAPH_CAPTURE_GOLDEN_DIR", "from_env")
    run(gate, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    assert (gate.path / "from_env/cpu").is_dir()
    run(gate, "test_model.py::test_decode", "--update-golden", "--golden-dir", "from_cli").assert_outcomes(passed=1)
    assert (gate.path / "from_cli/cpu").is_dir()


def test_default_golden_dir_is_relative_to_rootdir(gate: pytest.Pytester) -> None:
    gate.makeini("[pytest]\n")
    sub = gate.mkdir("sub")
    (gate.path / "test_model.py").rename(sub / "test_model.py")
    (gate.path / "conftest.py").rename(sub / "conftest.py")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(sub)
        result = gate.runpytest(*PLUGIN, *QUIET, "-p", "no:cacheprovider", "test_model.py", "--update-golden")
    result.assert_outcomes(passed=2)
    assert (gate.path / "goldens/cpu/sub/test_model.py/test_decode/Fake_bs_1.json").exists()


def test_bad_level_option_is_a_usage_error(gate: pytest.Pytester) -> None:
    result = run(gate, "--golden-level", "fuzzy")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--golden-level: 'fuzzy' is not one of exact, name, family*"])


# --------------------------------------------------------------------------- xdist


@pytest.mark.slow
def test_xdist_update_over_shared_tree_and_merged_report(
    gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist", reason="install pytest-xdist (pip install pytest-xdist) to test parallel runs")
    gate.makepyfile(
        test_model="""
import pytest

@pytest.mark.parametrize("i", range(8))
def test_many(fake_capture, golden, i):
    golden.check(fake_capture())
"""
    )
    # Two workers share the tree and the report is merged from both (the -n 4 stress over a shared tree is
    # tests/e2e/test_hardening_concurrency.py); the plugin imports no torch, so each run takes a few seconds.
    xdist = ("-n", "2")
    result, data = report_json(gate, *xdist, "--update-golden", warm=True)
    result.assert_outcomes(passed=8)
    assert data["totals"] == {
        "checked": 24,
        "passed": 0,
        "failed": 0,
        "created": 24,
        "updated": 0,
        "deleted": 0,
        "unused": 0,
        "incomplete": 0,
    }
    tree = golden_tree(gate.path)
    assert len(tree) == 24
    for rel in tree:
        store.read_golden(gate.path / "goldens" / rel)
    assert not [p for p in (gate.path / "goldens").rglob("*") if p.name.endswith(".tmp")]
    result.stdout.fnmatch_lines(["cpu: 24 checked, 0 passed, 0 failed, 24 created, *"])

    monkeypatch.setenv("FAKE_BATCH_SIZES", "2,4")
    monkeypatch.setenv("FAKE_HIDDEN", "512")
    result, data = report_json(gate, *xdist, warm=True)
    result.assert_outcomes(failed=8)
    # Each test fails its 2 changed sizes and the bs=1 it no longer captures; failed tests: folders left alone.
    assert data["totals"]["failed"] == 24 and data["totals"]["unused"] == 0
    result, data = report_json(gate, *xdist, "--update-golden", warm=True)
    result.assert_outcomes(passed=8)
    assert data["totals"]["updated"] == 16 and data["totals"]["deleted"] == 8
    assert len(golden_tree(gate.path)) == 16


@pytest.mark.slow
def test_xdist_gpu_pinning_narrows_visible_devices(gate: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("xdist", reason="install pytest-xdist (pip install pytest-xdist) to test parallel runs")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7,9")
    gate.makepyfile(
        test_model="""
import os, pytest

@pytest.mark.parametrize("i", range(4))
def test_env(i, worker_id):
    with open(f"seen_{worker_id}_{i}.txt", "w") as fh:
        fh.write(os.environ["CUDA_VISIBLE_DEVICES"])
"""
    )
    # The workers fork warm: what is pinned is their environment, whichever way they started.
    run(gate, "-n", "2", "--graph-capture-xdist-gpu", warm=True).assert_outcomes(passed=4)
    seen = {p.name.split("_")[1]: p.read_text() for p in gate.path.glob("seen_*.txt")}
    assert seen == {"gw0": "5", "gw1": "7"}


def test_pin_worker_gpu_uses_n_mod_visible_devices() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert pin_worker_gpu("gw3", env) == "CUDA_VISIBLE_DEVICES=1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    env = {"HIP_VISIBLE_DEVICES": "2, 3, 4"}
    assert pin_worker_gpu("gw4", env) == "HIP_VISIBLE_DEVICES=3"
    assert pin_worker_gpu("master", {"CUDA_VISIBLE_DEVICES": "0,1"}) is None


def test_schema_1_goldens_pass_and_update_rewrites_them(gate: pytest.Pytester) -> None:
    run(gate, "test_model.py::test_decode", "--update-golden").assert_outcomes(passed=1)
    files = sorted((gate.path / "goldens").rglob("*.json"))
    for path in files:  # as the previous release wrote them
        data = json.loads(path.read_text())
        data["schema_version"] = 1
        del data["unattributed"]
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    run(gate, "test_model.py::test_decode").assert_outcomes(passed=1)
    result, data = report_json(gate, "test_model.py::test_decode", "--update-golden")
    result.assert_outcomes(passed=1)
    assert data["counts"]["cpu"]["updated"] == len(files)
    assert all(json.loads(p.read_text())["schema_version"] == store.current_schema_version() for p in files)
