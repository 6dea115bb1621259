"""The graph-dump reader's rule: every node in the file is in the graph, or the file is refused in one line.

Each class below once read with a summary missing nodes, or refused a valid dump, or
ended in an internal error: graphs unreachable from the top one, a cluster opened
twice, a child-graph node naming an absent graph, two top-level graphs, node type
words read as kernel names, escaped record separators in a kernel name, CRLF or CR
line ends, escaped quotes in multi-line labels, a byte-order mark, deep nesting.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from pytest_graphcapture.errors import FileError
from pytest_graphcapture.summary.dot import parse_dot, read_dot_file, summarize_dot_file
from pytest_graphcapture.summary.graph import Launch

DUMPS = Path(__file__).resolve().parents[1] / "data" / "graph_dumps"


def _kernel(graph: int, node: int, name: str = "k", shape: str = "4,32,0") -> str:
    return (
        f'"graph_{graph}_node_{node}"[style="bold" shape="record" label="{{KERNEL\n'
        f'| {{ID | {node} (topoId: {node}) | {name}\\<\\<\\<{shape}\\>\\>\\>}}\n}}"];\n'
    )


def _container(graph: int, node: int, children: list[int], word: str = "GRAPH") -> str:
    refs = " | ".join(f"graph_{c}" for c in children)
    return (
        f'"graph_{graph}_node_{node}"[style="solid" shape="record" label="{{{word}\n| {{ID | {node} | {refs}}}\n}}"];\n'
    )


def _cluster(graph: int, body: str) -> str:
    return f'subgraph cluster_{graph} {{\nlabel="graph_{graph}" graph[style="dashed"];\n{body}}}\n'


def _refused(text: str, problem: str) -> str:
    with pytest.raises(FileError) as caught:
        parse_dot(text)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("<dot>: line "), message
    assert problem in message, message
    return message


# --------------------------------------------------------------------------- every node or a refusal


@pytest.mark.parametrize("loop", [2, 3, 5])
def test_graphs_that_hold_each_other_but_hang_from_no_top_graph_node_are_refused(loop: int) -> None:
    # graph_2 -> graph_3 -> … -> graph_2: each is some node's child, none is reachable from graph_1
    text = "digraph dot {\n" + _cluster(1, _kernel(1, 0))
    for g in range(2, 2 + loop):
        following = 2 + (g - 1) % loop
        text += _cluster(g, _container(g, 10 * g, [following]) + _kernel(g, 10 * g + 1))
    _refused(text + "}\n", "graph_2 is not reachable from the top graph graph_1")


@pytest.mark.parametrize("parts", [2, 3])
def test_a_cluster_opened_again_continues_the_same_graph(parts: int) -> None:
    text = "digraph dot {\n"
    for part in range(parts):
        text += _cluster(1, _kernel(1, 2 * part) + _kernel(1, 2 * part + 1, "other"))
    text += "".join(f'"graph_1_node_{i}" -> "graph_1_node_{i + 1}"\n' for i in range(2 * parts - 1))
    graph = parse_dot(text + "}\n")
    assert [n.ident for n in graph.nodes] == [f"graph_1_node_{i}" for i in range(2 * parts)]
    assert graph.branches() == 1


@pytest.mark.parametrize("word", ["GRAPH", "CHILD_GRAPH", "CONDITIONAL"])
def test_a_container_naming_a_graph_the_file_lacks_is_refused(word: str) -> None:
    text = "digraph dot {\n" + _cluster(1, _kernel(1, 0) + _container(1, 1, [7], word)) + "}\n"
    _refused(text, "node graph_1_node_1 holds graph_7, which is not in the file")
    plain = 'digraph dot {\nsubgraph cluster_0 {\n"graph_0_node_3"[style="solid"shape="rectangle"label="3\ngraph_4"];\n}\n}\n'
    _refused(plain, "holds graph_4, which is not in the file")


def test_a_container_naming_no_graph_is_refused() -> None:
    text = "digraph dot {\n" + _cluster(1, '"graph_1_node_1"[label="{GRAPH | {ID | 1}}"];\n') + "}\n"
    _refused(text, "node graph_1_node_1 is a graph node that names no graph in the file")


@pytest.mark.parametrize("second", ["digraph b {", "strict digraph {", "graph {", 'digraph "x" {'])
def test_a_second_top_level_graph_is_refused(second: str) -> None:
    text = "digraph a {\n" + _cluster(1, _kernel(1, 0)) + "}\n" + second + "\n" + _cluster(2, _kernel(2, 1)) + "}\n"
    message = _refused(text, "a second top-level graph")
    assert "line 9:" in message  # where the second graph opens


# Both runtimes' full type tables: each word is its node type, never a kernel name.
CUDA_WORDS = {
    "MEMSET": "memset",
    "HOST": "host",
    "EMPTY": "empty",
    "EVENT_WAIT": "event_wait",
    "EVENT_RECORD": "event_record",
    "EXT_SEMAS_SIGNAL": "ext_semas_signal",
    "EXT_SEMAS_WAIT": "ext_semas_wait",
    "MEM_ALLOC": "mem_alloc",
    "MEM_FREE": "mem_free",
    "BATCH_MEM_OP": "batch_mem_op",
    "MEMCPY": "memcpy",
}
HIP_WORDS = {
    "MEMSET": "memset",
    "MEMCPY": "memcpy",
    "EVENT_RECORD": "event_record",
    "EVENT_WAIT": "event_wait",
    "HOST": "host",
    "EMPTY": "empty",
    "MEM_ALLOC": "mem_alloc",
    "MEM_FREE": "mem_free",
    "EXTERNAL_SEMAPHORE_SIGNAL": "ext_semas_signal",
    "EXTERNAL_SEMAPHORE_WAIT": "ext_semas_wait",
    "BATCH_MEM_OP_NODE": "batch_mem_op",
}


@pytest.mark.parametrize("word, node_type", sorted(HIP_WORDS.items()))
def test_every_hip_type_word_is_its_node_type_in_plain_and_verbose_labels(word: str, node_type: str) -> None:
    plain = f'"graph_0_node_0"[style="solid"shape="rectangle"label="0\n{word}"];\n'
    verbose = f'"graph_0_node_1"[style="solid"shape="record"label="{{\n{word}\n| {{{{ID | node handle}} | {{1 | 0x5}}}}\n}}"];\n'
    graph = parse_dot("digraph dot {\nsubgraph cluster_0 {\n" + plain + verbose + "}\n}\n")
    assert [n.type for n in graph.nodes] == [node_type, node_type]
    assert graph.kernels() == []


@pytest.mark.parametrize("word, node_type", sorted(CUDA_WORDS.items()))
def test_every_cuda_type_word_is_its_node_type(word: str, node_type: str) -> None:
    record = f'"graph_1_node_0"[style="solid" shape="record" label="{{{word}\n| {{ID | 0 (topoId: 0)}}\n}}"];\n'
    graph = parse_dot("digraph dot {\n" + _cluster(1, record) + "}\n")
    assert [n.type for n in graph.nodes] == [node_type]


@pytest.mark.parametrize(
    "name, expected",
    [
        ("void f<\\{lambda()#1\\}>", "void f<{lambda()#1}>"),
        ("operator\\|", "operator|"),
        ("a\\|b\\{c\\}d", "a|b{c}d"),
        ("x\\\\", "x\\"),  # an escaped backslash before the shape ends the name, it escapes nothing after it
    ],
)
def test_escaped_record_separators_in_a_kernel_name_stay_in_the_name(name: str, expected: str) -> None:
    (node,) = parse_dot("digraph dot {\n" + _cluster(1, _kernel(1, 0, name)) + "}\n").nodes
    assert (node.name, node.launch) == (expected, Launch((4, 1, 1), (32, 1, 1), 0))


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
@pytest.mark.parametrize("dump", sorted(p.name for p in DUMPS.glob("*.dot")))
def test_crlf_and_cr_line_ends_read_like_lf(dump: str, newline: str) -> None:
    text = (DUMPS / dump).read_text(encoding="utf-8")
    expected = parse_dot(text)
    assert parse_dot(text.replace("\n", newline)) == expected


@pytest.mark.parametrize("line", [2, 3])
def test_an_escaped_quote_on_a_later_line_of_a_multi_line_label(line: int) -> None:
    fields = ["{KERNEL", "| {ID | 0 (topoId: 0) | plain\\<\\<\\<4,32,0\\>\\>\\>}", "| {priority | 0}", "}"]
    fields[line - 1] = fields[line - 1].replace("plain", 'operator\\"\\" _q') if line == 2 else '| {note | \\"x\\"}'
    text = "digraph dot {\n" + _cluster(
        1, '"graph_1_node_0"[style="bold" shape="record" label="' + "\n".join(fields) + '"];\n'
    )
    text += _cluster(1, _kernel(1, 1)) + '"graph_1_node_0" -> "graph_1_node_1"\n}\n'
    graph = parse_dot(text)
    assert [n.name for n in graph.nodes] == ['operator"" _q' if line == 2 else "plain", "k"]


@pytest.mark.parametrize("dump", sorted(p.name for p in DUMPS.glob("*.dot")))
def test_a_byte_order_mark_is_not_a_node_outside_the_braces(tmp_path: Path, dump: str) -> None:
    data = (DUMPS / dump).read_bytes()
    marked = tmp_path / dump
    marked.write_bytes(b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n"))
    assert read_dot_file(marked) == read_dot_file(DUMPS / dump)


@pytest.mark.parametrize("depth", [1000, 3000])
@pytest.mark.parametrize("link", ["label", "edge"])
def test_child_graphs_nested_thousands_deep(depth: int, link: str) -> None:
    clusters = []
    for g in range(1, depth + 1):
        if link == "label":
            body = _container(g, g, [g + 1])
        else:  # a container linked to its graph by an edge into the child's cluster
            body = f'"graph_{g}_node_{g}"[label="{{GRAPH | {{ID | {g}}}}}"];\n"graph_{g}_node_{g}" -> "graph_{g + 1}_node_{g + 1}"\n'
        clusters.append(_cluster(g, body))
    clusters.append(_cluster(depth + 1, _kernel(depth + 1, depth + 1) + _kernel(depth + 1, depth + 2, "k2")))
    graph = parse_dot("digraph dot {\n" + "".join(clusters) + "}\n")
    assert graph.node_counts() == {"graph": depth, "kernel": 2}
    assert graph.branches() == 2 and len(list(graph.graphs())) == depth + 1
    assert graph.topology()["edges"] == 0  # an edge into a child's cluster links the graph, it orders no nodes


@pytest.mark.parametrize("word", ["GRAPH", "CONDITIONAL"])
def test_clusters_written_inside_each_other_thousands_deep(word: str) -> None:
    depth = 2000
    text = "digraph dot {\n"
    for g in range(1, depth + 1):
        text += f"subgraph cluster_{g} {{\n" + _container(g, g, [g + 1], word)
    text += _cluster(depth + 1, _kernel(depth + 1, depth + 1)) + "}\n" * depth + "}\n"
    graph = parse_dot(text)
    assert graph.node_counts() == {word.lower(): depth, "kernel": 1}
    assert graph.branches() == 1
    assert graph.run_bounds(lambda n: n.name if n.type == "kernel" else None)[0]["k"] == (
        0 if word == "CONDITIONAL" else 1
    )


def test_hip_7_launch_with_the_work_size_remainder_and_hip_debug_lines() -> None:
    text = (
        'digraph dot {\nsubgraph cluster_0 {\nlabel="graph_0"graph[style="dashed"];\n'
        '"graph_0_node_0"[style="bold\nshape="record"label="0\nk1\n\\<\\<\\<(8,1,1),(256,1,1),(0,0,0),0\\>\\>\\>StreamId:0\n'
        'SegmentId:-1\nSignalIsRequired: false\nDeviceId:0"];\n'
        '"graph_0_node_1"[style="solid"shape="rectangle"label="1\nHOST\nStreamId:1\nSegmentId:0"];\n'
        '"graph_0_node_2"[style="bold"shape="octagon"label="2\nk2\nStreamId:1"];\n}\n}\n'
    )
    graph = parse_dot(text)
    assert [(n.type, n.name, str(n.launch)) for n in graph.nodes] == [
        ("kernel", "k1", "<<<8,256,0>>>"),
        ("host", "", "None"),
        ("kernel", "k2", "None"),
    ]


def test_a_gzipped_dump_and_a_gv_dump_read_like_the_dot(tmp_path: Path) -> None:
    source = DUMPS / "cuda_child_graph.dot"
    gz = tmp_path / "TinyDecodeRunner_bs_4_rank0.dot.gz"
    gz.write_bytes(gzip.compress(source.read_bytes()))
    gv = tmp_path / "TinyDecodeRunner_bs_4_rank0.gv"
    gv.write_bytes(source.read_bytes())
    assert read_dot_file(gz) == read_dot_file(gv) == read_dot_file(source)
    summary = summarize_dot_file(gz)
    assert (summary.key.runner, summary.key.batch_size) == ("TinyDecodeRunner", 4)
    assert summary == summarize_dot_file(gv)
    broken = tmp_path / "broken.dot.gz"
    broken.write_bytes(gzip.compress(source.read_bytes())[:-9])
    with pytest.raises(FileError, match="truncated gzip stream"):
        read_dot_file(broken)


@pytest.mark.parametrize(
    "label, name, launch",
    [
        ("KERNEL\\nk1", "k1", None),  # a type word first, the name, no launch
        ("3\\nk1\\nfunc handle: 0x1", "k1", None),  # a line a flag adds is no launch shape
        ("3\\nk1\\n\\\\<\\\\<\\\\<(8,1,1),(256,1,1),0\\\\>\\\\>\\\\>\\nfunc handle: 0x1", "k1", "<<<8,256,0>>>"),
        ("KERNEL\\nk1\\\\<\\\\<\\\\<8,256,0\\\\>\\\\>\\\\>", "k1", "<<<8,256,0>>>"),
    ],
)
def test_a_plain_kernel_label_is_a_kernel_with_or_without_its_launch(label: str, name: str, launch: str | None) -> None:
    text = 'digraph dot {\n"a"[shape="octagon" label="' + label.encode().decode("unicode_escape") + '"];\n}\n'
    (node,) = parse_dot(text).nodes
    assert (node.type, node.name, str(node.launch) if node.launch else None) == ("kernel", name, launch)
