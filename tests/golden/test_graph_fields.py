"""What a golden holds when kernels come from the captured graph: launch shapes, their source, topology.

Goldens written before these fields existed must compare exactly as they always did.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, ONE_CHECK, fake_project, run

from pytest_graphcapture._io import dumps_entries
from pytest_graphcapture.errors import GoldenError
from pytest_graphcapture.golden import diff as golden
from pytest_graphcapture.golden import store
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.model import Summary, summary_from_dict

ROOT = Path(__file__).resolve().parents[2]
#: The example goldens of captures whose kernels came from a CPU run or a replay (no ``kernel_source``); the
#: engine-trace examples' ROCm goldens name their capture windows as the source and are left out.
EXAMPLE_GOLDENS = sorted(
    p for p in (ROOT / "examples" / "goldens").rglob("*.json") if '"kernel_source"' not in p.read_text(encoding="utf-8")
)
MM = {"name": "aten::mm", "input_dims": [[8, 256], [256, 256]]}
SGEMM = "sgemm_128x64_nn"


@pytest.fixture
def gate(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    return fake_project(pytester, monkeypatch, ONE_CHECK)


def graph_summary(kernels: list, *, branches: int = 2, source: str = "graph") -> Summary:
    return Summary(
        key=CaptureKey("Fake", 8),
        platform="cuda-sm90",
        kernels=kernels,
        ops=[],
        launches={"total": sum(k["count"] for k in kernels), "by_api": {}},
        kernel_source=source,
        topology={"nodes": {"kernel": sum(k["count"] for k in kernels)}, "branches": branches},
    )


def lines(diff: golden.KeyDiff) -> list[str]:
    return [line.strip() for line in diff.render(None)]


def test_example_goldens_exist() -> None:
    assert len(EXAMPLE_GOLDENS) >= 8
    assert {p.relative_to(ROOT / "examples" / "goldens").parts[0] for p in EXAMPLE_GOLDENS} >= {"cpu", "cuda-sm90"}


@pytest.mark.parametrize("path", EXAMPLE_GOLDENS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_golden_reads_and_writes_back_unchanged(path: Path) -> None:
    """No new field appears in a summary that has none: CPU and replay goldens keep their bytes."""
    data = store.load_golden_dict(path)
    summary = store.summary_from_dict(data, path)
    written = summary.to_dict()
    assert "kernel_source" not in written and "topology" not in written
    fields = {k: v for k, v in data.items() if k in written}
    assert dumps_entries(written) == dumps_entries(fields)


@pytest.mark.parametrize("path", EXAMPLE_GOLDENS, ids=lambda p: str(p.relative_to(ROOT)))
def test_committed_golden_passes_against_the_same_kernels_read_from_the_graph(path: Path) -> None:
    """A golden without launch shapes or topology compares as before, though the run now carries both."""
    data = store.load_golden_dict(path)
    expected = store.summary_from_dict(data, path)
    richer = dict(data, kernel_source="graph", topology={"nodes": {"kernel": 3, "memcpy": 1}, "branches": 1})
    richer["kernels"] = [
        dict(k, launch="<<<{16,10,2},128,0>>>") if k.get("kind", "kernel") == "kernel" else dict(k)
        for k in data["kernels"]
    ]
    actual = summary_from_dict(richer, "richer")
    assert golden.compare(expected, actual).ok
    assert golden.compare(actual, expected).ok  # the other way round too: a run without a readout
    # Not the same content, so --update-golden rewrites the file with the new fields.
    assert not store.same_content(data, actual.to_dict())
    # And a real kernel change still shows, launch shapes or not.
    if data["kernels"]:
        fewer = dict(richer, kernels=richer["kernels"][1:])
        assert not golden.compare(expected, summary_from_dict(fewer, "fewer")).ok


def test_changed_launch_shape_is_one_changed_kernel_line_per_op() -> None:
    old = graph_summary([{"name": SGEMM, "count": 1, "op": MM, "launch": "<<<{16,10,2},128,0>>>"}])
    new = graph_summary([{"name": SGEMM, "count": 1, "op": MM, "launch": "<<<{32,10,2},128,0>>>"}])
    diff = golden.compare(old, new)
    assert lines(diff)[1:] == [
        "kernels: 1 changed",
        f"~ aten::mm [[8,256],[256,256]]: {SGEMM} <<<{{16,10,2}},128,0>>> → <<<{{32,10,2}},128,0>>> (×1)",
    ]


def test_changed_launch_shape_is_one_changed_line_without_ops() -> None:
    old = graph_summary([{"name": SGEMM, "count": 2, "launch": "<<<{16,10,2},128,0>>>"}])
    new = graph_summary([{"name": SGEMM, "count": 2, "launch": "<<<{16,10,2},256,1024>>>"}])
    assert lines(golden.compare(old, new))[1:] == [
        "kernels: 1 changed",
        f"~ {SGEMM} <<<{{16,10,2}},128,0>>> → <<<{{16,10,2}},256,1024>>> (×2)",
    ]


def test_launch_shape_change_with_other_counts_reads_as_removed_and_added() -> None:
    old = graph_summary([{"name": SGEMM, "count": 2, "launch": "<<<16,128,0>>>"}])
    new = graph_summary([{"name": SGEMM, "count": 3, "launch": "<<<32,128,0>>>"}])
    assert lines(golden.compare(old, new, sections=("kernels",)))[1:] == [
        "kernels: 1 added, 1 removed, 1 changed",
        f"- {SGEMM} <<<16,128,0>>> ×2",
        f"+ {SGEMM} <<<32,128,0>>> ×3",
        "~ graph nodes (kernel) count 2 → 3",
    ]


def test_fewer_branches_is_a_regression_and_node_counts_are_compared() -> None:
    kernels = [{"name": SGEMM, "count": 2, "launch": "<<<16,128,0>>>"}]
    old, new = graph_summary(kernels, branches=2), graph_summary(kernels, branches=1)
    new.topology["nodes"]["event_record"] = 1
    assert lines(golden.compare(old, new))[1:] == [
        "kernels: 2 changed",
        "~ graph nodes (event_record) count 0 → 1",
        "~ graph branches (nodes that can run at once) 2 → 1",
    ]


def test_kernel_source_alone_is_no_difference() -> None:
    kernels = [{"name": SGEMM, "count": 1, "launch": "<<<16,128,0>>>"}]
    assert graph_summary(kernels, source="graph") == graph_summary(kernels, source="dot")
    assert golden.compare(graph_summary(kernels, source="graph"), graph_summary(kernels, source="replay")).ok


def test_launch_shapes_survive_normalization_and_the_golden_text(tmp_path: Path) -> None:
    summary = graph_summary(
        [
            {"name": "_Z5sgemmPf", "count": 1, "launch": "<<<16,128,0>>>"},
            {"name": "_Z5sgemmPf", "count": 2, "launch": "<<<{32,2},128,0>>>"},
        ]
    )
    normalized = summary.normalized("name")
    assert [(k["name"], k["launch"], k["count"]) for k in normalized.kernels] == [
        ("sgemm", "<<<16,128,0>>>", 1),
        ("sgemm", "<<<{32,2},128,0>>>", 2),
    ]
    text = normalized.to_json()
    assert '{"name": "sgemm", "count": 1, "kind": "kernel", "launch": "<<<16,128,0>>>"},' in text
    assert '"topology": {"branches": 2, "nodes": {"kernel": 3}},' in text
    assert '"kernel_source": "graph",' in text
    assert summary_from_dict(json.loads(text)) == normalized


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("launch", "<<<16,128>>>", "kernels[0].launch must be a launch shape like <<<{16,10,2},128,0>>>"),
        ("launch", 16, "kernels[0].launch must be a launch shape"),
        (
            "kernel_source",
            "profiler",
            "kernel_source must be one of graph-data, graph, replay, capture-window, dot or null",
        ),
        ("topology", {"nodes": {"kernel": 0}, "branches": 1}, 'topology must be {"nodes"'),
        ("topology", {"nodes": {"kernel": 2}}, 'topology must be {"nodes"'),
        ("topology", [1], 'topology must be {"nodes"'),
    ],
)
def test_bad_new_fields_in_a_golden_name_the_file_and_field(
    tmp_path: Path, field: str, value: object, problem: str
) -> None:
    data = graph_summary([{"name": SGEMM, "count": 1, "launch": "<<<16,128,0>>>"}]).to_dict()
    if field == "launch":
        data["kernels"][0]["launch"] = value
    else:
        data[field] = value
    path = tmp_path / "Fake_bs_8.json"
    path.write_text(json.dumps(data))
    with pytest.raises(GoldenError) as info:
        store.summary_from_dict(store.load_golden_dict(path), path)
    assert str(path) in str(info.value) and problem in str(info.value)
    assert "\n" not in str(info.value)


GRAPH_SUMMARIES = """
_plain = make_summary
def make_summary(bs, runner, platform):
    # The same kernels, now read from the graph: each with its launch shape, plus the topology.
    s = _plain(bs, runner, platform)
    for kernel in s.kernels:
        kernel["launch"] = "<<<GRID,128,0>>>"
    s.kernel_source = "graph"
    s.topology = {"nodes": {"kernel": s.kernel_count()}, "branches": BRANCHES}
    return s
