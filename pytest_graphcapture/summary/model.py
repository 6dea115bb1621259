"""The summary of one key, as goldens store it, its one validator, and the keys of several graphs.
It holds what must not change silently (kernels, ops with shapes, launches), never what changes run to run."""

from __future__ import annotations

import copy
import functools
import json
import re
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Iterable, Literal, Mapping, Optional, Sequence, Union

import msgspec
from msgspec import UNSET

from .._io import dumps_entries, unpack_graphs
from ..errors import FileError, TraceFormatError, UsageError
from ..keys import CaptureKey, is_int
from .normalize import (
    DEFAULT_LEVEL,
    LEVELS,
    check_level,
    compile_patterns,
    gpu_work,
    is_coarser_or_equal,
    matches_any,
    normalize_kernel_name,
)


def _kernel_label(entry: Mapping[str, Any]) -> str:
    """How a kernel entry is named wherever kernels are compared: name, then ``(kind)``, grid/block and the
    graph's launch shape (``<<<grid,block,shared memory>>>``) where set."""
    extras = []
    kind = entry.get("kind")
    if kind not in (None, "kernel"):
        extras.append(f"({kind})")
    for dim in ("grid", "block"):
        if dim in entry:
            extras.append(f"{dim}={json.dumps(entry[dim], separators=(',', ':'))}")
    if "launch" in entry:
        extras.append(entry["launch"])
    return " ".join([entry["name"], *extras])


