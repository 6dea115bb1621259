"""``graphcapture check``: the gate over engine-written traces, exit 0 / 1 / 2 as a CI job reads them."""

from __future__ import annotations

import gzip
import json

from helpers import check_cli as check

from pytest_graphcapture.tools.cli import main


def failure_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if not line.startswith("/") and "key(s) by" not in line]


def test_the_same_traces_pass(goldens, built, capsys):
    code, out, _ = check(capsys, built("vllm"), "--golden-dir", goldens)
    assert code == 0
    assert "4 key(s) match their goldens" in out
    written = sorted(p.name for p in (goldens / "rocm-gfx942" / "engine-traces").iterdir())
    assert written == [
        "decoder_bs_2_FULL.json",
        "decoder_bs_4_FULL.json",
        "decoder_bs_4_PIECEWISE.json",
        "decoder_bs_8_FULL.json",
    ]


def test_a_launch_removed_from_one_piece_fails_that_key_and_graph_only(goldens, built, capsys):
    code, out, _ = check(capsys, built("vllm", drop=(4, "PIECEWISE", 2)), "--golden-dir", goldens)
    assert code == 1
    lines = failure_lines(out)
    assert "does not match its goldens for bs=4 variant=PIECEWISE " in lines[0]
    assert "1 of 4 keys" in lines[0]
    headings = [line for line in lines if line.startswith("bs=")]
    assert len(headings) == 1 and headings[0].startswith("bs=4 variant=PIECEWISE graph 2 of 3 (")
    # The dropped launch's kernel, a bf16 (DF16b) symbol: demangled as c++filt reads it, on every host.
    assert "  kernels: 1 removed\n    - void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, " in out
    assert "~ total launches 17 → 16" in out  # graph 2 of the window helpers.engine_capture keeps


def test_a_launch_removed_from_a_full_graph_fails_that_size_only(goldens, built, capsys):
    code, out, _ = check(capsys, built("vllm", drop=(8, "FULL", 1)), "--golden-dir", goldens)
    assert code == 1
    headings = [line for line in failure_lines(out) if line.startswith("bs=")]
    assert len(headings) == 1 and headings[0].startswith("bs=8 variant=FULL (")


def test_a_piecewise_key_losing_a_graph_fails_naming_the_graph_counts(goldens, built, capsys):
    code, out, _ = check(capsys, built("vllm", piecewise=(4, 2)), "--golden-dir", goldens)
    assert code == 1
    assert "bs=4 variant=PIECEWISE: 2 graphs, goldens have 3 (" in out
    assert "bs=8 variant=FULL" not in "\n".join(failure_lines(out)[1:])


def test_a_golden_whose_key_is_not_in_the_traces_fails(goldens, built, capsys):
    code, out, _ = check(capsys, built("vllm", piecewise=None), "--golden-dir", goldens)
    assert code == 1
    assert "bs=4 variant=PIECEWISE: not captured, but " in out and "decoder_bs_4_PIECEWISE.json holds its golden" in out
    code, out, _ = check(capsys, built("vllm", piecewise=None), "--golden-dir", goldens, "--update")
    assert code == 0 and "removed" in out
    assert not (goldens / "rocm-gfx942" / "engine-traces" / "decoder_bs_4_PIECEWISE.json").exists()


def test_a_missing_golden_fails_and_names_the_command_that_creates_it(tmp_path, built, capsys):
    code, out, _ = check(capsys, built("sglang-per-bs"), "--golden-dir", tmp_path / "g")
    assert code == 1
    assert "has no golden for bs=2, bs=4, bs=8" in out
    last = out.splitlines()[-1]
    assert last.startswith(f"create them with: graphcapture check {built('sglang-per-bs')} --golden-dir ")
    assert last.endswith(" --update")


def test_sglang_per_size_files_gate_each_size(tmp_path, built, capsys):
    golden = tmp_path / "g"
    assert check(capsys, built("sglang-per-bs"), "--golden-dir", golden, "--update")[0] == 0
    assert check(capsys, built("sglang-per-bs"), "--golden-dir", golden)[0] == 0
    code, out, _ = check(capsys, built("sglang-per-bs", drop=(2, None, 1)), "--golden-dir", golden)
    assert code == 1
    assert [line[:5] for line in failure_lines(out) if line.startswith("bs=")] == ["bs=2 "]


