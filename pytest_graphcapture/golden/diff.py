"""The one comparison of two summaries, per graph of a key, and what a golden check is asked (CheckOptions)."""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from ..errors import GoldenError, UsageError
from ..keys import CaptureKey, key_label
from ..summary.model import count_changes, graph_count, kernel_view
from ..summary.normalize import LEVELS, compile_patterns
from ..summary.scan import op_label
from .change import (
    DEFAULT_CLASSES,
    MAX_LINE_WIDTH,
    MAX_NAME_WIDTH,
    SECTIONS,
    Change,
    KeyDiff,
    OpClasses,
    abstract_bs,
    compact,
    environment_note,
    fit_list,
    shorten,
    shorten_pair,
    slot,
    toolchain_changes,
    torch_release_changed,
)
from .expect import DEFAULT_MEMORY_TOLERANCE, Expect, check_tolerance, expectations

#: Name width of each side of a kernel swap (``old → new``), so the line stays short.
_SWAP_WIDTH = 72


def _fit_pair(was: str, now: str, room: int) -> tuple[str, str]:
    """Two kernel names shortened (in the middle) to share ``room`` characters; a short one is kept whole."""
    if len(was) + len(now) <= room:
        return was, now
    half = max(_SWAP_WIDTH // 3, room // 2)
    keep = room - max(_SWAP_WIDTH // 3, room // 3)  # a name this short stays whole; the other gets the rest
    if len(now) <= keep and len(now) <= len(was):
        return shorten(was, max(_SWAP_WIDTH // 3, room - len(now))), now
    if len(was) <= keep:
        return was, shorten(now, max(_SWAP_WIDTH // 3, room - len(was)))
    return shorten_pair(was, now, half)


#: Characters a list of kernels may take in a failure line (the diff file lists them all).
LIST_BUDGET = 140


def _split_launch(label: str) -> tuple[str, str]:
    """A kernel label as ``(the rest, launch shape)``; the shape is empty where the label has none."""
    head, sep, shape = label.rpartition(" <<<")
    return (head, "<<<" + shape) if sep and shape.endswith(">>>") else (label, "")


def _launch_swap(was: str, now: str) -> Optional[tuple[str, str, str]]:
    """``(kernel, old shape, new shape)`` when two kernel labels differ only in the graph's launch shape."""
    (head_was, shape_was), (head_now, shape_now) = _split_launch(was), _split_launch(now)
    if shape_was and shape_now and head_was == head_now and shape_was != shape_now:
        return head_was, shape_was, shape_now
    return None


def _kernel_changes(expected: list, actual: list) -> list[Change]:
    """Kernel changes, per launching op where both sides name ops (a swap reads as one line)."""
    if not all(any("launch" in entry for entry in side) for side in (expected, actual)):  # compared where both have it
        expected, actual = (
            [{k: v for k, v in e.items() if k != "launch"} for e in side] for side in (expected, actual)
        )
    if not (_attributed(expected) and _attributed(actual)):
        # A golden written before kernels named their op (or an NVIDIA replay): compare kernels alone.
        return _plain_kernel_changes(expected, actual)
    exp, act = _by_op(expected), _by_op(actual)
    changes = _plain_kernel_changes(exp.pop(None, []), act.pop(None, []))  # launched outside any op
    for op in sorted(set(exp) | set(act)):
        old, new = kernel_view(exp.get(op, [])), kernel_view(act.get(op, []))
        if old == new:
            continue
        if not old or not new:
            kind = "added" if not old else "removed"
            items = new or old
            changes.append(
                Change("kernels", kind, op, None if not old else old, None if not new else new, *_texts(": ", items))
            )
            continue
        removed = {k: c for k, c in old.items() if k not in new}
        added = {k: c for k, c in new.items() if k not in old}
        short, full = [], []
        if removed or added:
            if len(removed) == len(added) == 1 and sum(removed.values()) == sum(added.values()):
                (was, count), (now, _) = next(iter(removed.items())), next(iter(added.items()))
                swap = _launch_swap(was, now)
                if swap:  # the same kernel, launched with another shape: name it once
                    name, old_shape, new_shape = swap
                    short.append(f"{shorten(name, _SWAP_WIDTH)} {old_shape} → {new_shape} (×{count})")
                    full.append(f"{name} {old_shape} → {new_shape} (×{count})")
                else:
                    tail = f" (×{count})"
                    room = MAX_LINE_WIDTH - len(op) - len(tail) - 7  # "~ op: " and " → "
                    a, b = _fit_pair(was, now, room)
                    short.append(f"{a} → {b}{tail}")
                    full.append(f"{was} → {now} (×{count})")
            else:
                (rs, rf), (as_, af) = _texts("", removed, LIST_BUDGET // 2), _texts("", added, LIST_BUDGET // 2)
                short.append(f"{rs or '(none)'} → {as_ or '(none)'}")
                full.append(f"{rf or '(none)'} → {af or '(none)'}")
        for name in sorted(k for k in old if k in new and old[k] != new[k]):
            short.append(f"{shorten(name, MAX_NAME_WIDTH)} count {old[name]} → {new[name]}")
            full.append(f"{name} count {old[name]} → {new[name]}")
        changes.append(Change("kernels", "changed", op, old, new, ": " + "; ".join(short), ": " + "; ".join(full)))
    return sorted(changes, key=lambda c: (c.subject, c.kind))


def _attributed(kernels: list) -> bool:
    return any(entry.get("op") for entry in kernels)


def _by_op(kernels: list) -> dict[Optional[str], list]:
    groups: dict[Optional[str], list] = {}
    for entry in kernels:
        groups.setdefault(op_label(entry["op"]) if entry.get("op") else None, []).append(entry)
    return groups


def _texts(prefix: str, counts: Mapping[str, int], budget: int = LIST_BUDGET) -> tuple[str, str]:
    """``(shortened, full)`` text of ``{kernel label: count}``: ``k1 ×2, k2 ×1``; the short one within ``budget``."""
    items = sorted(counts.items())
    short = fit_list([f"{shorten(k, MAX_NAME_WIDTH)} ×{c}" for k, c in items], budget)
    full = ", ".join(f"{k} ×{c}" for k, c in items)
    return (prefix + short if short else ""), (prefix + full if full else "")


def _plain_kernel_changes(expected: list, actual: list) -> list[Change]:
    changes = []
    counted = count_changes(kernel_view(expected), kernel_view(actual))
    # A kernel that is gone at one launch shape and new at another, as often: one changed line.
    gone: dict[str, list] = {}
    new_at: dict[str, list] = {}
    for label, old, new in counted:
        head, shape = _split_launch(label)
        if shape and (not old or not new):
            (new_at if not old else gone).setdefault(head, []).append((label, old or new))
    paired = set()
    for name in sorted(set(gone) & set(new_at)):
        if len(gone[name]) == len(new_at[name]) == 1 and gone[name][0][1] == new_at[name][0][1]:
            (was, count), (now, _) = gone[name][0], new_at[name][0]
            _, old_shape, new_shape = _launch_swap(was, now)  # type: ignore[misc]
            changes.append(Change("kernels", "changed", name, was, now, f" {old_shape} → {new_shape} (×{count})"))
            paired.update((was, now))
    for label, old, new in counted:
        if label in paired:
            continue
        if not old:
            changes.append(Change("kernels", "added", label, None, new, f" ×{new}"))
        elif not new:
            changes.append(Change("kernels", "removed", label, old, None, f" ×{old}"))
        else:
            changes.append(Change("kernels", "changed", label, old, new, f" count {old} → {new}"))
    return sorted(changes, key=lambda c: (c.subject, c.kind))


def _topology_changes(expected: Optional[Mapping], actual: Optional[Mapping]) -> list[Change]:
    """The graph's node counts by type and ``branches``, compared where both sides read a graph."""
    if not expected or not actual:
        return []
    changes = []
    old_nodes, new_nodes = expected.get("nodes", {}), actual.get("nodes", {})
    for node_type in sorted(set(old_nodes) | set(new_nodes)):
        old, new = old_nodes.get(node_type, 0), new_nodes.get(node_type, 0)
        if old != new:
            changes.append(
                Change("kernels", "changed", f"graph nodes ({node_type})", old, new, f" count {old} → {new}")
            )
    old_branches, new_branches = expected.get("branches"), actual.get("branches")
    if old_branches != new_branches:
        changes.append(
            Change(
                "kernels",
                "changed",
                "graph branches (nodes that can run at once)",
                old_branches,
                new_branches,
                f" {old_branches} → {new_branches}",
            )
        )
    return changes


if TYPE_CHECKING:
    from deepdiff import DeepDiff


def _op_signature(item: Mapping[str, Any]) -> str:
    return compact([item.get("input_dims", []), item.get("input_types", [])])


def _op_view(ops: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{op name: {signature: count}}`` where a signature is ``[input_dims, input_types]``."""
    view: dict[str, dict[str, int]] = {}
    for item in ops:
        shapes = view.setdefault(item["name"], {})
        sig = _op_signature(item)
        shapes[sig] = shapes.get(sig, 0) + int(item["count"])
    return view


def _launch_view(launches: Mapping[str, Any]) -> dict[str, Any]:
    """``{"total": n, "by_api": {api: n}}``."""
    return {"total": int(launches.get("total", 0)), "by_api": dict(launches.get("by_api", {}))}


def _deepdiff(expected: Any, actual: Any) -> DeepDiff:
    from deepdiff import DeepDiff  # imported when a diff is needed: it costs every pytest start a fifth of a second

    try:
        # Report per-item changes even when most items of a dict changed (deepdiff >= 8).
        return DeepDiff(expected, actual, view="tree", verbose_level=2, threshold_to_diff_deeper=0)
    except (TypeError, ValueError):
        return DeepDiff(expected, actual, view="tree", verbose_level=2)


def _expand(path: list, old: Any, new: Any, out: dict[str, list[tuple[list, Any, Any]]]) -> None:
    """Split a wholesale dict replacement (older deepdiff) into per-key changes."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        out.setdefault("values_changed", []).append((path, old, new))
        return
    for name in sorted(set(old) | set(new), key=str):
        if name not in old:
            out.setdefault("dictionary_item_added", []).append((path + [name], None, new[name]))
        elif name not in new:
            out.setdefault("dictionary_item_removed", []).append((path + [name], old[name], None))
        elif old[name] != new[name]:
            _expand(path + [name], old[name], new[name], out)


def _tree(expected: Any, actual: Any) -> dict[str, list[tuple[list, Any, Any]]]:
    """DeepDiff tree view flattened to ``{report type: [(path list, old, new)]}``."""
    out: dict[str, list[tuple[list, Any, Any]]] = {}
    for report_type, levels in _deepdiff(expected, actual).items():
        for level in levels:
            old = None if type(level.t1).__name__ == "NotPresent" else level.t1
            new = None if type(level.t2).__name__ == "NotPresent" else level.t2
            path = level.path(output_format="list")
            if report_type == "values_changed" and isinstance(old, dict) and isinstance(new, dict):
                _expand(path, old, new, out)
            else:
                out.setdefault(report_type, []).append((path, old, new))
    for entries in out.values():
        entries.sort(key=lambda e: [str(p) for p in e[0]])
    return out


def _sig_texts(sigs: Sequence[str], among: Sequence[str]) -> list[str]:
    """Each signature's text, with its input types wherever its shapes alone match another of ``among``."""
    seen = Counter(_sig_text(s, False) for s in among)
    return [_sig_text(s, seen[_sig_text(s, False)] > 1) for s in sigs]


def _sig_text(sig: str, show_types: bool) -> str:
    dims, types = json.loads(sig)
    text = compact(dims)
    if show_types and types:
        text += f" ({', '.join(str(t) for t in types)})"
    return text


def _listed(lists: list[tuple[str, ...]], texts: list[str]) -> str:
    """The slot where ``texts`` go in a line (appended to ``lists``), or ``(none)``."""
    if not texts:
        return "(none)"
    lists.append(tuple(texts))
    return slot(len(lists) - 1)


def _op_changes(expected: list, actual: list, batch_size: Optional[int] = None) -> list[Change]:
    """Op changes: one line per op added or removed per shape, one line per op whose shapes changed."""
    order = lambda sig: abstract_bs(sig, batch_size)  # noqa: E731
    exp, act = _op_view(expected), _op_view(actual)
    tree = _tree(exp, act)
    changes: list[Change] = []
    for path, _, new in tree.get("dictionary_item_added", []):
        if len(path) == 1:
            sigs = sorted(new, key=order)
            for sig, text in zip(sigs, _sig_texts(sigs, sigs)):
                changes.append(Change("ops", "added", path[0], None, sig, f" {text} ×{new[sig]}"))
    for path, old, _ in tree.get("dictionary_item_removed", []):
        if len(path) == 1:
            sigs = sorted(old, key=order)
            for sig, text in zip(sigs, _sig_texts(sigs, sigs)):
                changes.append(Change("ops", "removed", path[0], sig, None, f" {text} ×{old[sig]}"))
    # Ops present on both sides: per-op shape sets (matched by name), one line per op.
    touched = sorted({p[0] for entries in tree.values() for p, _, _ in entries if p[0] in exp and p[0] in act})
    for name in touched:
        old_shapes, new_shapes = exp[name], act[name]
        removed = sorted((s for s in old_shapes if s not in new_shapes), key=order)
        added = sorted((s for s in new_shapes if s not in old_shapes), key=order)
        recounted = sorted((s for s in old_shapes if s in new_shapes and old_shapes[s] != new_shapes[s]), key=order)
        parts: list[str] = []
        lists: list[tuple[str, ...]] = []

        if removed or added:
            # Types are shown where shapes alone would print old and new (or two entries) alike.
            was = _listed(lists, _sig_texts(removed, removed + added))
            now = _listed(lists, _sig_texts(added, removed + added))
            old_count, new_count = sum(old_shapes[s] for s in removed), sum(new_shapes[s] for s in added)
            counts = f" (count {old_count} → {new_count})" if old_count != new_count else ""
            parts.append(f"{was} → {now}{counts}")
        if recounted:
            texts = _sig_texts(recounted, recounted)
            parts.append(
                _listed(lists, [f"{t} count {old_shapes[s]} → {new_shapes[s]}" for s, t in zip(recounted, texts)])
            )
        old_value = removed if (removed or added) else (old_shapes[recounted[0]] if len(recounted) == 1 else None)
        new_value = added if (removed or added) else (new_shapes[recounted[0]] if len(recounted) == 1 else None)
        detail = " " + "; ".join(parts)
        changes.append(Change("ops", "changed", name, old_value, new_value, detail, lists=tuple(lists)))
    kinds = {"removed": 0, "added": 1, "changed": 2}
    return sorted(changes, key=lambda c: (c.subject, kinds[c.kind]))


def _launch_changes(expected: Mapping, actual: Mapping) -> list[Change]:
    tree = _tree(_launch_view(expected), _launch_view(actual))
    changes = []
    for path, old, new in tree.get("values_changed", []) + tree.get("type_changes", []):
        subject = "total launches" if path == ["total"] else str(path[-1])
        changes.append(Change("launches", "changed", subject, old, new, f" {old} → {new}"))
    for path, _, new in tree.get("dictionary_item_added", []):
        changes.append(Change("launches", "added", str(path[-1]), None, new, f" {new} (was 0)"))
    for path, old, _ in tree.get("dictionary_item_removed", []):
        changes.append(Change("launches", "removed", str(path[-1]), old, None, f" {old} (now 0)"))
    return sorted(changes, key=lambda c: (c.subject != "total launches", c.subject))


def _check_sections(sections: Sequence[str]) -> tuple[str, ...]:
    """The sections a check compares, in canonical order; UsageError for an empty or unknown set."""
    if isinstance(sections, str):
        sections = (sections,)
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        raise UsageError(f"sections={tuple(sections)!r}: expected a non-empty subset of {SECTIONS}")
    return tuple(s for s in SECTIONS if s in sections)


def require_level(level: str, summary: Any, what: str, path: Any) -> None:
    """UsageError for an unknown level, GoldenError when ``summary`` is coarser than ``level``."""
    levels = LEVELS
    if level not in levels:
        raise UsageError(f"level={level!r}: expected one of {', '.join(levels)}")
    own = summary.level
    if own in levels and levels.index(level) < levels.index(own):
        raise GoldenError(
            path,
            f"{what} is at level {own!r}, cannot compare at the finer level {level!r}; "
            f"check at level {own!r} or re-create it with --update-golden",
        )


def diff_dicts(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    *,
    sections: Sequence[str] = SECTIONS,
    batch_size: Optional[int] = None,
) -> list[Change]:
    """Changes between two summary dicts (shaped like ``Summary.to_dict()``), in ``sections``."""
    changes: list[Change] = []
    sections = _check_sections(sections)
    if "kernels" in sections:
        changes += _kernel_changes(expected.get("kernels", []), actual.get("kernels", []))
        changes += _topology_changes(expected.get("topology"), actual.get("topology"))
    if "ops" in sections:
        changes += _op_changes(expected.get("ops", []), actual.get("ops", []), batch_size)
    if "launches" in sections:
        changes += _launch_changes(expected.get("launches", {}), actual.get("launches", {}))
    return changes


def completeness(data: Mapping[str, Any]) -> tuple[bool, Optional[str]]:
    """``(complete, reason)`` of a summary dict, in the current or the old boolean layout."""
    value = data.get("complete", {"value": True})
    if isinstance(value, Mapping):
        return bool(value.get("value", True)), value.get("reason")
    return bool(value), data.get("incomplete_reason")


def compare_dicts(
    expected: Mapping[str, Any],
    actual: Mapping[str, Any],
    key: CaptureKey,
    *,
    sections: Sequence[str] = SECTIONS,
    golden: Optional[str] = None,
    classes: OpClasses = DEFAULT_CLASSES,
) -> KeyDiff:
    """:class:`KeyDiff` of two already-normalized summary dicts; ``classes`` orders its op lines."""
    sections = _check_sections(sections)
    result = KeyDiff(key=key, golden=golden, classes=classes)
    act_ok, act_reason = completeness(actual)
    exp_ok, exp_reason = completeness(expected)
    if not act_ok:
        result.incomplete = act_reason or "no reason given"
        if "kernels" in sections:
            result.notes.append(f"incomplete: {result.incomplete} (kernels not compared)")
            sections = tuple(s for s in sections if s != "kernels")
    elif not exp_ok and "kernels" in sections:
        result.notes.append(
            f"golden was written from an incomplete capture ({exp_reason or 'no reason given'}); "
            "kernels not compared, refresh it with --update-golden"
        )
        sections = tuple(s for s in sections if s != "kernels")
    if sections:
        result.changes = diff_dicts(expected, actual, sections=sections, batch_size=key.batch_size)
    if result.changes:
        old_env, new_env = expected.get("environment") or {}, actual.get("environment") or {}
        result.toolchain = toolchain_changes(old_env, new_env)
        result.torch_release_changed = torch_release_changed(old_env, new_env)
        note = environment_note(old_env, new_env)
        if note:
            result.notes.append(note)
    return result


def compare(
    expected: Any,
    actual: Any,
    *,
    level: str = "name",
    ignore_kernels: Sequence[str] = (),
    ignore_ops: Sequence[str] = (),
    sections: Sequence[str] = SECTIONS,
    golden: Optional[str] = None,
    rename: Optional[Callable[[str, str], Optional[str]]] = None,
    classes: OpClasses = DEFAULT_CLASSES,
) -> KeyDiff:
    """Compare golden ``expected`` with ``actual`` (both Summary objects) at ``level``."""
    require_level(level, actual, "the captured summary", golden or "<actual>")
    require_level(level, expected, "the golden", golden or "<golden>")
    exp = expected.normalized(level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops), rename=rename)
    act = actual.normalized(level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops), rename=rename)
    return compare_dicts(exp.to_dict(), act.to_dict(), actual.key, sections=sections, golden=golden, classes=classes)


@dataclass
class _GraphsDiff:
    """The differences of a key of several graphs: a :class:`~.diff.KeyDiff` per differing graph, or the count."""

    key: CaptureKey
    graphs: int
    golden_graphs: int
    #: ``(graph number from 1, its diff)`` of each graph that differs (same graph count).
    parts: list = field(default_factory=list)
    #: The diff of the sums, when the graph counts differ.
    whole: Optional[KeyDiff] = None
    golden: Optional[str] = None
    changes: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    incomplete: Optional[str] = None
    toolchain: list = field(default_factory=list)
    torch_release_changed: bool = False

    @property
    def ok(self) -> bool:
        return self.graphs == self.golden_graphs and not self.parts

    def render(
        self, width: Optional[int] = MAX_NAME_WIDTH, *, brief: bool = False, full_diff: Optional[str] = None
    ) -> list[str]:
        """Lines like :meth:`~.change.KeyDiff.render`'s, each graph's diff under a heading naming the graph."""
        options = {"brief": brief, "full_diff": full_diff}
        label = key_label(self.key)
        where = f" ({self.golden})" if self.golden else ""
        lines: list[str] = []
        if self.graphs != self.golden_graphs:
            lines.append(f"{label}: {_graphs(self.graphs)}, goldens have {self.golden_graphs}{where}")
            if self.whole is not None and self.whole.changes:
                lines.append(f"  summed over the graphs, {label}:")
                lines += ["  " + line for line in self.whole.render(width, **options)[1:]]
            return lines + [f"  note: {n}" for n in self.notes]
        for number, diff in self.parts:
            body = diff.render(width, **options)
            lines.append(f"{label} graph {number} of {self.graphs}{where}:")
            lines += [line for line in body[1:] if not line.startswith("  note: ")]
        return lines + [f"  note: {n}" for n in self.notes]


def _graphs(n: int) -> str:
    return f"{n} graph{'s' if n != 1 else ''}"


def compare_keys(expected: Any, actual: Any, options: CheckOptions, golden: Optional[str] = None) -> Any:
    """:func:`compare` graph by graph: a :class:`KeyDiff` for keys of one graph, else a :class:`_GraphsDiff`."""
    o = options
    kw = dict(level=o.level, ignore_kernels=o.ignore_kernels, ignore_ops=o.ignore_ops, sections=o.sections)
    kw.update(golden=golden, rename=o.rename, classes=o.op_classes)
    n, m = graph_count(actual), graph_count(expected)
    if n == 1 and m == 1:
        return compare(expected, actual, **kw)
    result = _GraphsDiff(actual.key, n, m, golden=golden)
    if n != m:
        result.whole = compare(_alone(expected), _alone(actual), **kw)
        result.notes = list(result.whole.notes)
        result.toolchain, result.torch_release_changed = result.whole.toolchain, result.whole.torch_release_changed
        return result
    notes: list = []
    for number, (old, new) in enumerate(zip(expected.graphs, actual.graphs), 1):
        old.environment, new.environment = expected.environment, actual.environment
        diff = compare(old, new, **kw)
        notes += [n for n in diff.notes if n not in notes]
        if diff.changes:
            result.parts.append((number, diff))
            result.toolchain = result.toolchain or diff.toolchain
            result.torch_release_changed = result.torch_release_changed or diff.torch_release_changed
    result.notes = notes if result.parts else []
    result.incomplete = actual.incomplete_reason if not actual.complete else None
    return result


def _alone(summary: Any) -> Any:
    """The key's sums without its graphs: what a count mismatch compares."""
    if not summary.graphs:
        return summary
    whole = copy.copy(summary)
    whole.graphs = None
    return whole


#: A project's own kernel-name normalization ``(name, level) -> name or None`` (the normalize hook).
_Rename = Optional[Callable[[str, str], Optional[str]]]


@dataclass(frozen=True)
class CheckOptions:
    """What one ``golden.check`` call asked for."""

    level: str = "name"
    ignore_kernels: tuple[str, ...] = ()
    ignore_ops: tuple[str, ...] = ()
    sections: tuple[str, ...] = SECTIONS
    max_launches: Union[int, Mapping[int, int], None] = None
    share_ranks: bool = False
    rename: _Rename = None
    max_graph_memory: Union[int, Mapping[int, int], None] = None
    memory_tolerance: float = DEFAULT_MEMORY_TOLERANCE
    #: Which ops lead a failure and which fold as view/metadata ops (``golden_view_ops`` / ``golden_compute_ops``).
    op_classes: OpClasses = DEFAULT_CLASSES
    #: Kernel expectations that must hold per batch size (``golden.check(expect=...)``).
    expect: tuple[Expect, ...] = ()

    def __post_init__(self) -> None:
        check_tolerance(self.memory_tolerance)
        object.__setattr__(self, "expect", expectations(self.expect, "golden.check(expect=...)"))
        if self.level not in LEVELS:
            raise UsageError(f"golden.check(level={self.level!r}): expected one of {', '.join(LEVELS)}")
        object.__setattr__(self, "sections", _check_sections(self.sections))
        # A bad pattern is the caller's mistake, not a mismatch of every key: refuse it up front.
        for option, given in (("ignore_kernels", self.ignore_kernels), ("ignore_ops", self.ignore_ops)):
            patterns = (given,) if isinstance(given, str) else tuple(given)
            compile_patterns(patterns, what=f"golden.check({option}=...):")
            object.__setattr__(self, option, patterns)
