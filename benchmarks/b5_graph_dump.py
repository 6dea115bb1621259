"""B5 — reading a graph dump (DOT) of 5,000 nodes, as ``graphcapture summarize FILE.dot`` does.

Set-up (untimed): a dump in the format ``CUDAGraph.debug_dump`` writes (verbose
record labels, see tests/data/graph_dumps/README.md) is generated: a decode
step's shape — a long chain of kernels whose every tenth step forks into two
branches of three kernels that join again, a memset before each fork and a
device-to-device copy after each join, the kernel names and launch shapes of a
real dump.

Timed, interleaved, in this process:

* ``parse`` — :func:`pytest_graphcapture.summary.dot.read_dot_file`: the file read
  and decoded, every statement and label parsed, the graph model built and checked
  for cycles.  Target ≤ 50 ms (wall time; the CPU time is in the row's note).
* ``summarize`` — :func:`pytest_graphcapture.summary.dot.summarize_dot_file`: the
  parse plus the summary (kernel names demangled and normalized, launch shapes,
  node counts, ``branches`` — the exact maximum antichain).  No target; shown so
  the summary's own cost is visible.
"""

from __future__ import annotations

import gc
import time
from pathlib import Path

from common import Row, Section, fmt_seconds, median, progress, rotated

TARGET_SECONDS = 0.050
NODES = 5000

_KERNELS = (
    ("ampere_sgemm_128x64_tn", r"\{16,10,2\},128,0"),
    (
        "_ZN2at6native13reduce_kernelILi128ELi4ENS0_8ReduceOpIfNS0_14func_wrapper_tIfZNS0_11sum_functorIfffEclERNS_14"
        "TensorIteratorEEUlffE_EEjfLi4EEEEEvT1_",
        r"8,\{32,4\},2048",
    ),
    ("_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm_256x128_8x4_nt_align1EEvNT_6ParamsE", "64,256,49152"),
    (
        "_ZN2at6native43_GLOBAL__N__50f1b6c4_10_Dropout_cu_0e96ed3824fused_dropout_kernel_vecIffjLi1ELi4EbEEvNS_4cuda6"
        "detail10TensorInfoIKT_T1_EENS5_IS6_S8_EENS5_IT4_S8_EES8_T0_NS_15PhiloxCudaStateE",
        "432,256,0",
    ),
)


def _kernel(index: int, serial: int) -> str:
    name, shape = _KERNELS[serial % len(_KERNELS)]
    return (
        f'"graph_1_node_{index}"[style="bold" shape="record" label="{{KERNEL\n'
        f"| {{ID | {index} (topoId: {index}) | {name}\\<\\<\\<{shape}\\>\\>\\>}}\n"
        f"| {{{{node handle | func handle}} | {{0x{0x7FC44A2F0000 + index * 64:016X} | 0x000000000D55C270}}}}\n"
        "| {accessPolicyWindow | {base_ptr | num_bytes | hitRatio | hitProp | missProp} | "
        "{0x0000000000000000 | 0 | 0.000000 | N | N}}\n"
        '| {cooperative | 0}\n| {priority | 0}\n}"];\n'
    )


def _memset(index: int) -> str:
    return (
        f'"graph_1_node_{index}"[style="solid" shape="record" label="{{MEMSET\n'
        "| {{ID | node handle | dptr | pitch | value | elementSize | width | height} | "
        f'{{{index} (topoId: {index}) | 0x{0x7FC44A2F0000 + index * 64:016X} | 0x00007FC46BE00000 | 0 | 0 | 1 | 640 | 1}}}}}}"];\n'
    )


def _memcpy(index: int) -> str:
    return (
        f'"graph_1_node_{index}"[style="solid" shape="record" label="{{MEMCPY\n'
        f"| {{{{ID | node handle}} | {{{index} (topoId: {index}) | 0x{0x7FC44A2F0000 + index * 64:016X}}}}}\n"
        "| {kind | DtoD}\n"
        "| {{srcPtr | dstPtr} | {pitch | ptr | xsize | ysize | pitch | ptr | xsize | size} | "
        "{0 | 0x00007FC46BE00000 | 0 | 0 | 0 | 0x00007FC45DC00000 | 0 | 0}}\n"
        "| {{srcPos | {{x | 0} | {y | 0} | {z | 0}}} | {dstPos | {{x | 0} | {y | 0} | {z | 0}}} | "
        '{Extent | {{Width | 2560} | {Height | 1} | {Depth | 1}}}}\n}"];\n'
    )


