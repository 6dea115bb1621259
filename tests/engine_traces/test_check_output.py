"""What ``graphcapture check`` leaves behind: failure lines that read entry by entry, pointers that lead to a
file, a report that adds to the step summary, and goldens rewritten only for what they gate."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from helpers import check_cli as check
from helpers import run

from pytest_graphcapture.golden.change import MAX_LINE_WIDTH
from pytest_graphcapture.tools.cli import main

FOLDER = Path("rocm-gfx942") / "engine-traces"
#: How a change line separates its entries, old from new, and the op from its kernels; a cut keeps every one.
SEPARATORS = re.compile(r"(; | → |: )")


def edit_goldens(goldens: Path, edit) -> None:
    """Apply ``edit(data)`` to every golden of one graph."""
    for path in sorted((goldens / FOLDER).glob("*.json")):
        data = json.loads(path.read_text())
        if "graphs" not in data:  # a key of several graphs holds their sums: left as it is
            edit(data)
            path.write_text(json.dumps(data, indent=1))


def grow_kernels(extra: int):
    """An edit of each op launching several kernels: its first kernel renamed ``extra`` longer, the others once more.

    The change line then holds a kernel swap (old → new) and count changes, one entry after another.
    """

    def edit(part: dict) -> None:
        by_op: dict[str, list] = {}
        for entry in part["kernels"]:
            by_op.setdefault(json.dumps(entry.get("op"), sort_keys=True), []).append(entry)
        for first, *others in (entries for entries in by_op.values() if len(entries) > 1):
            if extra:
                first["name"] += "_" + "x" * extra
            for entry in others if extra else [first, *others]:
                entry["count"] += 1

    return edit


def is_cut_of(short: str, full: str) -> bool:
    """``short`` is ``full`` with parts cut out (``…``) inside its fields, every separator between entries kept."""
    a, b = SEPARATORS.split(short), SEPARATORS.split(full)
    if len(a) != len(b) or a[1::2] != b[1::2]:
        return False
    for s, f in zip(a[0::2], b[0::2]):
        pieces = s.split("…")
        if not (f.startswith(pieces[0]) and f.endswith(pieces[-1])):
            return False
        at = len(pieces[0])
        for piece in pieces[1:-1]:
            at = f.find(piece, at)
            if at < 0:
                return False
            at += len(piece)
    return True


@pytest.mark.parametrize("extra", [0, 30, 90, 400])
def test_a_long_change_line_is_cut_inside_its_fields_never_across_entries(goldens, built, tmp_path, capsys, extra):
    edit_goldens(goldens, grow_kernels(extra))
    harvest = tmp_path / "harvest"
    code, out, _ = check(capsys, built("vllm"), "--golden-dir", goldens, "--golden-out", harvest)
    assert code == 1
    full = (harvest / FOLDER / "diff.txt").read_text().splitlines()
    # A change line, per key or for a run of sizes (``bs=2,4,8: ~ …``).
    changed = [re.sub(r"^bs=[\d,…]+: ", "", line.strip()) for line in out.splitlines()]
    changed = [line for line in changed if line.startswith(("~ ", "+ ", "- "))]
    cut = [line for line in changed if "…" in line and "view/metadata" not in line]
    assert cut, out  # the edit makes lines too long for one screen line
    for line in cut:
        matches = [f.strip() for f in full if is_cut_of(line, f.strip())]
        assert matches, f"{line!r} is not a field-wise cut of any line of the full diff"
        assert line.count("→") == matches[0].count("→")
    assert all(len(line) <= MAX_LINE_WIDTH + 40 for line in cut)


def view_and_compute_ops(part: dict) -> None:
    """An edit: one view op and one compute op launch once more, so the view op line folds."""
    views = [op for op in part["ops"] if op["name"] in ("aten::view", "aten::as_strided", "aten::transpose")]
    computes = [op for op in part["ops"] if op["name"] in ("aten::copy_", "aten::embedding", "aiter::rmsnorm")]
    for op in views[:2] + computes[:1]:
        op["count"] += 1


@pytest.mark.parametrize("harvested", [False, True])
def test_folded_view_op_lines_point_only_at_a_file_that_exists(goldens, built, tmp_path, capsys, harvested):
    edit_goldens(goldens, view_and_compute_ops)
    args = ("--golden-out", tmp_path / "harvest") if harvested else ()
    code, out, _ = check(capsys, built("vllm"), "--golden-dir", goldens, *args)
    assert code == 1
    folded = [line for line in out.splitlines() if "view/metadata op line" in line]
    assert folded, out
    assert "per-batch-size diff" not in out
    for line in folded:
        named = re.search(r"full diff in (\S+)$", line)
        if harvested:
            assert named and Path(named[1]).is_file(), line
        else:
            assert named is None, line


def links(report: Path) -> list[Path]:
    """The files a Markdown report links, resolved from its folder."""
    return [report.parent / target for target in re.findall(r"\]\(<([^>]+)>\)", report.read_text())]


EARLIER = "## Tests\n\nwritten by an earlier step\n"


@pytest.mark.parametrize("runs", [1, 2])
def test_report_md_into_the_step_summary_adds_to_it_and_links_no_file(
    goldens, built, tmp_path, capsys, monkeypatch, runs
):
    summary = tmp_path / "runner" / "step_summary_1"
    summary.parent.mkdir()
    summary.write_text(EARLIER)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    harvest = tmp_path / "harvest"
    for _ in range(runs):
        args = ("--golden-dir", goldens, "--golden-out", harvest, "--report-md", summary)
        code, _, _ = check(capsys, built("vllm", drop=(4, "PIECEWISE", 2)), *args)
        assert code == 1
    text = summary.read_text()
    assert text.startswith(EARLIER) and text.count("## Graph capture goldens") == runs
    assert list(summary.parent.iterdir()) == [summary]  # nothing written into the runner's folder
    assert links(summary) == []
    picture = harvest / "picture.html"
    assert picture.is_file() and f"`{picture}`" in text  # named where the harvest is uploaded
    assert main(["accept", str(harvest), "--golden-dir", str(goldens)]) == 0  # the picture is no golden


def test_report_md_into_a_file_of_its_own_adds_to_it_and_links_the_picture_beside_it(
    goldens, built, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "elsewhere"))
    report = tmp_path / "out" / "report.md"
    report.parent.mkdir()
    report.write_text(EARLIER)
    args = ("--golden-dir", goldens, "--golden-out", tmp_path / "harvest", "--report-md", report)
    code, _, _ = check(capsys, built("vllm", drop=(4, "PIECEWISE", 2)), *args)
    assert code == 1
    assert report.read_text().startswith(EARLIER + "\n## Graph capture goldens")
    assert links(report) and all(target.is_file() for target in links(report))


PYTEST_CHECK = """
def test_engine_capture(golden):
    golden.check_traces({traces!r})
