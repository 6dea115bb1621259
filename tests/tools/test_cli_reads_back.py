"""Everything the CLI writes, it reads back: each command's output given to the commands that read summaries.

``graphcapture summarize`` of a trace, of a graph dump, or of several files writes JSON;
``diff`` and ``show`` take each of them as input.  Graph dumps are read whatever their
Graphviz suffix or compression, and a dump named like a trace is still read as a dump.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
from helpers import REPO_ROOT

from pytest_graphcapture.tools.cli import main

DUMPS = REPO_ROOT / "tests" / "data" / "graph_dumps"
TRACE = REPO_ROOT / "tests" / "data" / "cuda-sm90" / "TinyDecodeRunner_bs_1_rank0.json.gz"


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("source", [DUMPS / "cuda_verbose_two_branch.dot", DUMPS / "hip_kernel_params.dot", TRACE])
def test_a_summary_the_cli_wrote_is_read_by_diff_and_show(
    tmp_path: Path, capsys: pytest.CaptureFixture, source: Path
) -> None:
    out = tmp_path / "summaries" / "one.json"
    out.parent.mkdir()
    assert _run(capsys, "summarize", str(source), "--out", str(out))[0] == 0
    code, text, err = _run(capsys, "diff", str(out), str(source))
    assert (code, err) == (0, "") and text.startswith("equal"), text + err
    code, text, err = _run(capsys, "diff", str(out), str(out))
    assert code == 0 and text.startswith("equal")
    code, text, err = _run(capsys, "show", str(out.parent))
    assert code == 0 and err == "", err
    written = json.loads(out.read_text(encoding="utf-8"))
    kernel = written["kernels"][0]["name"]
    assert kernel in text


def test_several_summaries_in_one_file_are_shown_and_diffed_key_by_key(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    folder = tmp_path / "both"
    folder.mkdir()
    shutil.copy(DUMPS / "cuda_child_graph.dot", tmp_path / "Graph_bs_2_rank0.dot")
    out = folder / "both.json"
    assert _run(capsys, "summarize", str(tmp_path / "Graph_bs_2_rank0.dot"), str(TRACE), "--out", str(out))[0] == 0
    code, text, err = _run(capsys, "show", str(folder))
    assert code == 0 and "Graph rank 0" in text and "TinyDecodeRunner rank 0" in text and "bs=2" in text
    code, text, err = _run(capsys, "diff", str(out), str(out))
    assert code == 0 and "2 keys in both, 0 differ" in text, (text, err)


def test_two_dumps_are_diffed_directly_naming_what_changed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    before = tmp_path / "before" / "Graph_bs_8_rank0.dot"
    after = tmp_path / "after" / "Graph_bs_8_rank0.dot"
    before.parent.mkdir()
    after.parent.mkdir()
    text = (DUMPS / "cuda_verbose_two_branch.dot").read_text(encoding="utf-8")
    before.write_text(text, encoding="utf-8")
    after.write_text(text.replace("\\{16,10,2\\},128,0", "\\{32,10,2\\},128,0"), encoding="utf-8")
    code, out, err = _run(capsys, "diff", str(before), str(after))
    assert code == 1, err
    assert "<<<{16,10,2},128,0>>> → <<<{32,10,2},128,0>>>" in out


@pytest.mark.parametrize("name", ["g.dot.gz", "g.gv", "g.GV.gz", "g.DOT", "named_like_a_trace.json"])
def test_a_dump_is_read_whatever_its_graphviz_suffix_or_compression(
    tmp_path: Path, capsys: pytest.CaptureFixture, name: str
) -> None:
    data = (DUMPS / "hip_verbose.dot").read_bytes()
    path = tmp_path / name
    path.write_bytes(gzip.compress(data) if name.lower().endswith(".gz") else data)
    code, out, err = _run(capsys, "summarize", str(path))
    assert code == 0, err
    assert json.loads(out)["kernel_source"] == "dot"
    code, out, err = _run(capsys, "diff", str(path), str(DUMPS / "hip_verbose.dot"))
    assert code in (0, 1) and "error" not in err, err


@pytest.mark.parametrize("name", ["broken.dot.gz", "broken.gv"])
def test_a_damaged_dump_is_refused_naming_graph_dumps(tmp_path: Path, capsys: pytest.CaptureFixture, name: str) -> None:
    path = tmp_path / name
    body = b'{"traceEvents": []}'
    path.write_bytes(gzip.compress(body) if name.endswith(".gz") else body)
    code, out, err = _run(capsys, "summarize", str(path))
    assert code == 2 and err.count("\n") == 1
    assert f"{path}: line 1: not a graph dump" in err