def kernel_view(kernels: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{kernel label: count}`` of kernel entries."""
    view: dict[str, int] = {}
    for item in kernels:
        label = _kernel_label(item)
        view[label] = view.get(label, 0) + int(item["count"])
    return view


def count_changes(expected: Mapping[str, int], actual: Mapping[str, int]) -> list[tuple[str, int, int]]:
    """``(label, expected count, actual count)`` for every label whose count differs (0 = absent), sorted."""
    return [
        (label, expected.get(label, 0), actual.get(label, 0))
        for label in sorted(set(expected) | set(actual))
        if expected.get(label, 0) != actual.get(label, 0)
    ]


#: 2: kernel entries name the op that launched them (``op``), ``unattributed`` says why some do not.
SCHEMA_VERSION = 2

KINDS = ("kernel", "memcpy", "memset")

#: What a key of several graphs stores of each of its graphs (``graphs`` in a summary).
_GRAPH_FIELDS = ("kernels", "ops", "launches", "complete")

#: Where kernels were read: a readout (get_graph_data(), the cuda-bindings walk), a replay, the window's
#: launch events (ROCm names kernels there), or a graph dump.
_KERNEL_SOURCES = ("graph-data", "graph", "replay", "capture-window", "dot")

#: A launch shape (:class:`~.graph.Launch`): ``<<<grid,block,shared memory>>>``, a dimension ``128`` or ``{16,10,2}``.
_DIM = r"(?:\d+|\{\d+(?:,\d+){1,2}\})"

_LAUNCH_PATTERN = re.compile(rf"<<<{_DIM},{_DIM},\d+>>>")


def _kernel_sort_key(entry: dict) -> tuple:
    op = entry.get("op")
    op_key = (op["name"], json.dumps(op["input_dims"])) if op else ("", "")
    return (
        entry["name"],
        entry.get("kind", "kernel"),
        entry.get("grid") or [],
        entry.get("block") or [],
        entry.get("launch") or "",
        op_key,
    )


def _op_sort_key(entry: dict) -> tuple:
    # One encoding of [dims, types] orders like the two apart (no JSON array is a prefix of another).
    return (entry["name"], json.dumps([entry["input_dims"], entry["input_types"]]))


#: The fields of an op entry, as captures and goldens write it.
_OP_FIELDS = {"name", "input_dims", "input_types", "count"}


def _packed_ops(ops: list) -> list:
    """Equal op entries whose strings are shared and whose shape lists are new, built in one pass."""
    intern = sys.intern
    packed = []
    for op in ops:
        if type(op) is not dict or op.keys() != _OP_FIELDS:
            return ops
        name, dims, types = op["name"], op["input_dims"], op["input_types"]
        if type(name) is not str or type(dims) is not list or type(types) is not list:
            return ops
        if not all(type(d) is list for d in dims) or not all(type(t) is str for t in types):
            return ops
        packed.append(
            {
                "name": intern(name),
                "input_dims": [list(d) for d in dims],
                "input_types": [intern(t) for t in types],
                "count": op["count"],
            }
        )
    return packed


@dataclass(eq=False)
class Summary:
    """One captured graph, as goldens store it.  Equality ignores ``environment``."""

    key: CaptureKey
    platform: str
    kernels: list = field(default_factory=list)
    ops: list = field(default_factory=list)
    launches: dict = field(default_factory=lambda: {"total": 0, "by_api": {}})
    complete: bool = True
    incomplete_reason: Optional[str] = None
    environment: dict = field(default_factory=dict)
    level: str = DEFAULT_LEVEL
    schema_version: int = SCHEMA_VERSION
    #: Why kernels name no launching op (e.g. an NVIDIA graph replay), or None.
    unattributed: Optional[str] = None
    #: The window's launches in call order, ``(kind, op or None)``, matched to replay nodes; not stored.
    launch_ops: Optional[list] = field(default=None, compare=False, repr=False)
    #: Where the kernels were read (:data:`_KERNEL_SOURCES`; None: an eager trace); not compared.
    kernel_source: Optional[str] = None
    #: ``{"nodes": {type: count}, "branches": most work nodes at once}`` of a graph read, else None.
    topology: Optional[dict] = None
    #: A key of several graphs: each graph's Summary in capture order (this one is their sum); else None.
    graphs: Optional[list] = None

    def __post_init__(self) -> None:
        # Canonical order so that equal content always serializes to equal bytes.
        self.kernels = sorted(self.kernels, key=_kernel_sort_key)
        # Packed: a golden check reads every op of every key, long after the capture built them.
        self.ops = _packed_ops(sorted(self.ops, key=_op_sort_key))
        by_api = self.launches.get("by_api", {}) if isinstance(self.launches, dict) else {}
        self.launches = {"total": int(self.launches.get("total", 0)), "by_api": dict(sorted(by_api.items()))}

    def to_dict(self, *, share_entries: bool = False) -> dict:
        """JSON-ready dict: the layout goldens and summary files store (docs/concepts.md describes it)."""
        return {
            "schema_version": self.schema_version,
            "key": self.key.to_dict(),
            "platform": self.platform,
            "level": self.level,
            "kernels": self.kernels if share_entries else [dict(k) for k in self.kernels],
            "ops": self.ops if share_entries else [dict(o) for o in self.ops],
            "launches": {"total": self.launches["total"], "by_api": dict(self.launches["by_api"])},
            "complete": {"value": self.complete, "reason": self.incomplete_reason},
            "environment": self.environment,
            "unattributed": self.unattributed,
            # Only where a graph or replay supplied them: summaries without (every CPU one) stay as they were.
            **({"kernel_source": self.kernel_source} if self.kernel_source is not None else {}),
            **({"topology": _topology_copy(self.topology)} if self.topology is not None else {}),
            **({"graphs": [g.graph_dict(share_entries) for g in self.graphs]} if self.graphs else {}),
        }

    def graph_dict(self, share_entries: bool = False) -> dict:
        """What a key of several graphs stores of each graph: its kernels, ops, launches and completeness."""
        whole = self.to_dict(share_entries=share_entries)
        return {name: whole[name] for name in _GRAPH_FIELDS}

    def to_json(self) -> str:
        """Canonical JSON text, as goldens store it: one line per kernel, op and launch entry."""
        return dumps_entries(self.to_dict())

    def comparable(self) -> dict:
        """``to_dict()`` without ``environment`` and ``kernel_source``: what equality and goldens compare."""
        data = self.to_dict()
        del data["environment"]
        data.pop("kernel_source", None)
        return data

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Summary):
            return NotImplemented
        return self.comparable() == other.comparable()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by content

    def normalized(
        self,
        level: str,
        *,
        ignore_kernels: Iterable[str] = (),
        ignore_ops: Iterable[str] = (),
        rename: Optional[Callable[[str, str], Optional[str]]] = None,
        share_entries: bool = False,
    ) -> "Summary":
        """Copy with kernel names at ``level`` (equal names merged) and ignored kernels/ops removed."""
        check_level(level)
        if not is_coarser_or_equal(level, self.level):
            raise UsageError(f"cannot normalize {self.key} from level {self.level!r} to the finer level {level!r}")
        ignore_kernels, ignore_ops = tuple(ignore_kernels), tuple(ignore_ops)  # read again for each graph
        kernel_patterns = compile_patterns(ignore_kernels, what="kernel ignore pattern")
        op_patterns = compile_patterns(ignore_ops, what="op ignore pattern")
        merged: dict[tuple, dict] = {}
        for entry in self.kernels:
            kind = entry.get("kind", "kernel")
            name = entry["name"]
            if kind == "kernel":
                name = (rename(name, level) if rename is not None else None) or _kernel_name_at(name, level)
            if kernel_patterns and matches_any(name, kernel_patterns):
                continue
            merge_kernel(
                merged,
                name,
                kind,
                entry.get("grid"),
                entry.get("block"),
                entry["count"],
                entry.get("op"),
                entry.get("launch"),
            )
        # Filtering keeps the ops in canonical order: the copy skips __post_init__'s costly re-sort.
        normalized = copy.copy(self)
        normalized.kernels = sorted(merged.values(), key=_kernel_sort_key)
        kept = [o for o in self.ops if not matches_any(o["name"], op_patterns)] if op_patterns else self.ops
        normalized.ops = list(kept) if share_entries else list(map(dict, kept))
        normalized.launches = {"total": self.launches["total"], "by_api": dict(self.launches["by_api"])}
        normalized.environment = dict(self.environment)
        normalized.level = level
        if self.graphs:
            normalized.graphs = [
                g.normalized(
                    level,
                    ignore_kernels=ignore_kernels,
                    ignore_ops=ignore_ops,
                    rename=rename,
                    share_entries=share_entries,
                )
                for g in self.graphs
            ]
        return normalized

    def kernel_count(self) -> int:
        """Total kernel/memcpy/memset node count."""
        return sum(k["count"] for k in self.kernels)

    def op_count(self) -> int:
        """Total CPU op count."""
        return sum(o["count"] for o in self.ops)


#: :func:`normalize_kernel_name`, remembered: it is pure and a graph's kernels recur at every batch size.
_kernel_name_at = functools.lru_cache(maxsize=8192)(normalize_kernel_name)


def _topology_copy(topology: Mapping[str, Any]) -> dict:
    return {"nodes": dict(topology["nodes"]), "branches": topology["branches"]}


def merge_kernel(
    merged: dict,
    name: str,
    kind: str,
    grid: Any,
    block: Any,
    count: int,
    op: Optional[dict] = None,
    launch: Optional[str] = None,
) -> None:
    kind, name = gpu_work(kind, name)  # goldens written before memsets had one name compare equal
    if kind == "memset":
        grid = block = None  # an instrumented memset kernel's launch shape is no part of the memset
    grid_t = tuple(grid) if grid is not None else None
    block_t = tuple(block) if block is not None else None
    op_t = (op["name"], json.dumps(op["input_dims"])) if op else None
    mkey = (kind, name, grid_t, block_t, launch, op_t)
    entry = merged.get(mkey)
    if entry is None:
        entry = {"name": name, "kind": kind, "count": 0}
        if grid is not None:
            entry["grid"] = list(grid)
        if block is not None:
            entry["block"] = list(block)
        if launch is not None:
            entry["launch"] = launch
        if op:
            entry["op"] = {"name": op["name"], "input_dims": op["input_dims"]}
        merged[mkey] = entry
    entry["count"] += count


def of_graphs(graphs: Sequence[Summary]) -> Summary:
    """The Summary of one key made of ``graphs`` (in capture order); the one graph itself when there is one."""
    if not graphs:
        raise UsageError("a key needs at least one graph")
    if len(graphs) == 1:
        return graphs[0]
    first = graphs[0]
    for g in graphs[1:]:
        if (g.key, g.platform, g.level) != (first.key, first.platform, first.level):
            raise UsageError(f"the graphs of {first.key} must share its key, platform and level")
    merged: dict = {}
    ops: dict = {}
    by_api: dict = {}
    total = 0
    reasons = []
    for number, g in enumerate(graphs, 1):
        for k in g.kernels:
            merge_kernel(
                merged,
                k["name"],
                k.get("kind", "kernel"),
                k.get("grid"),
                k.get("block"),
                k["count"],
                k.get("op"),
                k.get("launch"),
            )
        for o in g.ops:
            okey = (o["name"], json.dumps(o["input_dims"]), json.dumps(o["input_types"]))
            entry = ops.get(okey)
            if entry is None:
                entry = ops[okey] = {**o, "count": 0}
            entry["count"] += o["count"]
        total += g.launches["total"]
        for api, n in g.launches["by_api"].items():
            by_api[api] = by_api.get(api, 0) + n
        if not g.complete:
            reasons.append(f"graph {number} of {len(graphs)}: {g.incomplete_reason or 'no reason given'}")
    whole = copy.copy(first)
    whole.kernels = list(merged.values())
    whole.ops = list(ops.values())
    whole.launches = {"total": total, "by_api": by_api}
    whole.complete = not reasons
    whole.incomplete_reason = "; ".join(reasons) or None
    whole.kernel_source = next((g.kernel_source for g in graphs if g.kernel_source), None)
    whole.unattributed = next((g.unattributed for g in graphs if g.unattributed), None)
    whole.topology = None
    whole.launch_ops = None
    whole.graphs = list(graphs)
    whole.__post_init__()  # canonical order of the sums
    return whole


def graph_count(summary: Summary) -> int:
    """How many graphs a key holds (1 for a key stored without ``graphs``)."""
    return len(summary.graphs) if summary.graphs else 1


_Count = Annotated[int, msgspec.Meta(ge=1)]


class _KernelOp(msgspec.Struct):
    name: str
    input_dims: list


class _Kernel(msgspec.Struct):
    name: str
    count: _Count
    kind: Literal[KINDS] = "kernel"  # type: ignore[valid-type]
    grid: Union[list[int], msgspec.UnsetType] = msgspec.UNSET
    block: Union[list[int], msgspec.UnsetType] = msgspec.UNSET
    launch: Union[Annotated[str, msgspec.Meta(pattern=f"^{_LAUNCH_PATTERN.pattern}$")], msgspec.UnsetType] = (
        msgspec.UNSET
    )
    op: Optional[_KernelOp] = None


class _Op(msgspec.Struct):
    name: str
    count: _Count
    input_dims: list = []
    input_types: list = []


class _Launches(msgspec.Struct):
    total: int
    by_api: dict[str, int] = {}


class _Complete(msgspec.Struct):
    value: bool
    reason: Optional[str] = None


class _Topology(msgspec.Struct):
    nodes: dict[str, _Count]
    branches: Annotated[int, msgspec.Meta(ge=0)]


class _SummaryFields(msgspec.Struct):
    """The fields of a summary dict below its key, as msgspec checks them."""

    platform: Annotated[str, msgspec.Meta(min_length=1)]
    kernels: list[_Kernel]
    ops: list[_Op]
    launches: _Launches
    complete: Union[bool, _Complete]
    level: Literal[LEVELS] = DEFAULT_LEVEL  # type: ignore[valid-type]
    incomplete_reason: Optional[str] = None
    environment: Optional[dict] = None
    unattributed: Optional[str] = None
    kernel_source: Optional[Literal[_KERNEL_SOURCES]] = None  # type: ignore[valid-type]
    topology: Optional[_Topology] = None


#: What a field must be, by its path with indexes dropped; a problem deeper down is named at the nearest one.
_WANTED = {
    "platform": "a non-empty string",
    "level": f"one of {', '.join(LEVELS)}",
    "kernels": "a list",
    "kernels[]": "an object",
    "kernels[].name": "a string",
    "kernels[].count": "an integer of at least 1",
    "kernels[].kind": f"one of {', '.join(KINDS)}",
    **dict.fromkeys(("kernels[].grid", "kernels[].block"), "a list of integers"),
    "kernels[].launch": "a launch shape like <<<{16,10,2},128,0>>> (grid, block, shared memory bytes)",
    "kernels[].op": '{"name": string, "input_dims": list} or null',
    "ops": "a list",
    "ops[]": "an object",
    "ops[].name": "a string",
    **dict.fromkeys(("ops[].input_dims", "ops[].input_types"), "a list"),
    "ops[].count": "an integer of at least 1",
    "launches": "an object",
    "launches.total": "an integer",
    "launches.by_api": "an object mapping API names to integers",
    "complete": '{"value": bool, "reason": string or null}',
    "complete.reason": "a string or null",
    "incomplete_reason": "a string or null",
    "environment": "an object",
    "unattributed": "a string or null",
    "kernel_source": f"one of {', '.join(_KERNEL_SOURCES)} or null",
    "topology": '{"nodes": {node type: count of at least 1}, "branches": integer of at least 0} or null',
}

_PROBLEM_AT = re.compile(r"(?:Object missing required field `(\w+)`|.*?) - at `\$(.*)`$")
_PATH_PART = re.compile(r"\.(\w+)|\[(\d+|\.\.\.)\]")


_REQUIRED = ("schema_version", "key", "platform", "kernels", "ops", "launches", "complete")


def _problem(exc: msgspec.ValidationError, data: dict) -> str:
    """msgspec's message as the field that is wrong, what it must be and what it is."""
    match = _PROBLEM_AT.match(str(exc))
    parts = [(m[1], m[2]) for m in _PATH_PART.finditer(match[2])] + [(match[1], None)] * bool(match[1]) if match else []
    while parts and _spelled(parts, True) not in _WANTED:
        parts.pop()
    if not parts:
        return str(exc)
    value: Any = data
    for name, index in parts:
        value = value.get(name, UNSET) if isinstance(value, dict) else value[int(index)] if index else value
    got = (
        f", got {value!r}" if value is None or isinstance(value, (str, int, float)) else f", got {type(value).__name__}"
    )
    return f"{_spelled(parts)} must be {_WANTED[_spelled(parts, True)]}{got if value is not UNSET else ''}"


def _spelled(parts: list, shape: bool = False) -> str:
    return "".join(f".{name}" if name else "[]" if shape else f"[{at}]" for name, at in parts).lstrip(".")


def summary_from_dict(data: Any, source: str = "<summary>", *, error: type[FileError] = TraceFormatError) -> Summary:
    """Check a summary dict (a golden, a summary file, a post-processed dict) and build the :class:`Summary`."""
    if not isinstance(data, dict):
        raise error(source, f"summary must be a JSON object, got {type(data).__name__}")
    try:
        data = unpack_graphs(data)  # a key of several graphs as written: one line per entry
    except ValueError as exc:
        raise error(source, str(exc)) from None
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        raise error(source, f"summary is missing {', '.join(missing)}")
    version = data["schema_version"]
    if not is_int(version):
        raise error(source, f"schema_version must be an integer, got {version!r}")
    if version != SCHEMA_VERSION:
        raise error(source, f"schema_version {version} is not supported (this version reads {SCHEMA_VERSION})")
    key_data = data["key"]
    if not isinstance(key_data, dict) or not isinstance(key_data.get("runner"), str):
        raise error(source, "key must be an object with runner, batch_size, variant, rank")
    if not is_int(key_data.get("batch_size")) or not is_int(key_data.get("rank", 0)):
        raise error(source, "key.batch_size and key.rank must be integers")
    if key_data.get("variant") is not None and not isinstance(key_data.get("variant"), str):
        raise error(source, "key.variant must be a string or null")
    try:
        key = CaptureKey.from_dict(key_data)
    except (ValueError, KeyError, TypeError) as exc:
        raise error(source, f"bad key: {exc}") from None
    try:
        fields = msgspec.convert(data, _SummaryFields)
    except msgspec.ValidationError as exc:
        raise error(source, _problem(exc, data)) from None
    complete = fields.complete
    value, reason = (
        (complete, fields.incomplete_reason) if complete.__class__ is bool else (complete.value, complete.reason)
    )
    topology = fields.topology
    summary = Summary(
        key=key,
        platform=fields.platform,
        kernels=[_kernel_dict(k) for k in fields.kernels],
        ops=[
            {"name": o.name, "input_dims": o.input_dims, "input_types": o.input_types, "count": o.count}
            for o in fields.ops
        ],
        launches={"total": fields.launches.total, "by_api": fields.launches.by_api},
        complete=value,
        incomplete_reason=reason,
        environment={} if fields.environment is None else fields.environment,
        level=fields.level,
        schema_version=version,
        unattributed=fields.unattributed,
        kernel_source=fields.kernel_source,
        topology=None
        if topology is None
        else {"nodes": dict(sorted(topology.nodes.items())), "branches": topology.branches},
    )
    if data.get("graphs") is not None:
        summary = _with_graphs(summary, data, source, error)
    return summary


def _kernel_dict(kernel: _Kernel) -> dict:
    item: dict = {"name": kernel.name, "kind": kernel.kind, "count": kernel.count}
    item.update(
        (name, getattr(kernel, name)) for name in ("grid", "block", "launch") if getattr(kernel, name) is not UNSET
    )
    if kernel.op is not None:
        item["op"] = {"name": kernel.op.name, "input_dims": kernel.op.input_dims}
    return item


def _with_graphs(summary: Summary, data: dict, source: str, error: type[FileError]) -> Summary:
    """``summary`` with the graphs ``data["graphs"]`` lists, each checked like a summary; its sums must match."""
    graphs = data["graphs"]
    if not isinstance(graphs, list) or len(graphs) < 2:
        raise error(source, "graphs must be a list of two or more graphs (a key of one graph stores none)")
    parts = []
    for i, graph in enumerate(graphs):
        if not isinstance(graph, dict):
            raise error(source, f"graphs[{i}] must be an object with {', '.join(_GRAPH_FIELDS)}")
        missing = [name for name in _GRAPH_FIELDS if name not in graph]
        if missing:
            raise error(source, f"graphs[{i}] is missing {', '.join(missing)}")
        own = {name: data[name] for name in ("schema_version", "key", "platform", "level") if name in data}
        part = summary_from_dict({**own, **{name: graph[name] for name in _GRAPH_FIELDS}}, source, error=error)
        part.environment = summary.environment
        parts.append(part)
    whole = of_graphs(parts)
    for name in ("kernels", "ops", "launches"):
        if getattr(whole, name) != getattr(summary, name):
            raise error(source, f"{name} must be the sum of the {len(parts)} graphs' {name} (graphs[...])")
    whole.environment, whole.unattributed, whole.topology = summary.environment, summary.unattributed, summary.topology
    whole.kernel_source, whole.schema_version = summary.kernel_source, summary.schema_version
    whole.complete, whole.incomplete_reason = summary.complete, summary.incomplete_reason
    return whole