"""


@pytest.mark.parametrize("step_summary", [True, False])
def test_graph_capture_report_adds_to_the_file_and_links_only_what_opens(pytester, built, monkeypatch, step_summary):
    report = pytester.path / "runner" / "summary.md"
    report.parent.mkdir()
    report.write_text(EARLIER)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(report if step_summary else pytester.path / "elsewhere"))
    pytester.makepyfile(test_engine=PYTEST_CHECK.format(traces=str(built("vllm"))))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    report.write_text(EARLIER)
    pytester.makepyfile(test_engine=PYTEST_CHECK.format(traces=str(built("vllm", drop=(4, "PIECEWISE", 2)))))
    result = run(pytester, "--golden-out=harvest", f"--graph-capture-report={report}")
    result.assert_outcomes(failed=1)
    text = report.read_text()
    assert text.startswith(EARLIER) and "bs=4 variant=PIECEWISE" in text
    assert all(target.is_file() for target in links(report))
    if step_summary:
        assert links(report) == [] and list(report.parent.iterdir()) == [report]
        assert (pytester.path / "harvest" / "picture.html").is_file() and "picture.html`" in text
    else:
        assert [p.name for p in links(report)] == ["summary.html"]


def with_stack_off(data: dict) -> None:
    data["environment"]["profiler"]["with_stack"] = not data["environment"]["profiler"]["with_stack"]


def another_device(data: dict) -> None:
    data["environment"]["device_count"] = 8
    data["environment"]["device_name"] = "AMD Instinct MI300X (another)"


def read_by_replay(data: dict) -> None:
    data["kernel_source"] = "replay"  # how the kernels were read: a profiler setting, compared by no check


def canonical(goldens: Path) -> dict[str, bytes]:
    """Every golden rewritten in the writer's own layout, as an update would leave it: name → bytes."""
    from pytest_graphcapture.golden import store

    out = {}
    for path in sorted((goldens / FOLDER).glob("*.json")):
        store.write_golden(path, json.loads(path.read_text()))
        out[path.name] = path.read_bytes()
    return out


def edit_every_golden(goldens: Path, *edits) -> None:
    for path in sorted((goldens / FOLDER).glob("*.json")):
        data = json.loads(path.read_text())
        for edit in edits:
            edit(data)
        path.write_text(json.dumps(data))


NOT_GATED = [(with_stack_off,), (another_device,), (read_by_replay,), (with_stack_off, another_device, read_by_replay)]


