"""The HTML picture: kernel × batch-size matrix, highlighting against goldens, self-contained, from the CLI."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, real_traces_dir, run

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.naming import key_stem
from pytest_graphcapture.summary.model import Summary
from pytest_graphcapture.tools import cli, matrix, picture


def summary(
    bs: int,
    kernels: dict[str, int],
    *,
    runner: str = "R",
    variant: str | None = None,
    ops: dict[str, int] | None = None,
    complete: bool = True,
) -> Summary:
    return Summary(
        key=CaptureKey(runner, bs, variant),
        platform="cuda-sm90",
        kernels=[{"name": n, "kind": "kernel", "count": c} for n, c in kernels.items()],
        ops=[{"name": n, "input_dims": [[bs]], "input_types": ["float"], "count": c} for n, c in (ops or {}).items()],
        launches={"total": sum(kernels.values()), "by_api": {"cudaLaunchKernel": sum(kernels.values())}},
        complete=complete,
        incomplete_reason=None if complete else "replay missing",
    )


def write(folder: Path, s: Summary) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{key_stem(s.key)}.json").write_text(json.dumps(s.to_dict()))


def cells(page: str) -> list[tuple[str, str]]:
    """``(class, text)`` of every numeric cell, in order."""
    return re.findall(r'<td class="n(?: ([a-z]+))?"[^>]*>(.*?)</td>', page)


def test_rows_and_cells_against_goldens() -> None:
    golden = [summary(1, {"gemv": 2, "rmsnorm_fused": 3}), summary(8, {"gemm": 2, "rmsnorm_fused": 3})]
    now = [
        summary(1, {"gemv": 2, "rms_a": 3, "rms_b": 3}),
        summary(8, {"gemm": 4, "rms_a": 3, "rms_b": 3}),
        summary(16, {"gemm": 4}),
    ]
    (table,) = picture.build_tables([("t", s) for s in now], [("t", s) for s in golden])
    assert table.batch_sizes == [1, 8, 16] and table.golden_batch_sizes == {1, 8}
    states = {row.name: row.state for row in table.kernels}
    assert states == {"gemm": "changed", "gemv": "same", "rms_a": "added", "rms_b": "added", "rmsnorm_fused": "removed"}
    gemm = next(r for r in table.kernels if r.name == "gemm")
    assert [gemm.cell_state(bs, bs in table.golden_batch_sizes) for bs in table.batch_sizes] == [
        "same",
        "changed",
        "no-golden",
    ]
    assert table.counts() == {"added": 2, "removed": 1, "changed": 1}

    page = picture.render_html([table], compared=True)
    # Changed rows first, by name (gemm, rms_a, rms_b, rmsnorm_fused), then gemv; columns bs=1, 8, 16.
    assert [r.name for r in table.kernels] == ["gemm", "rms_a", "rms_b", "rmsnorm_fused", "gemv"]
    assert cells(page) == [
        ("zero", "·"),
        ("changed", "2→4"),
        ("", "4"),
        ("added", "+3"),
        ("added", "+3"),
        ("zero", "·"),
        ("added", "+3"),
        ("added", "+3"),
        ("zero", "·"),
        ("removed", "<s>3</s>"),
        ("removed", "<s>3</s>"),
        ("zero", "·"),
        ("", "2"),
        ("zero", "·"),
        ("zero", "·"),
    ]
    assert '<tr class="removed"><td class="name" title="rmsnorm_fused">− rmsnorm_fused</td>' in page
    assert 'class="nogolden"' in page and "bs=16*" in page
    assert "2 added" in page and "1 removed" in page and "1 changed" in page


def test_page_is_self_contained_and_escaped() -> None:
    name = 'void k<float, "x">(float*) <script>alert(1)</script>'
    page = picture.render_html(picture.build_tables([("", summary(4, {name: 1}))]))
    assert "<script" not in page.lower()
    assert "&lt;script&gt;" in page
    for needle in ("http://", "https://", "src=", "@import", "url("):
        assert needle not in page, needle
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


def test_ops_table_and_cpu_note() -> None:
    now = [summary(bs, {}, ops={"aten::mm": 2, "aten::silu": 1}) for bs in (1, 2)]
    before = [summary(bs, {}, ops={"aten::mm": 2, "aten::gelu": 1}) for bs in (1, 2)]
    (table,) = picture.build_tables([("", s) for s in now], [("", s) for s in before])
    assert {r.name: r.state for r in table.ops} == {"aten::gelu": "removed", "aten::mm": "same", "aten::silu": "added"}
    page = picture.render_html([table], compared=True)
    assert "No kernels recorded" in page and "<details open>" in page
    assert "<b>3 ops</b>" in page and "1 added" in page and "1 removed" in page


def test_groups_by_folder_and_variant_and_marks_incomplete() -> None:
    obtained = [
        ("a", summary(1, {"k": 1})),
        ("b", summary(1, {"k": 1})),
        ("a", summary(1, {"k": 1}, variant="lora")),
        ("a", summary(2, {"k": 1}, complete=False)),
    ]
    tables = picture.build_tables(obtained)
    assert [(t.folder, t.variant, t.batch_sizes) for t in tables] == [
        ("a", None, [1, 2]),
        ("a", "lora", [1]),
        ("b", None, [1]),
    ]
    assert tables[0].incomplete == {2: "replay missing"}
    assert "bs=2: incomplete kernel evidence" in picture.render_html(tables)


def test_cli_show_html_against_golden_tree(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    for bs in (1, 4):
        write(tmp_path / "goldens" / "cuda-sm90" / "test_x.py" / "test_y", summary(bs, {"gemm": 1, "old": 1}))
        write(tmp_path / "out" / "cuda-sm90" / "test_x.py" / "test_y", summary(bs, {"gemm": 1, "new": 2}))
    (tmp_path / "out" / "cuda-sm90" / "test_x.py" / "test_y" / "diff.txt").write_text("ignored")
    out = tmp_path / "p.html"
    code = cli.main(["show", str(tmp_path / "out"), "--html", str(out), "--against", str(tmp_path / "goldens")])
    assert code == 0, capsys.readouterr().err
    page = out.read_text(encoding="utf-8")
    assert "cuda-sm90/test_x.py/test_y — R rank 0, cuda-sm90, level name" in page
    assert page.count('class="n added"') == 2 and page.count('class="n removed"') == 2
    assert f"wrote {out}" in capsys.readouterr().out


def test_cli_show_html_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["show", str(tmp_path), "--against", str(tmp_path)]) == 2
    assert "--against compares in the HTML picture" in capsys.readouterr().err
    assert cli.main(["show", str(tmp_path), "--html", str(tmp_path / "x.html")]) == 2
    err = capsys.readouterr().err
    assert "contains no summary JSON or trace files" in err and len(err.strip().splitlines()) == 1
    write(tmp_path / "d", summary(1, {"k": 1}))
    assert cli.main(["show", str(tmp_path / "d"), "--html", str(tmp_path / "d" / "R_bs_1.json" / "x.html")]) == 2
    assert "--html" in capsys.readouterr().err


def test_real_mi300x_capture_renders_its_kernels(tmp_path: Path) -> None:
    trace = real_traces_dir() / "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
    if not trace.exists():
        pytest.skip(
            f"real traces not found at {trace.parent}: set GRAPH_CAPTURE_REAL_TRACES to the folder "
            f"holding tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
        )
    folder = tmp_path / "traces"
    folder.mkdir()
    (folder / trace.name).symlink_to(trace)
    (s,) = matrix.load_summaries(folder / trace.name)
    page = picture.picture_from_dirs(folder)
    (table,) = picture.build_tables([("", s)])
    assert table.batch_sizes == [32]
    assert sum(r.counts[32] for r in table.kernels) == sum(k["count"] for k in s.kernels) > 500
    assert any(r.name.startswith("Cijk_") for r in table.kernels)  # hipBLASLt GEMMs at name level
    assert page.count('<td class="name"') >= len(table.kernels)


# The shared fake capture with this module's model: a GEMM and a norm kernel named by FAKE_NORM.
SESSION_CONFTEST = (
    FAKE_CONFTEST
    + """