"""


def _graph_conftest(grid: str = "{16,10,2}", branches: int = 1) -> str:
    return FAKE_CONFTEST + GRAPH_SUMMARIES.replace("GRID", grid).replace("BRANCHES", str(branches))


def test_an_older_golden_passes_a_graph_capture_until_update_rewrites_it(gate: pytest.Pytester) -> None:
    """As users run it: goldens written before launch shapes pass; --update-golden adds them; then they count."""
    run(gate, "--update-golden").assert_outcomes(passed=1)
    paths = sorted((gate.path / "goldens").rglob("*.json"))
    before = {p: p.read_text() for p in paths}
    assert paths and not any('"launch"' in text or '"topology"' in text for text in before.values())
    gate.makeconftest(_graph_conftest())
    run(gate).assert_outcomes(passed=1)
    assert {p: p.read_text() for p in paths} == before  # a check never writes
    run(gate, "--update-golden").assert_outcomes(passed=1)
    after = {p: p.read_text() for p in paths}
    for text in after.values():
        assert '"launch": "<<<{16,10,2},128,0>>>"' in text and '"topology": {"branches": 1, ' in text
        assert '"kernel_source": "graph",' in text
    run(gate).assert_outcomes(passed=1)
    gate.makeconftest(_graph_conftest(grid="{32,10,2}", branches=1))
    result = run(gate)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*~ gemv_kernel <<<{16,10,2},128,0>>> → <<<{32,10,2},128,0>>> (×2)*"])
    gate.makeconftest(_graph_conftest(branches=0))
    result = run(gate)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*~ graph branches (nodes that can run at once) 1 → 0*"])
    assert {p: p.read_text() for p in paths} == after
