"""The one comparison of two summaries: what changed, as lines a reviewer reads.

Summaries are compared through views keyed by kernel label and op name (deepdiff
over those views), so each change is one readable line per item; the golden gate,
the CLI's ``diff``, the HTML picture and the share-ranks check all use
:func:`compare_dicts` (or :func:`diff_dicts`) from here.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Optional, Sequence

from ..errors import GoldenError, UsageError
from ..keys import CaptureKey
from ..summary.normalize import LEVELS
from .change import MAX_DIFF_LINES, MAX_NAME_WIDTH, SECTIONS, Change, KeyDiff, abstract_bs, compact, cut_lines, slot
from .environment import environment_note, toolchain_changes, torch_release_changed
from .kernel_diff import kernel_changes, topology_changes
from .op_classes import DEFAULT_CLASSES, OpClasses

if TYPE_CHECKING:
    from deepdiff import DeepDiff

__all__ = [
    "MAX_DIFF_LINES",
    "MAX_NAME_WIDTH",
    "SECTIONS",
    "Change",
    "KeyDiff",
    "check_sections",
    "compare",
    "compare_dicts",
    "completeness",
    "cut_lines",
    "diff_dicts",
    "launch_view",
    "op_view",
    "require_level",
]


def _op_signature(item: Mapping[str, Any]) -> str:
    return compact([item.get("input_dims", []), item.get("input_types", [])])


def op_view(ops: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """``{op name: {signature: count}}`` where a signature is ``[input_dims, input_types]``."""
    view: dict[str, dict[str, int]] = {}
    for item in ops:
        shapes = view.setdefault(item["name"], {})
        sig = _op_signature(item)
        shapes[sig] = shapes.get(sig, 0) + int(item["count"])
    return view


def launch_view(launches: Mapping[str, Any]) -> dict[str, Any]:
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
    """DeepDiff tree view flattened to ``{report type: [(path list, old, new)]}``.

    Paths always reach the changed leaf (or the added/removed key), whatever
    threshold deepdiff uses to report a mostly-changed dict as one replacement.
    """
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
    """Op changes: one line per op added or removed per shape, one line per op whose shapes changed.

    Shapes are listed in an order that does not depend on the batch size (``batch_size``
    sorts as one symbol), so the same change at two sizes reads the same and the
    batch-size axis merges it.  The short text lists what changed within a budget; the
    full text (the diff file) lists every shape.
    """
    order = lambda sig: abstract_bs(sig, batch_size)  # noqa: E731
    exp, act = op_view(expected), op_view(actual)
    tree = _tree(exp, act)
    changes: list[Change] = []
    for path, _, new in tree.get("dictionary_item_added", []):
        if len(path) == 1:
            for sig in sorted(new, key=order):
                changes.append(Change("ops", "added", path[0], None, sig, f" {_sig_text(sig, False)} ×{new[sig]}"))
    for path, old, _ in tree.get("dictionary_item_removed", []):
        if len(path) == 1:
            for sig in sorted(old, key=order):
                changes.append(Change("ops", "removed", path[0], sig, None, f" {_sig_text(sig, False)} ×{old[sig]}"))
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
            old_dims = {json.dumps(json.loads(s)[0]) for s in removed}
            new_dims = {json.dumps(json.loads(s)[0]) for s in added}
            show_types = old_dims == new_dims  # only the dtypes changed: say so
            was = _listed(lists, [_sig_text(s, show_types) for s in removed])
            now = _listed(lists, [_sig_text(s, show_types) for s in added])
            old_count, new_count = sum(old_shapes[s] for s in removed), sum(new_shapes[s] for s in added)
            counts = f" (×{old_count} → ×{new_count})" if old_count != new_count else ""
            parts.append(f"{was} → {now}{counts}")
        if recounted:
            parts.append(
                _listed(lists, [f"{_sig_text(s, False)} ×{old_shapes[s]} → ×{new_shapes[s]}" for s in recounted])
            )
        old_value = removed if (removed or added) else (old_shapes[recounted[0]] if len(recounted) == 1 else None)
        new_value = added if (removed or added) else (new_shapes[recounted[0]] if len(recounted) == 1 else None)
        detail = " " + "; ".join(parts)
        changes.append(Change("ops", "changed", name, old_value, new_value, detail, lists=tuple(lists)))
    kinds = {"removed": 0, "added": 1, "changed": 2}
    return sorted(changes, key=lambda c: (c.subject, kinds[c.kind]))


def _launch_changes(expected: Mapping, actual: Mapping) -> list[Change]:
    tree = _tree(launch_view(expected), launch_view(actual))
    changes = []
    for path, old, new in tree.get("values_changed", []) + tree.get("type_changes", []):
        subject = "total launches" if path == ["total"] else str(path[-1])
        changes.append(Change("launches", "changed", subject, old, new, f" {old} → {new}"))
    for path, _, new in tree.get("dictionary_item_added", []):
        changes.append(Change("launches", "added", str(path[-1]), None, new, f" {new} (was 0)"))
    for path, old, _ in tree.get("dictionary_item_removed", []):
        changes.append(Change("launches", "removed", str(path[-1]), old, None, f" {old} (now 0)"))
    return sorted(changes, key=lambda c: (c.subject != "total launches", c.subject))


def check_sections(sections: Sequence[str]) -> tuple[str, ...]:
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
    own = getattr(summary, "level", levels[0])
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
    """Changes between two summary dicts (shaped like ``Summary.to_dict()``), in ``sections``.

    ``batch_size`` (the key's) orders shape lists the same way at every size.
    """
    changes: list[Change] = []
    sections = check_sections(sections)
    if "kernels" in sections:
        changes += kernel_changes(expected.get("kernels", []), actual.get("kernels", []))
        changes += topology_changes(expected.get("topology"), actual.get("topology"))
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
    """:class:`KeyDiff` of two already-normalized summary dicts; ``classes`` orders its op lines.

    An incomplete actual summary (or golden) skips the kernel section: missing kernel
    evidence is not a regression; ops and launches are still compared.  The
    environment is only mentioned when there are differences.
    """
    sections = check_sections(sections)
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
    """Compare golden ``expected`` with ``actual`` (both Summary objects) at ``level``.

    Both sides are normalized to ``level`` and stripped of kernels/ops matching the
    ``ignore_*`` regexes first.  ``golden`` is the golden's display path, used in
    error messages and in the rendered heading.
    """
    require_level(level, actual, "the captured summary", golden or "<actual>")
    require_level(level, expected, "the golden", golden or "<golden>")
    exp = expected.normalized(level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops), rename=rename)
    act = actual.normalized(level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops), rename=rename)
    return compare_dicts(exp.to_dict(), act.to_dict(), actual.key, sections=sections, golden=golden, classes=classes)
