"""The one validator of summary dicts: goldens, summary files and post-processed dicts all come through here.

:func:`summary_from_dict` checks a dict field by field and builds the
:class:`~.model.Summary`, so a bad file fails with the field that is wrong, never
with a traceback.  A key of several graphs carries ``graphs`` (:mod:`.graphs`),
each graph checked like a summary of its own.
"""

from __future__ import annotations

from typing import Any

from .._io import unpack_graphs
from ..errors import FileError, TraceFormatError
from ..keys import CaptureKey, is_int
from .graphs import of_graphs
from .model import GRAPH_FIELDS, KERNEL_SOURCES, KINDS, LAUNCH_PATTERN, SCHEMA_VERSION, Summary
from .normalize import DEFAULT_LEVEL, LEVELS


def summary_from_dict(data: Any, source: str = "<summary>", *, error: type[FileError] = TraceFormatError) -> Summary:
    """Check a summary dict field by field and build the :class:`Summary`; ``error(source, problem)`` otherwise.

    The one validator of summary dicts: goldens, summary files and dicts edited by
    ``pytest_graphcapture_postprocess_summary`` all come through here, so a bad
    file fails with the field that is wrong, never with a traceback.
    """

    def expect(cond: bool, problem: str) -> None:
        if not cond:
            raise error(source, problem)

    expect(isinstance(data, dict), f"summary must be a JSON object, got {type(data).__name__}")
    try:
        data = unpack_graphs(data)  # a key of several graphs as written: one line per entry
    except ValueError as exc:
        raise error(source, str(exc)) from None
    required = ("schema_version", "key", "platform", "kernels", "ops", "launches", "complete")
    missing = [k for k in required if k not in data]
    expect(not missing, f"summary is missing {', '.join(missing)}")
    version = data["schema_version"]
    expect(is_int(version), f"schema_version must be an integer, got {version!r}")
    expect(
        version == SCHEMA_VERSION, f"schema_version {version} is not supported (this version reads {SCHEMA_VERSION})"
    )
    key_data = data["key"]
    expect(
        isinstance(key_data, dict) and isinstance(key_data.get("runner"), str),
        "key must be an object with runner, batch_size, variant, rank",
    )
    expect(
        is_int(key_data.get("batch_size")) and is_int(key_data.get("rank", 0)),
        "key.batch_size and key.rank must be integers",
    )
    expect(
        key_data.get("variant") is None or isinstance(key_data.get("variant"), str),
        "key.variant must be a string or null",
    )
    try:
        key = CaptureKey.from_dict(key_data)
    except (ValueError, KeyError, TypeError) as exc:
        raise error(source, f"bad key: {exc}") from None
    expect(isinstance(data["platform"], str) and bool(data["platform"]), "platform must be a non-empty string")
    level = data.get("level", DEFAULT_LEVEL)
    expect(level in LEVELS, f"level must be one of {', '.join(LEVELS)}, got {level!r}")
    kernels = data["kernels"]
    expect(isinstance(kernels, list), f"kernels must be a list, got {type(kernels).__name__}")
    clean_kernels = []
    for i, entry in enumerate(kernels):
        where = f"kernels[{i}]"
        expect(isinstance(entry, dict), f"{where} must be an object")
        expect(isinstance(entry.get("name"), str), f"{where}.name must be a string")
        expect(is_int(entry.get("count")) and entry["count"] >= 1, f"{where}.count must be an integer of at least 1")
        kind = entry.get("kind", "kernel")
        expect(kind in KINDS, f"{where}.kind must be one of {', '.join(KINDS)}, got {kind!r}")
        item = {"name": entry["name"], "kind": kind, "count": entry["count"]}
        for dim in ("grid", "block"):
            if dim in entry:
                value = entry[dim]
                expect(
                    isinstance(value, list) and all(is_int(v) for v in value),
                    f"{where}.{dim} must be a list of integers",
                )
                item[dim] = list(value)
        if "launch" in entry:
            launch = entry["launch"]
            expect(
                isinstance(launch, str) and LAUNCH_PATTERN.fullmatch(launch) is not None,
                f"{where}.launch must be a launch shape like <<<{{16,10,2}},128,0>>> (grid, block, shared "
                f"memory bytes), got {launch!r}",
            )
            item["launch"] = launch
        if entry.get("op") is not None:
            op = entry["op"]
            expect(
                isinstance(op, dict) and isinstance(op.get("name"), str) and isinstance(op.get("input_dims"), list),
                f'{where}.op must be {{"name": string, "input_dims": list}} or null',
            )
            item["op"] = {"name": op["name"], "input_dims": op["input_dims"]}
        clean_kernels.append(item)
    ops = data["ops"]
    expect(isinstance(ops, list), f"ops must be a list, got {type(ops).__name__}")
    clean_ops = []
    for i, entry in enumerate(ops):
        where = f"ops[{i}]"
        expect(isinstance(entry, dict), f"{where} must be an object")
        expect(isinstance(entry.get("name"), str), f"{where}.name must be a string")
        expect(isinstance(entry.get("input_dims", []), list), f"{where}.input_dims must be a list")
        expect(isinstance(entry.get("input_types", []), list), f"{where}.input_types must be a list")
        expect(is_int(entry.get("count")) and entry["count"] >= 1, f"{where}.count must be an integer of at least 1")
        clean_ops.append(
            {
                "name": entry["name"],
                "input_dims": entry.get("input_dims", []),
                "input_types": entry.get("input_types", []),
                "count": entry["count"],
            }
        )
    launches = data["launches"]
    expect(isinstance(launches, dict), f"launches must be an object, got {type(launches).__name__}")
    expect(is_int(launches.get("total")), "launches.total must be an integer")
    by_api = launches.get("by_api", {})
    expect(
        isinstance(by_api, dict) and all(isinstance(k, str) and is_int(v) for k, v in by_api.items()),
        "launches.by_api must map API names to integers",
    )
    complete = data["complete"]
    if isinstance(complete, bool):
        value, reason = complete, data.get("incomplete_reason")
    else:
        expect(
            isinstance(complete, dict) and isinstance(complete.get("value"), bool),
            'complete must be {"value": bool, "reason": string or null}',
        )
        value, reason = complete["value"], complete.get("reason")
    expect(reason is None or isinstance(reason, str), "complete.reason must be a string or null")
    environment = data.get("environment")
    environment = {} if environment is None else environment
    expect(isinstance(environment, dict), "environment must be an object")
    unattributed = data.get("unattributed")
    expect(unattributed is None or isinstance(unattributed, str), "unattributed must be a string or null")
    kernel_source = data.get("kernel_source")
    expect(
        kernel_source is None or kernel_source in KERNEL_SOURCES,
        f"kernel_source must be one of {', '.join(KERNEL_SOURCES)} or null, got {kernel_source!r}",
    )
    topology = data.get("topology")
    if topology is not None:
        nodes = topology.get("nodes") if isinstance(topology, dict) else None
        expect(
            isinstance(nodes, dict)
            and all(isinstance(k, str) and is_int(v) and v >= 1 for k, v in nodes.items())
            and is_int(topology.get("branches"))
            and topology["branches"] >= 0,
            'topology must be {"nodes": {node type: count of at least 1}, "branches": integer of at least 0} or null',
        )
        topology = {"nodes": dict(sorted(nodes.items())), "branches": topology["branches"]}
    summary = Summary(
        key=key,
        platform=data["platform"],
        kernels=clean_kernels,
        ops=clean_ops,
        launches={"total": launches["total"], "by_api": dict(by_api)},
        complete=value,
        incomplete_reason=reason,
        environment=environment,
        level=level,
        schema_version=version,
        unattributed=unattributed,
        kernel_source=kernel_source,
        topology=topology,
    )
    if data.get("graphs") is not None:
        summary = _with_graphs(summary, data, source, error)
    return summary


def _with_graphs(summary: Summary, data: dict, source: str, error: type[FileError]) -> Summary:
    """``summary`` with the graphs ``data["graphs"]`` lists, each checked like a summary; its sums must match."""
    graphs = data["graphs"]
    if not isinstance(graphs, list) or len(graphs) < 2:
        raise error(source, "graphs must be a list of two or more graphs (a key of one graph stores none)")
    parts = []
    for i, graph in enumerate(graphs):
        if not isinstance(graph, dict):
            raise error(source, f"graphs[{i}] must be an object with {', '.join(GRAPH_FIELDS)}")
        missing = [name for name in GRAPH_FIELDS if name not in graph]
        if missing:
            raise error(source, f"graphs[{i}] is missing {', '.join(missing)}")
        own = {name: data[name] for name in ("schema_version", "key", "platform", "level") if name in data}
        part = summary_from_dict({**own, **{name: graph[name] for name in GRAPH_FIELDS}}, source, error=error)
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
