"""The DOT reader against a reference count of the nodes a file declares, on seeded mutations of the fixtures.

Every mutated dump either reads into a graph whose nodes are exactly the nodes the text
declares (and a summary that counts each of them once), or is refused in one line
``<dot>: line N: …``; never an internal error.  The reference here is written apart from
the reader: a plain tokenizer (quoted strings with escapes, comments, punctuation) that
finds node statements by DOT's grammar and knows nothing of labels or graphs.  A seeded
generator makes every case reproducible: a failure names the fixture, the seed and the
mutations.
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Optional

import pytest

from pytest_graphcapture.errors import FileError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.dot import parse_dot
from pytest_graphcapture.summary.replay import graph_summary

DUMPS = Path(__file__).resolve().parents[1] / "data" / "graph_dumps"
SEED = 20261202
CASES = 250

#: What an insertion writes: structure, escapes, line ends, type words, graph references, whole statements.
FRAGMENTS = (
    "}",
    "{",
    "\n}\n",
    ";",
    '"',
    '\\"',
    "\\{",
    "\\|",
    "\r\n",
    "\r",
    "\ufeff",
    " -> ",
    "[",
    "]",
    "digraph other {\n",
    "subgraph cluster_9 {\n",
    "subgraph cluster_1 {\n",
    '"graph_1_node_99"[style="bold" shape="record" label="{KERNEL | {ID | 99 | k9\\<\\<\\<4,32,0\\>\\>\\>}}"];\n',
    '"graph_9_node_98"[label="{GRAPH | {ID | 98 | graph_1}}"];\n',
    '"graph_0_node_97"[style="solid"shape="rectangle"label="97\nEXTERNAL_SEMAPHORE_WAIT"];\n',
    '"graph_1_node_0" -> "graph_1_node_5"\n',
    "graph_7",
    "CONDITIONAL",
    "EXT_SEMAS_SIGNAL",
    "BATCH_MEM_OP_NODE",
    "(0,0,0),",
    "\\<\\<\\<",
    "\\>\\>\\>",
    "// a comment\n",
    "/* a\ncomment */",
)
KEYWORDS = {"graph", "digraph", "subgraph", "node", "edge", "strict"}
_TOKEN = re.compile(
    r'\s+|//[^\n]*|/\*.*?\*/|#[^\n]*|(?P<q>"(?:[^"\\]|\\.)*")|(?P<arrow>->|--)|(?P<id>[A-Za-z_\x80-\U0010ffff][\w\x80-\U0010ffff]*|-?(?:\.\d+|\d+(?:\.\d*)?))|(?P<p>[{}\[\];,=])',
    re.DOTALL,
)


def _tokens(text: str) -> Optional[list[tuple[str, str]]]:
    """(kind, text) tokens of ``text``; None when it holds something no DOT token is."""
    tokens = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            return None
        at = match.end()
        if match.lastgroup:
            tokens.append((match.lastgroup, match.group(match.lastgroup)))
    return tokens


def declared_nodes(text: str) -> Optional[list[str]]:
    """The node ids ``text`` declares, in order, by DOT's grammar; None where this reference cannot tell."""
    if text[:1] == "\ufeff":
        text = text[1:]
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r'style="(\w*)\n(?=shape=")', r'style="\1"\n', text)  # HIP's unclosed style, as the reader repairs it
    tokens = _tokens(text)
    if tokens is None:
        return None
    nodes: list[str] = []
    i = 0

    def skip_attrs(j: int) -> Optional[int]:
        depth = 0
        while j < len(tokens):
            if tokens[j] == ("p", "["):
                depth += 1
            elif tokens[j] == ("p", "]"):
                depth -= 1
                if depth == 0:
                    return j + 1
            j += 1
        return None

    while i < len(tokens):
        kind, value = tokens[i]
        if kind == "p" and value in "{};,":
            i += 1
        elif kind == "id" and value in KEYWORDS:
            i += 1
            while i < len(tokens) and tokens[i][0] in ("id", "q") and tokens[i][1] not in KEYWORDS:
                i += 1  # the graph's or subgraph's name
            if i < len(tokens) and tokens[i] == ("p", "["):
                end = skip_attrs(i)
                if end is None:
                    return None
                i = end
        elif kind in ("id", "q"):
            following = tokens[i + 1] if i + 1 < len(tokens) else ("", "")
            if following[0] == "arrow":
                i += 1
                while i + 1 < len(tokens) and tokens[i][0] == "arrow" and tokens[i + 1][0] in ("id", "q"):
                    i += 2
            elif following == ("p", "="):
                i += 3
            else:
                nodes.append(value[1:-1].replace('\\"', '"').replace("\\\n", "") if kind == "q" else value)
                i += 1
            if i < len(tokens) and tokens[i] == ("p", "["):
                end = skip_attrs(i)
                if end is None:
                    return None
                i = end
        else:
            return None
    return nodes