PLATFORM = "cuda-sm90"
BATCH_SIZES = "1,4"


def make_summary(bs, runner, platform):
    norm = os.environ.get("FAKE_NORM", "fused_rmsnorm_kernel")
    kernels = [{"name": "gemm_kernel", "kind": "kernel", "count": 2},
               {"name": norm, "kind": "kernel", "count": 3}]
    return Summary(key=CaptureKey(runner, bs), platform=platform, kernels=kernels, ops=[],
                   launches={"total": 5, "by_api": {}})
"""
)


def test_session_report_links_the_picture(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FAKE_NORM", "FAKE_PLATFORM", "FAKE_BATCH_SIZES", "FAKE_NO_SUMMARY"):
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest(SESSION_CONFTEST)
    pytester.makepyfile(test_model="def test_decode(fake_capture, golden):\n    golden.check(fake_capture())\n")
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_NORM", "rsqrt_kernel")
    result = run(pytester, "--golden-out", "out", "--graph-capture-report", "ci/report.md")
    result.assert_outcomes(failed=1)
    markdown = (pytester.path / "ci" / "report.md").read_text()
    assert "[report.html](<report.html>)" in markdown
    page = (pytester.path / "ci" / "report.html").read_text()
    assert "cuda-sm90/test_model.py/test_decode — Fake rank 0" in page
    assert re.search(r'<tr class="added"><td class="name" title="rsqrt_kernel">', page)
    assert re.search(r'<tr class="removed"><td class="name" title="fused_rmsnorm_kernel">', page)
    # Without --golden-out there is nothing obtained on disk to picture: no HTML, no link.
    (pytester.path / "ci" / "report.html").unlink()
    (pytester.path / "ci" / "report.md").unlink()  # a report is added to what the file holds
    run(pytester, "--graph-capture-report", "ci/report.md").assert_outcomes(failed=1)
    assert not (pytester.path / "ci" / "report.html").exists()
    assert "report.html" not in (pytester.path / "ci" / "report.md").read_text()


# --------------------------------------------------------------------------- shapes, unmatched goldens, subfolders


def mm_summary(bs: int, hidden: int) -> Summary:
    """A CPU capture whose only op is ``aten::mm`` of ``[bs, hidden] x [hidden, 256]``, twice."""
    return Summary(
        key=CaptureKey("R", bs),
        platform="cpu",
        ops=[
            {
                "name": "aten::mm",
                "input_dims": [[bs, hidden], [hidden, 256]],
                "input_types": ["float", "float"],
                "count": 2,
            }
        ],
        launches={"total": 0, "by_api": {}},
    )


def test_a_shape_only_change_shows_as_a_changed_op() -> None:
    now = [mm_summary(bs, 128) for bs in (1, 2)]
    before = [mm_summary(bs, 256) for bs in (1, 2)]
    (table,) = picture.build_tables([("", s) for s in now], [("", s) for s in before])
    (mm,) = table.ops
    assert mm.state == "changed" and mm.counts == mm.golden == {1: 2, 2: 2}
    page = picture.render_html([table], compared=True)
    assert "<b>1 ops</b>" in page and '<span class="changed">1 changed</span>' in page
    # The cell says the count stayed and shows the shapes that changed, inline: golden → now.
    assert [text.split("<div", 1)[0] for _, text in cells(page)] == ["2, other shapes", "2, other shapes"]
    assert (
        '<div class="shapes"><span class="was">[[1,256],[256,256]] ×2</span> → '
        '<span class="now">[[1,128],[128,256]] ×2</span></div>' in page
    )
    # Only the dtypes changed: the cell names them, since the dims alone read the same.
    half = [mm_summary(bs, 256) for bs in (1, 2)]
    for s in half:
        s.ops[0]["input_types"] = ["c10::Half", "c10::Half"]
    typed = picture.render_html(picture.build_tables([("", s) for s in half], [("", s) for s in before]), compared=True)
    assert '[[1,256],[256,256]] float,float ×2</span> → <span class="now">[[1,256],[256,256]] c10::Half' in typed
    assert "golden [[1,256],[256,256]] float,float ×2; now [[1,128],[128,256]] float,float ×2" in page
    assert '"n, other shapes"' in page and "n shapes" not in page
    (same,) = picture.build_tables([("", s) for s in before], [("", s) for s in before])
    assert same.ops[0].state == "same"


def test_kernels_and_ops_get_their_own_counts_line() -> None:
    now = [summary(1, {"gemm": 1}, ops={"aten::mm": 1})]
    before = [summary(1, {"gemm": 1}, ops={"aten::mm": 1, "aten::add": 1})]
    (table,) = picture.build_tables([("", s) for s in now], [("", s) for s in before])
    page = picture.render_html([table], compared=True)
    assert "<b>1 kernels</b>" in page and "<b>2 ops</b>" in page and "1 removed" in page


def test_show_against_says_why_no_golden_matched(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    traces, goldens = tmp_path / "graph_capture_profile", tmp_path / "goldens"
    write(traces, summary(1, {"gemm": 1}))
    write(goldens / "cuda-sm90" / "test_x.py" / "test_y", summary(1, {"gemm": 1}))
    out = tmp_path / "p.html"
    assert cli.main(["show", str(traces), "--html", str(out), "--against", str(goldens)]) == 0, capsys.readouterr()
    page = out.read_text(encoding="utf-8")
    assert (
        "No golden matched: no golden in folder &#x27;.&#x27; of the golden dir: goldens of this runner, variant, "
        "rank and platform are in cuda-sm90/test_x.py/test_y; goldens are matched by their folder relative to the "
        "golden dir, so point --against at the folder that mirrors this one." in page
    )
    # Pointed at the test's folder, the same trace folder is compared.
    assert (
        cli.main(["show", str(traces), "--html", str(out), "--against", str(goldens / "cuda-sm90/test_x.py/test_y")])
        == 0
    )
    assert "No golden matched" not in out.read_text(encoding="utf-8")
    write(tmp_path / "others" / "other", summary(1, {"gemm": 1}, runner="Other"))
    write(tmp_path / "mine" / "other", summary(1, {"gemm": 1}))
    assert cli.main(["show", str(tmp_path / "mine"), "--html", str(out), "--against", str(tmp_path / "others")]) == 0
    assert (
        "the goldens in folder &#x27;other&#x27; are for Other rank 0 on cuda-sm90, not R rank 0 on cuda-sm90: "
        "goldens are matched by runner, variant, rank and platform" in out.read_text(encoding="utf-8")
    )


def test_cli_show_text_searches_subfolders(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    write(tmp_path / "fp16", summary(1, {"gemm_fp16": 1}))
    write(tmp_path / "bf16", summary(2, {"gemm_bf16": 3}))
    assert cli.main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "bf16 — R rank 0, cuda-sm90, level name" in out and "fp16 — R rank 0, cuda-sm90, level name" in out
    assert "gemm_fp16" in out and "gemm_bf16" in out


def test_unchanged_rows_hide_behind_a_toggle_that_is_on_when_something_changed() -> None:
    now = [summary(1, {"gemm": 2, "norm": 1}), summary(2, {"gemm": 2, "norm": 1})]
    before = [summary(1, {"gemm": 2, "norm": 2}), summary(2, {"gemm": 2, "norm": 2})]
    page = picture.render_html(picture.build_tables([("", s) for s in now], [("", s) for s in before]), compared=True)
    assert '<input type="checkbox" id="only-changed" class="toggle" checked>' in page
    assert "#only-changed:checked ~ .tables tr.same{display:none}" in page
    assert '<tr class="same"><td class="name" title="gemm">gemm</td>' in page
    assert '<tr class="changed"><td class="name" title="norm">~ norm</td>' in page
    # Nothing changed: the toggle is there, off, and says so where it would hide everything.
    same = picture.render_html(picture.build_tables([("", s) for s in now], [("", s) for s in now]), compared=True)
    assert '<input type="checkbox" id="only-changed" class="toggle">' in same
    assert "Nothing changed here" in same
    assert 'id="only-changed"' not in picture.render_html(picture.build_tables([("", s) for s in now]))


def test_a_page_without_kernels_is_titled_ops_by_batch_size() -> None:
    cpu = picture.render_html(picture.build_tables([("", mm_summary(1, 64))]))
    assert "<h1>Graph capture: ops × batch size</h1>" in cpu and "kernels × batch size" not in cpu
    gpu = picture.render_html(picture.build_tables([("", summary(1, {"gemm": 1}))]))
    assert "<h1>Graph capture: kernels × batch size</h1>" in gpu


def test_cli_show_text_prints_the_op_rows_of_cpu_goldens(capsys: pytest.CaptureFixture) -> None:
    goldens = Path(__file__).resolve().parents[2] / "examples/goldens/cpu/test_decode_graphs.py"
    assert cli.main(["show", str(goldens)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("(no kernels recorded: ops × batch size)")
    assert lines[1].split()[-2:] == ["kind", "op"]
    folder = next(goldens.iterdir())
    sizes = sorted(int(p.stem.rsplit("_", 1)[1]) for p in folder.glob("*.json"))
    expected = [
        str(
            sum(
                o["count"]
                for o in json.loads((folder / f"TinyDecodeRunner_bs_{bs}.json").read_text())["ops"]
                if o["name"] == "aten::mm"
            )
        )
        for bs in sizes
    ]
    mm = next(line for line in lines if line.endswith("  aten::mm"))
    assert mm.split()[: len(sizes)] == expected  # one row per op, its calls per batch size


CHROMIUM = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def _chromium() -> str:
    import shutil

    for name in CHROMIUM:
        found = shutil.which(name)
        if found:
            return found
    pytest.skip(
        "no Chromium to render the page in: install it (Debian: apt-get install -y chromium) to run the browser test"
    )


def test_a_real_browser_shows_the_changed_shape_as_text(tmp_path: Path) -> None:
    """Headless Chromium renders the picture of a widened MLP; the changed shape is in the rendered text."""
    import subprocess

    browser = _chromium()
    now = [mm_summary(bs, 192) for bs in (1, 2)]
    before = [mm_summary(bs, 128) for bs in (1, 2)]
    page = tmp_path / "picture.html"
    page.write_text(
        picture.render_html(picture.build_tables([("", s) for s in now], [("", s) for s in before]), compared=True),
        encoding="utf-8",
    )
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--dump-dom",
        page.as_uri(),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # What the browser laid out: tags dropped, the text of the cells as a reader sees it.
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", dom, flags=re.S)))
    assert "[[1,128],[128,256]] ×2 → [[1,192],[192,256]] ×2" in text
    assert "2, other shapes" in text and "ops × batch size" in text


# --------------------------------------------------------------------------- one row order, show's help, 1280 px


def test_show_text_and_the_picture_list_rows_in_one_order(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """``show`` prints the page's row order: compute ops first (GEMM, norm, activation), other ops, view ops last."""
    ops = ["aten::view", "aten::add", "aten::t", "aten::silu", "aten::mm", "aten::_softmax", "aten::layer_norm"]
    for bs in (1, 4):
        write(tmp_path / "cpu", summary(bs, {}, ops=dict.fromkeys(ops + ["aten::empty"], 1)))
        write(tmp_path / "gpu", summary(bs, {"void b_kernel<float>()": 1, "a_kernel": 2}))
    expected = {
        "cpu": ["aten::mm", "aten::layer_norm", "aten::_softmax", "aten::silu", "aten::add"]
        + ["aten::empty", "aten::t", "aten::view"],
        "gpu": ["a_kernel", "void b_kernel<float>()"],
    }
    for folder, names in expected.items():
        assert cli.main(["show", str(tmp_path / folder)]) == 0
        text = capsys.readouterr().out.splitlines()[2:]
        assert [line.split("  ")[-1] for line in text] == names
        page = tmp_path / f"{folder}.html"
        assert cli.main(["show", str(tmp_path / folder), "--html", str(page)]) == 0
        assert capsys.readouterr().out == f"wrote {page}\n"
        assert re.findall(r'<td class="name" title="([^"]*)"', html.unescape(page.read_text())) == names