@pytest.mark.parametrize("edits", NOT_GATED, ids=lambda e: "+".join(f.__name__ for f in e))
def test_check_update_rewrites_no_golden_for_what_it_does_not_gate(goldens, built, capsys, edits):
    edit_every_golden(goldens, *edits)
    before = canonical(goldens)  # in the writer's layout: only a change of content can alter the bytes
    code, out, _ = check(capsys, built("vllm"), "--golden-dir", goldens, "--update")
    assert code == 0 and "written" not in out
    assert canonical(goldens) == before == {p.name: p.read_bytes() for p in sorted((goldens / FOLDER).glob("*"))}
    # A change of what a golden gates is still written, in that golden only.
    drop = built("vllm", drop=(8, "FULL", 1))
    assert check(capsys, drop, "--golden-dir", goldens, "--update")[0] == 0
    after = {p.name: p.read_bytes() for p in sorted((goldens / FOLDER).glob("*"))}
    assert [name for name in after if after[name] != before[name]] == ["decoder_bs_8_FULL.json"]


@pytest.mark.parametrize("edits", NOT_GATED[2:], ids=lambda e: "+".join(f.__name__ for f in e))
def test_update_golden_rewrites_no_golden_for_what_it_does_not_gate(pytester, built, edits):
    pytester.makepyfile(test_engine=PYTEST_CHECK.format(traces=str(built("vllm"))))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    folder = pytester.path / "goldens" / "rocm-gfx942" / "test_engine.py" / "test_engine_capture"
    for path in folder.glob("*.json"):
        data = json.loads(path.read_text())
        for edit in edits:
            edit(data)
        path.write_text(store_text(data))
    before = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    result = run(pytester, "--update-golden")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*0 created, 0 updated*"])
    assert {p.name: p.read_bytes() for p in sorted(folder.iterdir())} == before


def store_text(data: dict) -> str:
    from pytest_graphcapture.golden import store

    return store.dumps(data)


def entry_lines(path: Path) -> tuple[int, int]:
    """``(lines holding a kernel or op entry, kernel and op entries of the key)`` of a golden."""
    text = path.read_text()
    data = json.loads(text)
    lines = sum(line.lstrip().startswith('{"name": ') for line in text.splitlines())
    return lines, len(data["kernels"]) + len(data["ops"])


SHAPES = [("vllm", {}), ("vllm", {"piecewise": (2, 5)}), ("vllm", {"piecewise": (8, 2)}), ("sglang-per-bs", {})]


@pytest.mark.parametrize(("layout", "changes"), SHAPES, ids=lambda v: str(v))
def test_every_golden_is_one_line_per_entry_whatever_its_graphs(tmp_path, built, capsys, layout, changes):
    goldens, traces = tmp_path / "goldens", built(layout, **changes)
    assert check(capsys, traces, "--golden-dir", goldens, "--update")[0] == 0
    paths = sorted(goldens.rglob("*.json"))
    assert paths
    for path in paths:
        lines, entries = entry_lines(path)
        assert lines == entries, f"{path.name}: {lines} entry lines for {entries} entries"
        data = json.loads(path.read_text())
        assert len(path.read_text().splitlines()) <= entries + 30 + len(data.get("graphs", ()))
    # They gate as they did: the same traces pass, a launch dropped from one piece fails that graph.
    assert check(capsys, traces, "--golden-dir", goldens)[0] == 0
    bs, pieces = changes.get("piecewise", (4, 3))
    if layout == "vllm":
        code, out, _ = check(capsys, built("vllm", **changes, drop=(bs, "PIECEWISE", 2)), "--golden-dir", goldens)
        assert code == 1 and f"bs={bs} variant=PIECEWISE graph 2 of {pieces} (" in out


def test_update_golden_writes_a_key_of_several_graphs_one_line_per_entry(pytester, built):
    pytester.makepyfile(test_engine=PYTEST_CHECK.format(traces=str(built("vllm"))))
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    folder = pytester.path / "goldens" / "rocm-gfx942" / "test_engine.py" / "test_engine_capture"
    piecewise = folder / "decoder_bs_4_PIECEWISE.json"
    assert len(json.loads(piecewise.read_text())["graphs"]) == 3
    for path in sorted(folder.glob("*.json")):
        lines, entries = entry_lines(path)
        assert lines == entries, f"{path.name}: {lines} entry lines for {entries} entries"
    run(pytester).assert_outcomes(passed=1)
    pytester.makepyfile(test_engine=PYTEST_CHECK.format(traces=str(built("vllm", drop=(4, "PIECEWISE", 2)))))
    run(pytester).assert_outcomes(failed=1)