def mutate(text: str, rng: random.Random) -> tuple[str, list[str]]:
    """``text`` changed by one to three seeded mutations, and what they were."""
    done = []
    for _ in range(rng.randint(1, 3)):
        choice = rng.randrange(8)
        at = rng.randrange(len(text) + 1)
        if choice == 0:
            end = min(len(text), at + rng.randint(1, 40))
            text = text[:at] + text[end:]
            done.append(f"delete {at}:{end}")
        elif choice == 1:
            fragment = rng.choice(FRAGMENTS)
            text = text[:at] + fragment + text[at:]
            done.append(f"insert {fragment!r} at {at}")
        elif choice in (2, 3):
            lines = text.split("\n")
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            if choice == 2:
                lines.insert(b, lines[a])
                done.append(f"duplicate line {a} before {b}")
            else:
                lines[a], lines[b] = lines[b], lines[a]
                done.append(f"swap lines {a}, {b}")
            text = "\n".join(lines)
        elif choice == 4:
            words = re.findall(r"\b[A-Z][A-Z_]{3,}\b", text)
            if words:
                old = rng.choice(words)
                new = rng.choice(["KERNEL", "MEMCPY", "GRAPH", "CONDITIONAL", "EMPTY", "EXTERNAL_SEMAPHORE_SIGNAL"])
                text = text.replace(old, new, 1)
                done.append(f"{old} -> {new}")
        elif choice == 5:
            text = text.replace("\n", "\r\n")
            done.append("CRLF")
        elif choice == 6:
            text = "\ufeff" + text
            done.append("byte-order mark")
        else:
            addition = rng.choice(sorted(STRUCTURES))
            close = text.rfind("}")
            text = (
                text + STRUCTURES[addition]
                if addition == "second graph"
                else text[:close] + STRUCTURES[addition] + text[close:]
            )
            done.append(f"add {addition}")
    return text, done


def _kernel(graph: int, node: int) -> str:
    return f'"graph_{graph}_node_{node}"[style="bold" shape="record" label="{{KERNEL | {{ID | {node} | k{node}\\<\\<\\<4,32,0\\>\\>\\>}}}}"];\n'


#: Whole structures added before the graph's last brace: graphs that name each other and nothing else
#: reaches, a cluster opened again, a child graph that is not in the file; or a second top-level graph.
STRUCTURES = {
    "unreachable loop": (
        'subgraph cluster_40 {\n"graph_40_node_400"[label="{GRAPH | {ID | 400 | graph_41}}"];\n'
        + _kernel(40, 401)
        + '}\nsubgraph cluster_41 {\n"graph_41_node_410"[label="{GRAPH | {ID | 410 | graph_40}}"];\n}\n'
    ),
    "cluster again": "subgraph cluster_1 {\n" + _kernel(1, 500) + "}\nsubgraph cluster_0 {\n" + _kernel(0, 501) + "}\n",
    "absent child": 'subgraph cluster_1 {\n"graph_1_node_600"[label="{GRAPH | {ID | 600 | graph_77}}"];\n}\n',
    "second graph": "digraph second {\n" + _kernel(2, 700) + "}\n",
}


@pytest.mark.parametrize("fixture", sorted(p.name for p in DUMPS.glob("*.dot")))
def test_a_mutated_dump_holds_every_declared_node_or_is_refused_in_one_line(fixture: str) -> None:
    base = (DUMPS / fixture).read_text(encoding="utf-8")
    rng = random.Random(f"{SEED}-{fixture}")
    read = refused = 0
    for case in range(CASES):
        text, mutations = mutate(base, rng)
        where = f"{fixture}, seed {SEED}, case {case}: {mutations}"
        try:
            graph = parse_dot(text)
        except FileError as exc:
            message = str(exc)
            assert "\n" not in message and re.match(r"<dot>: line \d+: \S", message), f"{where}: {message!r}"
            refused += 1
            continue
        except Exception as exc:  # noqa: BLE001 - the point: nothing else may come out
            pytest.fail(f"{where}: internal error {type(exc).__name__}: {exc}")
        read += 1
        expected = declared_nodes(text)
        walked = [node.ident for node in graph.walk()]
        if expected is not None:
            assert sorted(walked) == sorted(expected), f"{where}: nodes lost or invented"
        summary = graph_summary(graph, key=CaptureKey("Fuzz", 1), platform="graph-dump", level="name", source="dot")
        assert sum(summary.topology["nodes"].values()) == len(walked), where
        work = sum(1 for node in graph.walk() if node.type in ("kernel", "memcpy", "memset"))
        assert sum(k["count"] for k in summary.kernels) == work, where
    assert read and refused, (
        f"{fixture}: the mutations should both keep and break dumps ({read} read, {refused} refused)"
    )


@pytest.mark.parametrize("fixture", sorted(p.name for p in DUMPS.glob("*.dot")))
def test_the_reference_agrees_with_the_reader_on_the_fixtures(fixture: str) -> None:
    text = (DUMPS / fixture).read_text(encoding="utf-8")
    assert sorted(n.ident for n in parse_dot(text).walk()) == sorted(declared_nodes(text) or [])
