"""Graph dumps (DOT) as input: the parser on real-label fixtures, the topology, bad input, the CLI.

The fixtures under tests/data/graph_dumps are built from real CUDA and HIP label
formats; their README says which details are real output and which are assumed.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_graphcapture.errors import FileError
from pytest_graphcapture.summary.dot import parse_dot, read_dot_file, summarize_dot_file
from pytest_graphcapture.summary.graph import (
    CapturedGraph,
    CycleError,
    GraphNode,
    Launch,
    copy_direction,
    max_antichain,
)
from pytest_graphcapture.tools.cli import main

DUMPS = Path(__file__).resolve().parents[1] / "data" / "graph_dumps"
REDUCE = "_ZN2at6native13reduce_kernelILi128ELi4ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIfffEclERNS_14TensorIteratorEEUlffE_EEjfLi4EEEEEvT1_"


def _kernels(graph: CapturedGraph) -> list[tuple[str, str]]:
    return [(n.name, str(n.launch)) for n in graph.walk() if n.type == "kernel"]


# --------------------------------------------------------------------------- the fixtures


def test_cuda_verbose_dump_two_branches_memset_and_memcpy() -> None:
    graph = read_dot_file(DUMPS / "cuda_verbose_two_branch.dot")
    assert [n.type for n in graph.nodes] == ["memset", "kernel", "kernel", "kernel", "kernel", "kernel", "memcpy"]
    assert _kernels(graph) == [
        ("ampere_sgemm_128x64_tn", "<<<{16,10,2},128,0>>>"),
        (
            "_ZN2at6native43_GLOBAL__N__50f1b6c4_10_Dropout_cu_0e96ed3824fused_dropout_kernel_vecIffjLi1ELi4EbEEvNS_4cuda6d"
            "etail10TensorInfoIKT_T1_EENS5_IS6_S8_EENS5_IT4_S8_EES8_T0_NS_15PhiloxCudaStateE",
            "<<<432,256,0>>>",
        ),
        ("ampere_sgemm_128x64_nn", "<<<{16,10,4},128,0>>>"),
        ("_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm_256x128_8x4_nt_align1EEvNT_6ParamsE", "<<<64,256,49152>>>"),
        (REDUCE, "<<<8,{32,4},2048>>>"),
    ]
    assert graph.nodes[5].launch == Launch((8, 1, 1), (32, 4, 1), 2048)
    assert graph.nodes[6].name == "DtoD"
    assert graph.topology() == {"nodes": {"kernel": 5, "memcpy": 1, "memset": 1}, "edges": 7, "branches": 2}


def test_cuda_child_graph_and_conditional_bodies_are_read_into_their_nodes() -> None:
    graph = read_dot_file(DUMPS / "cuda_child_graph.dot")
    assert [n.type for n in graph.nodes] == ["kernel", "event_record", "graph", "host", "empty", "kernel"]
    child = graph.nodes[2].children
    assert len(child) == 1 and [n.type for n in child[0].nodes] == ["memset", "kernel", "kernel", "conditional"]
    body = child[0].nodes[3].children
    assert len(body) == 1 and [n.name for n in body[0].nodes] == [
        "_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm_256x128_8x4_nt_align1EEvNT_6ParamsE"
    ]
    topology = graph.topology()
    assert topology["nodes"] == {
        "conditional": 1,
        "empty": 1,
        "event_record": 1,
        "graph": 1,
        "host": 1,
        "kernel": 5,
        "memset": 1,
    }
    # the host branch (event record, host) beside the child's two parallel sgemms
    assert topology["branches"] == 3


def test_hip_verbose_dump_reads_like_the_cuda_one() -> None:
    graph = read_dot_file(DUMPS / "hip_verbose.dot")
    assert [n.type for n in graph.nodes] == ["memset", "kernel", "kernel", "memcpy", "event_record", "graph"]
    assert graph.nodes[3].name == "DtoD"
    assert [n.type for n in graph.nodes[5].children[0].nodes] == ["kernel", "empty"]
    kernels = _kernels(graph)
    assert kernels[1] == (
        "Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_1LDSB0_GRVW4_K1_TT2_32_WG32_8_1",
        "<<<{16,10,2},256,8192>>>",
    )
    # HIP's (8,1,1),(32,4,1),2048 is CUDA's 8,{32,4},2048
    assert kernels[2] == (REDUCE, "<<<8,{32,4},2048>>>")
    assert graph.topology()["branches"] == 2


def test_hip_kernel_params_dump_with_its_unclosed_style_and_plain_labels() -> None:
    graph = read_dot_file(DUMPS / "hip_kernel_params.dot")
    assert [(n.type, n.name) for n in graph.nodes if n.type != "kernel"] == [
        ("memset", ""),
        ("memcpy", "DtoH"),
        ("host", ""),
    ]
    assert [str(n.launch) for n in graph.nodes if n.type == "kernel"] == [
        "<<<8,256,0>>>",
        "<<<{16,10,2},256,8192>>>",
        "<<<{16,10,2},256,8192>>>",
    ]
    assert graph.topology()["branches"] == 2


def test_summary_demangles_and_normalizes_kernel_names_like_trace_kernels() -> None:
    summary = summarize_dot_file(DUMPS / "cuda_verbose_two_branch.dot", level="family")
    assert summary.kernel_source == "dot" and summary.level == "family"
    names = {(k["name"], k.get("launch")) for k in summary.kernels}
    assert ("at::native::reduce_kernel", "<<<8,{32,4},2048>>>") in names
    assert ("GEMM", "<<<64,256,49152>>>") in names
    exact = summarize_dot_file(DUMPS / "cuda_verbose_two_branch.dot", level="exact").kernels
    assert any(k["name"].startswith("void at::native::reduce_kernel<128, 4,") for k in exact)
    # copies are named as a profiled replay names them, so a dump's summary compares with a capture's
    assert [(k["name"], k["count"]) for k in summary.kernels if k["kind"] == "memcpy"] == [
        ("Memcpy DtoD (Device -> Device)", 1)
    ]
    assert summary.topology == {"nodes": {"kernel": 5, "memcpy": 1, "memset": 1}, "branches": 2}
    assert summary.key.runner == "cuda_verbose_two_branch" and summary.platform == "graph-dump"


def test_default_flag_labels_without_launch_shapes() -> None:
    text = (
        "digraph dot {\nsubgraph cluster_0 {\n"
        '"graph_0_node_0"[style="bold"shape="octagon"label="0\n_Z6kernelPf\n"];\n'
        '"graph_0_node_1"[style="solid"shape="trapezium"label="1\nMEMCPY\n(HtoD)"];\n'
        '"graph_0_node_2"[style="solid" shape="record" label="{KERNEL\n| {ID | 2 (topoId: 0) | _Z6kernelPf}\n}"];\n'
        '"graph_0_node_0" -> "graph_0_node_1"\n"graph_0_node_1" -> "graph_0_node_2"\n}\n}\n'
    )
    graph = parse_dot(text)
    assert [(n.type, n.name, n.launch) for n in graph.nodes] == [
        ("kernel", "_Z6kernelPf", None),
        ("memcpy", "HtoD", None),
        ("kernel", "_Z6kernelPf", None),
    ]
    assert graph.kernels("exact") == [{"name": "kernel(float*)", "count": 2}]


def test_quoted_strings_with_escaped_quotes_line_continuations_and_lookalike_keys() -> None:
    text = (
        "digraph dot {\n"
        '"a"[tooltip="label=\\"x\\"" xlabel="{MEMSET}" label="{KERNEL | {ID | 0 | k\\<\\<\\<4,32,0\\>\\>\\>}}"];\n'
        '"b"[style="label" label="{KERN\\\nEL | {ID | 1 | k2\\<\\<\\<8,32,0\\>\\>\\>}}"];\n'
        '"c\\"q"[label="{MEMCPY | {kind | HtoD}}"];\n'
        '"a" -> "b"; "b" -> "c\\"q"\n}\n'
    )
    graph = parse_dot(text.replace('"a" -> "b";', '"a" -> "b" [style="dashed"];'))
    assert [(n.ident, n.type, n.name, str(n.launch)) for n in graph.nodes] == [
        ("a", "kernel", "k", "<<<4,32,0>>>"),
        ("b", "kernel", "k2", "<<<8,32,0>>>"),
        ('c"q', "memcpy", "HtoD", "None"),
    ]
    assert graph.edges == [(0, 1), (1, 2)]


@pytest.mark.parametrize(
    "attrs, node_type",
    [
        ('[style="bold" shape="record" label="{MEMSET}"]', "memset"),  # as the runtimes write a node
        ('[label="{MEMSET}" label="{HOST}"]', "memset"),  # the first label counts
        ('[label2="{HOST}" xlabel="{HOST}", label="{MEMSET}";]', "memset"),  # keys that only contain "label"
        ('[tooltip="label" label ="{HOST}" label="{MEMSET}"]', "host"),  # spaces around '='
        ('[ style = "x" ;label="{MEMSET}" , ]', "memset"),
        ('[shape=record label="{MEMSET}"]', "memset"),  # an unquoted value
        ("[label=MEMSET]", "memset"),  # an unquoted label: a plain label with the type word alone
        ('[width=1label="{MEMSET}"]', None),  # "label" glued to a value is no key: no label
    ],
)
def test_a_nodes_label_is_its_first_label_key_however_the_list_is_written(attrs: str, node_type: str | None) -> None:
    text = f'digraph dot {{\n"a"{attrs};\n}}\n'
    if node_type is None:
        with pytest.raises(FileError, match="node a has no label"):
            parse_dot(text)
    else:
        assert [n.type for n in parse_dot(text).nodes] == [node_type]


@pytest.mark.parametrize("space", [" ", "\t", "\n", "\x1f"])
def test_white_space_of_any_kind_around_a_launch_dimension(space: str) -> None:
    label = f"{{KERNEL | {{ID | 0 | k\\<\\<\\<{space}\\{{16,10,2\\}}{space},{space}(32,4){space},0\\>\\>\\>}}}}"
    (node,) = parse_dot(f'digraph dot {{\n"a"[label="{label}"];\n}}\n').nodes
    assert node.launch == Launch((16, 10, 2), (32, 4, 1), 0)


def test_an_unquoted_node_id_holds_letters_digits_underscores_and_any_non_ascii_character() -> None:
    for char in [chr(c) for c in range(1, 128)] + ["é", "ß", "中", "٣", "\u00a0", "\U0001f600"]:
        inside = char.isascii() and (char.isalnum() or char == "_") or not char.isascii()
        try:
            nodes = parse_dot(f'digraph dot {{\nx{char}y[label="{{EMPTY}}"];\n}}\n').nodes
        except FileError:
            nodes = []
        assert (bool(nodes) and nodes[0].ident == f"x{char}y") == inside, repr(char)


def test_edges_with_attributes_after_plain_edges() -> None:
    text = "digraph dot {\n" + "".join(f'"{n}"[label="{{KERNEL | {n}}}"];\n' for n in "abc")
    graph = parse_dot(text + '"a" -> "b"\n"b" -> "c" [style="dashed"]\n"a" -> "c";\n}\n')
    assert graph.edges == [(0, 1), (1, 2), (0, 2)]


# --------------------------------------------------------------------------- branches


def _graph(count: int, edges: list[tuple[int, int]], types: dict[int, str] | None = None) -> CapturedGraph:
    types = types or {}
    return CapturedGraph([GraphNode(str(i), types.get(i, "kernel")) for i in range(count)], list(edges))


def test_branches_is_not_the_widest_level() -> None:
    # r -> x1 -> x2 -> x3, r -> y, x1 -> z: levels are {r} {x1,y} {x2,z} {x3} (width 2),
    # but y, z and x2 are pairwise unordered
    r, x1, x2, x3, y, z = range(6)
    graph = _graph(6, [(r, x1), (x1, x2), (x2, x3), (r, y), (x1, z)])
    assert graph.branches() == 3


def test_branches_needs_an_augmenting_path_where_greedy_matching_stops_short() -> None:
    # Pairing each node greedily with a free direct successor stops at 2 pairs (width 4); the
    # maximum, 3 pairs, needs a re-pairing along an augmenting path: width 3 ({1, 2, 3})
    edges = [(0, 1), (0, 4), (0, 5), (3, 4), (3, 5), (4, 5)]
    assert _graph(6, edges).branches() == 3 == _brute_width(6, edges)


def test_structural_nodes_order_but_are_not_counted() -> None:
    # k0 -> empty -> k2, and k3 alone: the empty node orders k0 before k2
    graph = _graph(4, [(0, 1), (1, 2)], {1: "empty"})
    assert graph.branches() == 2
    graph = _graph(3, [], {0: "empty", 1: "empty"})
    assert graph.branches() == 1


def test_a_cycle_is_refused() -> None:
    with pytest.raises(CycleError):
        max_antichain(3, [[1], [2], [0]])


def _brute_width(count: int, edges: list[tuple[int, int]]) -> int:
    reach = [{v for a, v in edges if a == u} for u in range(count)]
    for _ in range(count):
        for u in range(count):
            for v in list(reach[u]):
                reach[u] |= reach[v]
    best = 0
    for size in range(1, count + 1):
        for subset in itertools.combinations(range(count), size):
            if all(b not in reach[a] and a not in reach[b] for a, b in itertools.combinations(subset, 2)):
                best = size
                break
    return best


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 9).flatmap(
        lambda n: st.tuples(st.just(n), st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))))
    )
)
def test_branches_equals_the_brute_force_maximum_antichain(case: tuple[int, set]) -> None:
    count, pairs = case
    edges = sorted({(min(a, b), max(a, b)) for a, b in pairs if a != b})  # forward edges only: a DAG
    assert _graph(count, edges).branches() == _brute_width(count, edges)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("", 1, "is empty"),
        ('{"traceEvents": []}', 1, "not a graph dump"),
        (
            'digraph dot {\n"a"[label="{KERNEL | x}"];\n"b"[label="{KERNEL | y}\n}\n',
            3,
            "cannot read the attribute list",
        ),
        ('digraph dot {\n"a"[label="{KERNEL | x}"];\n}\n}\n', 4, "'}' closes nothing"),
        ('digraph dot {\nsubgraph cluster_1 {\n"a"[label="{KERNEL | x}"];\n', 2, "never closed"),
        ('digraph dot {\n"a"[label="{KERNEL | x}"];\n"a" -> "b"\n}\n', 3, "node b is never declared"),
        (
            'digraph dot {\n"a"[label="{KERNEL | x}"];\n"b"[label="{KERNEL | y}"];\n"a" -> "b"\n"b" -> "a"\n}\n',
            2,
            "cycle",
        ),
        ('digraph dot {\n"a"[label="{KERNEL\n| {ID | 1 | k\\<\\<\\<4,x,0\\>\\>\\>}}"];\n}\n', 2, "launch shape"),
        ('digraph dot {\n"a"[label="{KERNEL\n| {ID | 1 | k\\<\\<\\<4,0\\>\\>\\>}}"];\n}\n', 2, "launch shape"),
        ('digraph dot {\n\n"a"[label="{KERNEL | {ID | 1}"];\n}\n', 3, "braces do not balance"),
        ('digraph dot {\n"a"[label="{KERNEL | x}"];\n"a" -> "a" -> "a"\n}\n', 3, "cannot read '-> \"a\"'"),
        ('digraph dot {\n"a"[shape="record"];\n}\n', 2, "has no label"),
        ('digraph dot {\n"a;\nb"[shape="record"];\n}\n', 2, "node a;\\nb has no label"),
        ('digraph dot {\n"a"[label="{KERNEL | x}"];\n"a"[label="{KERNEL | x}"];\n}\n', 3, "declared twice"),
        (
            'digraph dot {\nsubgraph cluster_1 {\n"graph_1_node_0"[label="{KERNEL | x}"];\n}\n'
            'subgraph cluster_2 {\n"graph_2_node_0"[label="{KERNEL | y}"];\n}\n}\n',
            5,
            "graph_2 is the child of no node",
        ),
    ],
)
def test_bad_dump_is_one_line_naming_the_file_and_line(tmp_path: Path, text: str, line: int, problem: str) -> None:
    path = tmp_path / "graph.dot"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(FileError) as caught:
        read_dot_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    assert problem in message, message
    if text:
        assert f"line {line}:" in message, message


_FRAGMENTS = [
    "digraph dot {",
    "subgraph cluster_1 {",
    "}",
    '"graph_1_node_0"',
    '"graph_1_node_1"',
    "[",
    "]",
    ";",
    " -> ",
    'label="',
    '"',
    "{KERNEL | {ID | 1 | k\\<\\<\\<",
    "\\{16,10,2\\},128,0",
    "(8,1,1),(32,4,1),2048",
    "\\>\\>\\>}}",
    "0\nMEMCPY\n(DtoD)",
    "CHILD_GRAPH | graph_2",
    "\n",
    "\\",
    "=",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(_FRAGMENTS), st.text(max_size=3)), max_size=30))
def test_any_text_reads_or_is_one_line_error(parts: list[str]) -> None:
    try:
        parse_dot("".join(parts))
    except FileError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<dot>: ")


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(DUMPS.glob("*.dot"))), st.data())
def test_a_damaged_fixture_reads_or_is_one_line_error(path: Path, data: st.DataObject) -> None:
    text = path.read_text(encoding="utf-8")
    start = data.draw(st.integers(0, len(text)))
    end = data.draw(st.integers(start, min(len(text), start + 40)))
    try:
        parse_dot(text[:start] + data.draw(st.text(max_size=3)) + text[end:])
    except FileError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("<dot>: line ")


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(FileError, match="not a regular file"):
        read_dot_file(tmp_path)
    binary = tmp_path / "g.dot"
    binary.write_bytes(b"digraph dot {\xff\xfe")
    with pytest.raises(FileError, match="not UTF-8"):
        read_dot_file(binary)
    with pytest.raises(FileError, match="does not exist"):
        read_dot_file(tmp_path / "missing.dot")


# --------------------------------------------------------------------------- the command


def test_cli_summarize_prints_a_dumps_kernels_launches_and_topology(capsys: pytest.CaptureFixture) -> None:
    assert main(["summarize", str(DUMPS / "cuda_verbose_two_branch.dot"), "--level", "family"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["topology"] == {"branches": 2, "nodes": {"kernel": 5, "memcpy": 1, "memset": 1}}
    assert data["kernel_source"] == "dot" and data["ops"] == []
    assert {"name": "at::native::reduce_kernel", "kind": "kernel", "count": 1, "launch": "<<<8,{32,4},2048>>>"} in (
        data["kernels"]
    )
    # one kernel a line, as in a summary
    assert sum(1 for line in captured.out.splitlines() if '"launch"' in line) == 5
    assert "the dump does not say its batch size" in captured.err


def test_cli_summarize_a_bad_dump_or_a_replay_with_one_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "bad.dot"
    bad.write_text('digraph dot {\n"a" -> "b"\n}\n', encoding="utf-8")
    assert main(["summarize", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{bad}: line 2: edge a -> b: node a is never declared" in err
    dump = str(DUMPS / "hip_verbose.dot")
    assert main(["summarize", dump, "--replay", dump]) == 2
    assert "is a graph dump" in capsys.readouterr().err


def test_cli_summarize_a_dump_beside_a_trace_prints_a_list(tmp_path: Path) -> None:
    trace = DUMPS.parent / "cuda-sm90" / "TinyDecodeRunner_bs_1_rank0.json.gz"
    out = tmp_path / "both.json"
    assert main(["summarize", str(DUMPS / "hip_kernel_params.dot"), str(trace), "--out", str(out)]) == 0
    dump, summary = json.loads(out.read_text(encoding="utf-8"))
    assert dump["kernel_source"] == "dot" and dump["topology"]["nodes"]["kernel"] == 3
    assert summary["key"]["runner"] == "TinyDecodeRunner"


@pytest.mark.parametrize(
    "kind, direction",
    [
        ("cudaMemcpyDefault", "default"),
        ("hipMemcpyDefault", "default"),
        ("Default", "default"),
        ("cudaMemcpyHostToDevice", "HtoD"),
        ("cudaMemcpyDeviceToDevice", "DtoD"),
        ("DeviceToHost", "DtoH"),
        ("DtoD", "DtoD"),
    ],
)
def test_copy_kinds_read_as_directions(kind: str, direction: str) -> None:
    assert copy_direction(kind) == direction