def test_the_single_sglang_trace_needs_its_batch_sizes(tmp_path, built, capsys):
    folder = built("sglang-single")
    code, _, err = check(capsys, folder, "--golden-dir", tmp_path / "g", "--update")
    assert code == 2
    assert err.count("\n") == 1 and "holds 3 capture windows with no batch-size marker" in err
    code, out, _ = check(capsys, folder, "--golden-dir", tmp_path / "g", "--batch-sizes", "8,4,2", "--update")
    assert code == 0 and "3 key(s) by windows: bs=8, bs=4, bs=2" in out
    # One key per window: the same goldens as the per-size files of the same capture.
    assert check(capsys, built("sglang-per-bs"), "--golden-dir", tmp_path / "g")[0] == 0


def test_an_empty_folder_is_a_failure(tmp_path, capsys):
    empty = tmp_path / "capture_traces"
    empty.mkdir()
    code, _, err = check(capsys, empty, "--golden-dir", tmp_path / "g")
    assert code == 2
    assert "no capture traces" in err and "graph_capture.engine" in err and err.count("\n") == 1


def test_a_gpu_trace_without_a_capture_window_is_a_failure(tmp_path, built, capsys):
    source = next(built("sglang-per-bs").glob("**/*bs_2_rank0.json.gz"))
    with gzip.open(source, "rt") as f:
        trace = json.load(f)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if "Capture" not in e["name"]]
    path = tmp_path / "x_bs_2_rank0.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write(json.dumps(trace))
    code, _, err = check(capsys, path, "--golden-dir", tmp_path / "g")
    assert code == 2 and "holds no capture window" in err


def test_a_capture_cut_off_by_the_profiler_is_bad_input(tmp_path, built, capsys):
    source = next(built("sglang-per-bs").glob("**/*bs_2_rank0.json.gz"))
    with gzip.open(source, "rt") as f:
        trace = json.load(f)
    trace["traceEvents"] = [e for e in trace["traceEvents"] if e["name"] != "hipStreamEndCapture"]
    path = tmp_path / "x_bs_2_rank0.json.gz"
    with gzip.open(path, "wt", compresslevel=1) as f:
        f.write(json.dumps(trace))
    code, _, err = check(capsys, path, "--golden-dir", tmp_path / "g")
    assert code == 2 and "incomplete capture" in err


def test_update_is_refused_on_ci_unless_asked(tmp_path, built, capsys, monkeypatch):
    monkeypatch.setenv("CI", "true")
    code, _, err = check(capsys, built("sglang-per-bs"), "--golden-dir", tmp_path / "g", "--update")
    assert code == 2 and "refused on CI" in err and not (tmp_path / "g").exists()
    code, _, _ = check(capsys, built("sglang-per-bs"), "--golden-dir", tmp_path / "g", "--update", "--update-on-ci")
    assert code == 0 and (tmp_path / "g" / "rocm-gfx942" / "engine-traces").is_dir()


def test_update_new_keeps_changed_goldens(goldens, built, capsys):
    before = (goldens / "rocm-gfx942" / "engine-traces" / "decoder_bs_8_FULL.json").read_text()
    code, _, _ = check(capsys, built("vllm", drop=(8, "FULL", 1)), "--golden-dir", goldens, "--update-new")
    assert code == 1
    assert (goldens / "rocm-gfx942" / "engine-traces" / "decoder_bs_8_FULL.json").read_text() == before


def test_golden_out_harvests_for_accept_and_report_md_is_written(goldens, built, tmp_path, capsys):
    harvest, report = tmp_path / "harvest", tmp_path / "summary.md"
    args = ("--golden-dir", goldens, "--golden-out", harvest, "--report-md", report)
    code, out, _ = check(capsys, built("vllm", drop=(4, "PIECEWISE", 2)), *args)
    assert code == 1
    assert "graphcapture accept" in out
    harvested = harvest / "rocm-gfx942" / "engine-traces"
    assert (harvested / "decoder_bs_4_PIECEWISE.json").is_file() and (harvested / "diff.txt").is_file()
    text = report.read_text()
    assert "bs=4 variant=PIECEWISE" in text and "failed" in text
    assert "[summary.html](<summary.html>)" in text and (tmp_path / "summary.html").is_file()  # the picture beside it
    assert main(["accept", str(harvest), "--golden-dir", str(goldens)]) == 0
    capsys.readouterr()
    assert check(capsys, built("vllm", drop=(4, "PIECEWISE", 2)), "--golden-dir", goldens)[0] == 0


def test_golden_out_refuses_a_folder_it_did_not_write(goldens, built, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    code, _, err = check(capsys, built("vllm"), "--golden-dir", goldens, "--golden-out", mine)
    assert code == 2 and "did not write" in err
    assert (mine / "notes.txt").read_text() == "keep me"
