"""sglang's trace names and layouts (0.5.22 variant tags, draft runners, TraceLens's ``bs_{N}_rank{r}``, the single trace's
variants, 0.5.18-0.5.21 mislabels) and TraceLens folders with their sidecars, by every route that reads engine traces."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from helpers import check_cli

PROFILE = "graph_capture_profile"

#: 0.5.22+ per-size names: attention variant (with ``_`` in it), LoRA label, stream, and draft/speculative runners.
PER_SIZE = {
    "DecodeCudaGraphRunner_bs_8_dense": 8,
    "DecodeCudaGraphRunner_bs_8_sparse": 8,
    "DecodeCudaGraphRunner_bs_8_candidate_c2_all_lora_stream_1": 8,
    "DraftDecodeCudaGraphRunner_bs_8": 8,
    "UnoDecodeCudaGraphRunner_bs_4_lora": 4,
    "UnoDecodeCudaGraphRunner_bs_4_nolora": 4,
}


@pytest.fixture(scope="module")
def layouts(make_traces, capture, tmp_path_factory):
    """``layouts(name) -> folder``: each layout written once for the module from the real capture window."""
    root = tmp_path_factory.mktemp("sglang41")

    written: dict = {}

    def write(path: Path, sizes, drop=None) -> None:
        """A trace of one window per size (``drop``: the window, from 0, that loses a launch); each content built once."""
        if (tuple(sizes), drop) not in written:
            events, at = [], capture.end + make_traces.GAP
            for i, bs in enumerate(sizes):
                shape, at = capture.shape(bs, at, 1, 1 if i == drop else None)
                events += shape
                at += make_traces.GAP
            trace = json.dumps({**capture.top, "traceEvents": events}).encode()
            written[tuple(sizes), drop] = gzip.compress(trace, compresslevel=1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(written[tuple(sizes), drop])

    folders = {"per-size": root / "per-size" / PROFILE}
    for stem, bs in PER_SIZE.items():
        write(folders["per-size"] / f"{stem}_rank0.json.gz", [bs])
    for stem in (
        "DecodeCudaGraphRunner_bs_8_sparse",
        "DraftDecodeCudaGraphRunner_bs_8",
        "UnoDecodeCudaGraphRunner_bs_4_nolora",
    ):
        folders[stem] = Path(shutil.copytree(folders["per-size"], root / stem / PROFILE))
        write(folders[stem] / f"{stem}_rank0.json.gz", [PER_SIZE[stem]], drop=0)
    tracelens = folders["tracelens"] = root / "tracelens" / "capture_traces"
    for bs in (8, 4):
        write(tracelens / f"bs_{bs}_rank0.json.gz", [bs])
    details = [{"file": f"bs_{bs}_rank0.json.gz", "batch_size": bs, "mode": "FULL"} for bs in (8, 4)]
    (tracelens / "execution_details.json").write_text(json.dumps(details))
    (tracelens / "execution_details.csv").write_text("file,batch_size,mode\nbs_8_rank0.json.gz,8,FULL\n")
    for name, sizes in (("flat-list", (8, 8, 4)), ("one-per-size", (8, 4, 2))):  # 0.5.18-0.5.21: named 8, 4, 2
        for bs, graph in zip((8, 4, 2), sizes):
            write(root / name / f"DecodeCudaGraphRunner_bs_{bs}_rank0.json.gz", [graph])
        folders[name] = root / name
    single = "cuda_graph_capture-DecodeCudaGraphRunner-TP-0.json.gz"
    for name, sizes, drop in (("single", [8, 8, 4, 4], None), ("single-nolora-changed", [8, 8, 4, 4], 3)):
        write(root / name / single, sizes, drop)  # bs desc, then lora, nolora
        folders[name] = root / name
    write(root / "single-nolora-gone" / single, [8, 4])
    folders["single-nolora-gone"] = root / "single-nolora-gone"
    return folders.__getitem__


@pytest.fixture(scope="module")
def per_size_goldens(layouts, tmp_path_factory):
    golden = tmp_path_factory.mktemp("per-size-goldens")
    from pytest_graphcapture.tools.cli import main

    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("CI", raising=False)  # CI refuses --update; these goldens are the test's own
        assert main(["check", str(layouts("per-size")), "--golden-dir", str(golden), "--update"]) == 0
    return golden


def test_every_part_of_a_per_size_name_keys_its_own_golden(per_size_goldens):
    names = sorted(p.name for p in (per_size_goldens / "rocm-gfx942" / "engine-traces").iterdir())
    assert names == sorted(f"{stem}.json" for stem in PER_SIZE)


@pytest.mark.parametrize(
    "changed, label",
    [
        ("DecodeCudaGraphRunner_bs_8_sparse", "DecodeCudaGraphRunner bs=8 variant=sparse"),
        ("DraftDecodeCudaGraphRunner_bs_8", "DraftDecodeCudaGraphRunner bs=8"),
        ("UnoDecodeCudaGraphRunner_bs_4_nolora", "UnoDecodeCudaGraphRunner bs=4 variant=nolora"),
    ],
)
def test_a_change_in_one_variant_fails_only_that_key(capsys, layouts, per_size_goldens, changed, label):
    code, out, _ = check_cli(capsys, layouts(changed), "--golden-dir", per_size_goldens)
    assert code == 1
    assert f"does not match its goldens for {label} (platform rocm-gfx942, level name, 1 of 6 keys)" in out
    assert f"{changed}.json):\n  kernels: 1 removed" in out


def test_a_variant_gone_fails(capsys, layouts, per_size_goldens, tmp_path):
    folder = Path(shutil.copytree(layouts("per-size"), tmp_path / PROFILE))
    (folder / "DecodeCudaGraphRunner_bs_8_sparse_rank0.json.gz").unlink()
    code, out, _ = check_cli(capsys, folder, "--golden-dir", per_size_goldens)
    assert code == 1
    assert "for DecodeCudaGraphRunner bs=8 variant=sparse (not captured)" in out


def test_a_tracelens_folder_is_checked_and_its_sidecars_passed_over(capsys, layouts, tmp_path):
    folder, golden = layouts("tracelens"), tmp_path / "goldens"
    code, out, err = check_cli(capsys, folder, "--golden-dir", golden, "--update")
    assert (code, err) == (0, ""), out
    assert "bs_4_rank0.json.gz: 1 key(s) by file name: bs=4" in out
    assert out.rstrip().endswith(
        "2 key(s) match their goldens in "
        f"{golden}/rocm-gfx942/engine-traces/ (2 written, passed over 2 files that are not traces: "
        "execution_details.csv, execution_details.json)"
    )
    # No runner in the name: the class that writes them in TraceLens's sglang 0.5.13 patch.
    assert sorted(p.name for p in golden.rglob("*.json")) == ["CudaGraphRunner_bs_4.json", "CudaGraphRunner_bs_8.json"]


@pytest.mark.parametrize("name, content", [("bs_2_rank0.json.gz", b"not gzip"), ("bs_2_rank0.json", b"[]")])
def test_a_broken_file_named_like_a_trace_still_fails(capsys, layouts, tmp_path, name, content):
    folder = Path(shutil.copytree(layouts("tracelens"), tmp_path / "capture_traces"))
    (folder / name).write_bytes(content)
    code, _, err = check_cli(capsys, folder, "--golden-dir", tmp_path / "goldens", "--update")
    assert code == 2
    assert err.startswith(f"graphcapture check: error: {folder / name}: ") and "Traceback" not in err
    assert not (tmp_path / "goldens").exists()


def test_a_folder_of_sidecars_only_is_nothing_to_check(capsys, tmp_path):
    (tmp_path / "execution_details.json").write_text("[]")
    code, _, err = check_cli(capsys, tmp_path, "--golden-dir", tmp_path / "goldens")
    assert code == 2
    assert "only passed over 1 file that is not a trace: execution_details.json" in err


def test_per_size_files_named_from_a_flat_size_list_are_refused(capsys, layouts, tmp_path):
    """sglang 0.5.18-0.5.21 (#39092): with two graphs at bs=8, the second is written as bs_4, the third as bs_2."""
    code, _, err = check_cli(capsys, layouts("flat-list"), "--golden-dir", tmp_path / "goldens", "--update")
    assert code == 2
    assert "DecodeCudaGraphRunner_bs_4_rank0.json.gz: is named bs=4, but its inputs lead with 8, never with 4" in err
    assert "sglang 0.5.18-0.5.21 mislabel" in err and "#39092" in err
    code, _, err = check_cli(capsys, layouts("one-per-size"), "--golden-dir", tmp_path / "goldens", "--update")
    assert (code, err) == (0, "")


def test_single_trace_variants_key_apart_and_match_the_per_size_goldens(capsys, layouts, tmp_path):
    golden = tmp_path / "goldens"
    options = ["--golden-dir", golden, "--batch-sizes", "8,4", "--variants", "lora,nolora"]
    code, out, _ = check_cli(capsys, layouts("single"), *options, "--update")
    assert code == 0, out
    assert "4 key(s) by windows: bs=8 variant=lora, bs=8 variant=nolora, bs=4 variant=lora, bs=4 variant=nolora" in out
    folder = golden / "rocm-gfx942" / "engine-traces"
    assert sorted(p.name for p in folder.iterdir()) == [
        f"DecodeCudaGraphRunner_bs_{bs}_{v}.json" for bs in (4, 8) for v in ("lora", "nolora")
    ]
    code, out, _ = check_cli(capsys, layouts("single-nolora-changed"), *options)
    assert code == 1
    assert "does not match its goldens for bs=4 variant=nolora (platform rocm-gfx942, level name, 1 of 4 keys)" in out
    assert "--batch-sizes 8,4 --variants lora,nolora --update" in out
    code, _, err = check_cli(capsys, layouts("single-nolora-gone"), *options)
    assert code == 2
    assert "holds 2 capture windows but 4 batch sizes were given (2 sizes x 2 variants)" in err
    code, out, _ = check_cli(capsys, layouts("single-nolora-gone"), *options[:-1], "lora")
    assert code == 1
    assert "bs=4 variant=nolora (not captured), bs=8 variant=nolora (not captured)" in out
    for wrong in (["--variants", "lora,lora", "--batch-sizes", "8,4"], ["--variants", "lora,nolora"]):
        code, _, err = check_cli(capsys, layouts("single"), "--golden-dir", golden, *wrong)
        assert (code, err) == (
            2,
            f"graphcapture check: error: --variants {wrong[1]}: distinct labels in capture order, with --batch-sizes\n",
        )


def test_check_traces_reads_the_same_layouts(pytester, layouts):
    """The pytest route: variants of the single trace, the TraceLens sidecars, the flat-list mislabel."""
    tests = {
        "single": (layouts("single"), ", batch_sizes=[8, 4], variants=['lora', 'nolora']"),
        "tracelens": (layouts("tracelens"), ""),
        "flat": (layouts("flat-list"), ""),
    }

    def write_tests() -> None:
        pytester.makepyfile(
            test_engine="".join(
                f"\ndef test_{name}(golden):\n    golden.check_traces({str(path)!r}{extra})\n"
                for name, (path, extra) in tests.items()
            )
        )

    write_tests()
    result = pytester.runpytest("--update-golden", "-W", "always")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*golden.check_traces: *DecodeCudaGraphRunner_bs_4_rank0.json.gz: is named bs=4*#39092*",
            "*passed over 2 files that are not traces: execution_details.csv, execution_details.json*",
        ],
        consecutive=False,
    )
    tests["single"] = (layouts("single-nolora-changed"), tests["single"][1])
    write_tests()
    result = pytester.runpytest("-k", "single")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*does not match its goldens for bs=4 variant=nolora *"])