def test_show_help_says_what_dir_is_and_what_it_shows_on_cpu_and_gpu(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listing = re.sub(r"\s+", " ", capsys.readouterr().out.split(" show ", 1)[1].split(" accept ", 1)[0])
    with pytest.raises(SystemExit):
        cli.main(["show", "--help"])
    page = capsys.readouterr().out
    for text in (listing, page):  # a CPU capture records no kernels: its table is ops
        assert re.search(r"\bkernels\b.*\bGPU\b", text, re.S) and re.search(r"\bops\b.*\bCPU\b", text, re.S), text
    assert re.search(r"^ +DIR +\w+", page, re.M), page  # DIR has a help text


#: Run in the page after layout: every cell's content stays in its box, or is cut with an ellipsis and a tooltip.
OVERFLOW_PROBE = """<script>
document.querySelectorAll('details').forEach(d => { d.open = true; });
document.querySelectorAll('input[type=checkbox]').forEach(c => { c.checked = false; });
const bad = []; let cut = 0, shapes = 0;
for (const cell of document.querySelectorAll('td, th')) {
  const box = cell.getBoundingClientRect(), style = getComputedStyle(cell);
  const what = cell.textContent.slice(0, 80);
  shapes += cell.querySelector('.shapes') ? 1 : 0;
  if (style.overflowX !== 'visible') {
    if (cell.scrollWidth <= cell.clientWidth) continue;
    cut += 1;
    if (style.textOverflow !== 'ellipsis' || !cell.title) bad.push('cut without ellipsis and tooltip: ' + what);
    continue;
  }
  const range = document.createRange();
  range.selectNodeContents(cell);
  if ([...range.getClientRects()].some(r => r.left < box.left - 0.5 || r.right > box.right + 0.5))
    bad.push('spills over its neighbours: ' + what);
}
const out = document.createElement('pre');
out.id = 'probe';
out.textContent = JSON.stringify({width: window.innerWidth, cut, shapes, bad});
document.body.appendChild(out);
</script>"""


def test_no_cell_spills_over_its_neighbours_at_1280px(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Headless Chromium lays out a bf16 picture at 1280 px: long type lists wrap in their cell, long names are cut."""
    import subprocess

    browser = _chromium()
    kernel = (
        "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_bf16_64x64_tn<" + "c10::BFloat16, " * 20 + ">>()"
    )
    for bs in (1, 2, 4, 8, 16, 32, 64, 128):
        for side, dtype, launches in (("goldens", "float", 1), ("out", "c10::BFloat16", 2)):
            s = summary(bs, {kernel: launches, "gemm": 1}, ops={"aten::mm": 2})
            s.ops[0].update(input_dims=[[bs, 4096], [4096, 4096], [4096], [], [bs, 32, 128]], input_types=[dtype] * 5)
            write(tmp_path / side, s)
    page = tmp_path / "picture.html"
    code = cli.main(["show", str(tmp_path / "out"), "--html", str(page), "--against", str(tmp_path / "goldens")])
    assert code == 0, capsys.readouterr().err
    page.write_text(page.read_text(encoding="utf-8").replace("</body>", OVERFLOW_PROBE + "</body>"), encoding="utf-8")
    shot = tmp_path / "picture.png"  # kept beside the page: look at it when this fails
    command = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=1280,900"]
    command += [f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--dump-dom", page.as_uri()]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stdout[-2000:]
    probe = json.loads(html.unescape(found.group(1)))
    assert probe["width"] == 1280 and probe["shapes"] == 8 and probe["cut"] >= 1, probe
    assert probe["bad"] == [], f"{probe['bad']} (screenshot: {shot})"