def make_dump(path: Path, nodes: int = NODES) -> dict:
    """Write a verbose CUDA-style dump of exactly ``nodes`` nodes to ``path``; return its counts."""
    lines = ['digraph dot {\nsubgraph cluster_1 {\nlabel="graph_1" graph[style="dashed"];\n']
    edges: list[tuple[int, int]] = []
    index = 0
    last = None
    kernels = memsets = copies = 0

    def link(node: int) -> None:
        if last is not None:
            edges.append((last, node))

    while index < nodes:
        if kernels % 10 == 9 and nodes - index >= 9:
            lines.append(_memset(index))
            link(index)
            fork = index
            index += 1
            memsets += 1
            ends = []
            for _ in range(2):
                previous = fork
                for _ in range(3):
                    lines.append(_kernel(index, kernels))
                    edges.append((previous, index))
                    previous = index
                    index += 1
                    kernels += 1
                ends.append(previous)
            lines.append(_memcpy(index))
            edges += [(end, index) for end in ends]
            last = index
            index += 1
            copies += 1
            continue
        lines.append(_kernel(index, kernels))
        link(index)
        last = index
        index += 1
        kernels += 1
    lines.append("\n")
    lines += [f'"graph_1_node_{a}" -> "graph_1_node_{b}";\n' for a, b in edges]
    lines.append("}\n}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(lines), encoding="utf-8")
    return {"nodes": index, "kernels": kernels, "memsets": memsets, "copies": copies, "edges": len(edges)}


def run(*, rounds: int, work_dir: Path, nodes: int = NODES) -> Section:
    """Time parse and summarize of a generated ``nodes``-node dump, ``rounds`` interleaved rounds."""
    from pytest_graphcapture.summary.dot import read_dot_file, summarize_dot_file

    section = Section()
    path = work_dir / "graph_dump" / f"decode_{nodes}_nodes.dot"
    meta = make_dump(path, nodes)
    graph = read_dot_file(path)
    assert sum(1 for _ in graph.walk()) == meta["nodes"], "the generated dump does not read back whole"
    branches = graph.branches()
    variants = {"parse": lambda: read_dot_file(path), "summarize": lambda: summarize_dot_file(path)}
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for variant in variants.values():  # warm-up: imports, regex compilation, page cache
        variant()
    for r in range(rounds):
        for name in rotated(list(variants), r):
            gc.collect()
            started, started_cpu = time.perf_counter(), time.process_time()
            variants[name]()
            times[name].append(time.perf_counter() - started)
            cpu[name].append(time.process_time() - started_cpu)
    progress(f"B5: parse {fmt_seconds(median(times['parse']))}, summarize {fmt_seconds(median(times['summarize']))}")
    size = path.stat().st_size
    what = f"{meta['nodes']}-node graph dump ({size / 2**20:.1f} MiB, verbose CUDA labels)"
    parse = median(times["parse"])
    section.rows.append(
        Row(
            "B5",
            f"parse a {what}",
            fmt_seconds(parse),
            "50 ms",
            parse / TARGET_SECONDS if parse else None,
            1.0,
            f"CPU time {fmt_seconds(median(cpu['parse']))} (wall time above a busy machine's CPU time is "
            "time spent waiting for a core)",
        )
    )
    section.rows.append(
        Row(
            "B5",
            f"summarize the same dump (parse + kernels, launch shapes, topology with branches={branches})",
            fmt_seconds(median(times["summarize"])),
            note=f"CPU time {fmt_seconds(median(cpu['summarize']))}",
        )
    )
    section.notes.append(
        f"B5: {meta['kernels']} kernels, {meta['memsets']} memsets, {meta['copies']} copies, {meta['edges']} edges "
        f"(a chain forking into two branches of three kernels every tenth kernel), in {path}; "
        f"{rounds} interleaved rounds in this process, medians, gc.collect() before each"
    )
    return section
