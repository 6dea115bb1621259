"""One change and one key's diff, rendered: op classes, the batch-size axis of the failure text, the environment."""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..keys import CaptureKey, key_label
from ..summary.platform import version_text
from .report import LIST_LIMIT

#: Compute ops by class, in the order a failure lists them.
_COMPUTE_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (name, tuple(ops.split()))
    for name, ops in (
        ("gemm", "mm addmm bmm baddbmm matmul linear addmv mv dot einsum _scaled_mm _int_mm *gemm* conv* _convolution"),
        ("attention", "*attention* *attn* _flash_* _efficient_* *sdpa*"),
        ("norm", "*norm*"),
        ("activation", "silu silu_ gelu gelu_ relu relu_ *softmax* sigmoid tanh *glu* mish hardswish"),
        ("embedding", "embedding* *rotary* rope* *_rope*"),
        (
            "collective",
            "c10d::* _c10d_functional::* *all_reduce* *allreduce* *all_gather* *allgather* *reduce_scatter* *all_to_all* *alltoall* broadcast*",
        ),
        ("fused", "triton_* *fused* *moe*"),
    )
)

#: View and metadata ops: they change how a tensor is seen or allocate it, and launch no work.
VIEW_OPS: tuple[str, ...] = tuple(
    "as_strided as_strided_ view view_as _unsafe_view _reshape_alias reshape reshape_as flatten unflatten "
    "t t_ transpose transpose_ swapaxes movedim permute expand expand_as slice select narrow split "
    "split_with_sizes unsafe_split chunk unbind unsqueeze unsqueeze_ squeeze squeeze_ diagonal alias "
    "lift_fresh resolve_conj resolve_neg _conj _neg_view detach detach_ empty empty_like empty_strided "
    "new_empty new_empty_strided resize_ result_type size stride sym_* ".split()
)

COMPUTE, OTHER, VIEW = 0, 1, 2


def _compile(patterns: Iterable[str]) -> re.Pattern:
    parts = [fnmatch.translate(p) for p in patterns if p]
    return re.compile("|".join(parts) if parts else r"(?!)")


def parse_globs(text: str) -> tuple[str, ...]:
    """Globs from a setting's text: separated by commas, spaces or newlines."""
    return tuple(p for p in re.split(r"[,\s]+", text or "") if p)


@dataclass(frozen=True)
class OpClasses:
    """The built-in op classes plus a project's own compute and view/metadata globs."""

    extra_view: tuple[str, ...] = ()
    extra_compute: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        compute = [(name, _compile(globs)) for name, globs in _COMPUTE_CLASSES]
        # A project's own compute ops rank with the GEMMs: it named them because they matter.
        compute.insert(0, ("project", _compile(self.extra_compute)))
        object.__setattr__(self, "_compute", tuple(compute))
        object.__setattr__(self, "_project_view", _compile(self.extra_view))
        object.__setattr__(self, "_view", _compile(VIEW_OPS))

    def rank(self, name: str) -> tuple[int, int]:
        """``(tier, class)``: tier :data:`COMPUTE`, :data:`OTHER` or :data:`VIEW`; ``class`` orders compute ops."""
        names = (name, name.rsplit("::", 1)[-1])
        compute = self._compute  # type: ignore[attr-defined]
        if any(compute[0][1].fullmatch(n) for n in names):
            return COMPUTE, 0
        if any(self._project_view.fullmatch(n) for n in names):  # type: ignore[attr-defined]
            return VIEW, 0
        for index, (_, pattern) in enumerate(compute[1:], 1):
            if any(pattern.fullmatch(n) for n in names):
                return COMPUTE, index
        if any(self._view.fullmatch(n) for n in names):  # type: ignore[attr-defined]
            return VIEW, 0
        return OTHER, 0

    def kind(self, name: str) -> str:
        """The class an op is of: ``gemm``, ``attention``, … ``project`` (the settings), ``other`` or ``view``."""
        tier, index = self.rank(name)
        return self._compute[index][0] if tier == COMPUTE else ("view" if tier == VIEW else "other")  # type: ignore[attr-defined]


DEFAULT_CLASSES = OpClasses()


def op_classes(view: Sequence[str] = (), compute: Sequence[str] = ()) -> OpClasses:
    """The classes with a project's extra globs (the built-in :data:`DEFAULT_CLASSES` without any)."""
    if not view and not compute:
        return DEFAULT_CLASSES
    return OpClasses(tuple(view), tuple(compute))


#: Environment fields that decide which kernels run, and how a failure names them.
_TOOLCHAIN_FIELDS: tuple[tuple[str, str], ...] = (
    ("torch_version", "torch"),
    ("cuda_runtime_version", "CUDA runtime"),
    ("hip_runtime_version", "HIP runtime"),
    ("driver_version", "driver"),
    ("cuda_driver_version", "CUDA driver"),
    ("hip_driver_version", "HIP driver"),
    ("device_name", "device"),
)


def _flatten(env: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in env.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _differs(name: str, old: Any, new: Any) -> bool:
    """Whether two values of one field differ once runtime versions are spelled alike."""
    return version_text(name, old) != version_text(name, new)


#: Profiler flags that cannot change what is gated: stacks, FLOPs, memory and module events are recorded
#: beside the ops and kernels a summary reads (record_shapes can: it decides the ops' shapes).
_UNGATED_FLAGS = frozenset(f"profiler.{f}" for f in ("with_stack", "with_flops", "profile_memory", "with_modules"))


def environment_note(
    expected_env: Mapping[str, Any], actual_env: Mapping[str, Any], *, limit: int = 6
) -> Optional[str]:
    """One line naming each field that differs from the golden's environment (``limit``, then a count), or None."""
    old, new = _flatten(expected_env or {}), _flatten(actual_env or {})
    fields = (set(old) | set(new)) - _UNGATED_FLAGS
    names = sorted(n for n in fields if _differs(n, old.get(n, "(absent)"), new.get(n, "(absent)")))
    items = [f"{n} {old.get(n, '(absent)')} → {new.get(n, '(absent)')}" for n in names[:limit]]
    more = [f"… {len(names) - limit} more"] if len(names) > limit else []
    return "environment differs from the golden's (may explain the diff): " + "; ".join(items + more) if items else None


#: Fields a golden records but no check compares (how the capture was read, what ran it): a difference in
#: them alone is no change of what the golden gates, so no update rewrites a golden for it.
_INFORMATIONAL_FIELDS = ("environment", "kernel_source")


def gated_content(data: Mapping[str, Any]) -> dict:
    """What a golden dict gates: all but :data:`_INFORMATIONAL_FIELDS` and the wording of an incompleteness reason."""
    out = {k: v for k, v in data.items() if k not in _INFORMATIONAL_FIELDS}
    if isinstance(out.get("complete"), Mapping) and not out["complete"].get("value", True):
        out["complete"] = {**out["complete"], "reason": None}  # incomplete either way: the check treats them alike
    return out


def keeping_environment_of(golden: Mapping[str, Any], current: dict) -> dict:
    """``current`` (a golden dict with the same content) carrying ``golden``'s environment."""
    out = {k: v for k, v in current.items() if k not in _INFORMATIONAL_FIELDS}
    out.update((k, golden[k]) for k in _INFORMATIONAL_FIELDS if k in golden)
    if "complete" in golden and "complete" in out:
        if gated_content({"complete": golden["complete"]}) == gated_content({"complete": out["complete"]}):
            out["complete"] = golden["complete"]
    return out


def toolchain_changes(expected_env: Mapping[str, Any], actual_env: Mapping[str, Any]) -> list[str]:
    """``["torch 2.11.0 → 2.12.0", ...]`` for each toolchain field (:data:`_TOOLCHAIN_FIELDS`) that differs."""
    changes = []
    for name, label in _TOOLCHAIN_FIELDS:
        old, new = (expected_env or {}).get(name), (actual_env or {}).get(name)
        if old is not None and new is not None and _differs(name, old, new):
            changes.append(f"{label} {old} → {new}")
    return changes


def torch_release_changed(expected_env: Mapping[str, Any], actual_env: Mapping[str, Any]) -> bool:
    """Whether the golden was written under another torch release than the capture ran on."""
    old, new = (expected_env or {}).get("torch_version"), (actual_env or {}).get("torch_version")
    return old is not None and new is not None and str(old).split("+", 1)[0] != str(new).split("+", 1)[0]


def toolchain_lead(changes: Sequence[str], release_changed: bool) -> Optional[str]:
    """The first line of a failure whose goldens were written under another toolchain, or None."""
    if not changes:
        return None
    listed = "; ".join(changes)
    if release_changed:
        return (
            f"torch release changed: {listed} since the goldens were written (a new torch release can "
            "decompose ops and pick kernels differently, which may explain the diff)"
        )
    return f"{listed} since the goldens were written (may explain the diff)"


def toolchain_lead_of_some(
    groups: Sequence[tuple[str, Sequence[str]]], named: int, failed: int, release_changed: bool
) -> str:
    """The first line when only some failed keys' goldens were written under another toolchain."""
    if len(groups) == 1:
        labels, changes = groups[0]
        listed = "; ".join(changes)
    else:
        labels = ", ".join(group for group, _ in groups)
        listed = "; ".join(f"{'; '.join(changes)} ({group})" for group, changes in groups)
    some = f"{labels} ({named} of {failed} failed keys)"
    others = "the other failed keys show no toolchain change"
    if release_changed:
        return (
            f"torch release changed for {some}: {listed} since their goldens were written (a new torch release "
            f"can decompose ops and pick kernels differently, which may explain their diff; {others})"
        )
    return f"{listed} since the goldens of {some} were written (may explain their diff; {others})"


SECTIONS: tuple[str, ...] = ("kernels", "ops", "launches")

#: Failure messages are cut after this many lines; the full diff goes to a file.
MAX_DIFF_LINES = 60

#: Kernel names longer than this are shortened (in the middle) in failure messages.
MAX_NAME_WIDTH = 120

#: A failure line longer than this is cut (the diff file keeps it whole).
MAX_LINE_WIDTH = 170

#: Stands for the batch size inside a template; printed as ``bs``.
_HOLE = "\x00"


def abstract_bs(text: str, bs: Optional[int]) -> str:
    """``text`` with every number equal to ``bs`` (not part of a longer number or name) as :data:`_HOLE`."""
    if not bs:  # no size, or the unknown size 0: nothing stands for it
        return text
    return re.sub(rf"(?<![\w.]){bs}(?![\w.])", _HOLE, text)


#: Characters each list of a failure line (the old or the new shapes of an op) may take.
LIST_BUDGET = 64


def slot(index: int) -> str:
    """The marker in a line's text where list ``index`` goes (no digit: the batch-size axis leaves it alone)."""
    return f"\x01{chr(ord('a') + index)}\x01"


def _fill_slots(text: str, lists: Sequence[Sequence[str]], budget: Optional[int]) -> str:
    """``text`` with each :func:`slot` replaced by its list, fitted to ``budget`` (whole when None)."""
    for index, items in enumerate(lists):
        text = text.replace(slot(index), fit_list(list(items), budget))
    return text


def fit_list(items: Sequence[str], budget: Optional[int]) -> str:
    """``items`` joined by ", " within about ``budget`` characters, then ``… +N more`` (all when None)."""
    if budget is None or not items:
        return ", ".join(items)
    out = [items[0]]  # an entry is never cut here: a line's fields are (_fit_line)
    for i, item in enumerate(items[1:], 1):
        rest = len(items) - i - 1
        tail = f", … +{rest} more" if rest else ""
        if len(", ".join(out)) + 2 + len(item) + len(tail) > budget:
            return ", ".join(out) + f", … +{len(items) - i} more"
        out.append(item)
    return ", ".join(out)


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def shorten(name: str, width: Optional[int]) -> str:
    if width is None or len(name) <= width:
        return name
    keep = width - 1
    return f"{name[: keep * 2 // 3]}…{name[-(keep - keep * 2 // 3) :]}"


#: What separates the fields of a change line (entries, old → new); a cut never crosses one.
_FIELD_SEPARATORS = re.compile(r"(, |; | → |: | \()")
#: A field is never cut shorter than this: its start and end still tell which entry it is.
_MIN_FIELD_WIDTH = 24


def _fit_line(text: str, width: int) -> str:
    """``text`` within about ``width`` characters, its longest fields shortened in their middle."""
    if len(text) <= width:
        return text
    parts = _FIELD_SEPARATORS.split(text)
    fields, fixed = parts[0::2], sum(map(len, parts[1::2]))
    low, high = _MIN_FIELD_WIDTH, max(map(len, fields))  # the widest cap on every field that fits
    while low < high:
        mid = (low + high + 1) // 2
        if fixed + sum(min(len(f), mid) for f in fields) <= width:
            low = mid
        else:
            high = mid - 1
    cut = [shorten(f, low) for f in fields]
    for i, sep in enumerate(parts[1::2]):
        if sep == " → ":
            cut[i], cut[i + 1] = shorten_pair(fields[i], fields[i + 1], low)
    parts[0::2] = cut
    return "".join(parts)


def shorten_pair(was: str, now: str, width: int) -> tuple[str, str]:
    """Old and new each within ``width``, cut alike around where they first differ: they never look alike."""
    first = len(os.path.commonprefix([was, now]))
    if was == now or max(len(was), len(now)) <= width or first < (width - 1) * 2 // 3:
        return shorten(was, width), shorten(now, width)  # their difference is in the part a middle cut keeps
    start = max(0, first - width // 2)
    cut = lambda t: ("…" if start else "") + t[start : start + width - 2] + ("…" if start + width - 2 < len(t) else "")  # noqa: E731
    return cut(was), cut(now)


@dataclass
class Change:
    """One difference: ``section`` (kernels/ops/launches), ``kind`` (added/removed/changed)."""

    section: str
    kind: str
    subject: str
    old: Any = None
    new: Any = None
    detail: str = ""
    #: ``detail`` with every kernel name at full length (``detail`` shortens long ones).
    full_detail: Optional[str] = None
    #: Lists shown in ``detail`` where it holds :func:`slot` markers: shapes, for example.  A
    #: failure line shows each within :data:`LIST_BUDGET`; the diff file shows them whole.
    lists: tuple[tuple[str, ...], ...] = ()

    def head(self, width: Optional[int] = MAX_NAME_WIDTH) -> str:
        """The line with :func:`slot` markers where ``lists`` go (the whole line when it has none)."""
        marker = {"added": "+", "removed": "-", "changed": "~"}[self.kind]
        detail = self.full_detail if width is None and self.full_detail is not None else self.detail
        return f"{marker} {shorten(self.subject, width)}{detail}"

    def render(self, width: Optional[int] = MAX_NAME_WIDTH) -> str:
        return _line((self.head(width), self.lists), width)

    def to_dict(self) -> dict:
        return {
            "section": self.section,
            "kind": self.kind,
            "subject": self.subject,
            "old": self.old,
            "new": self.new,
            "text": self.render(None),
        }


@dataclass
class KeyDiff:
    """The differences of one capture key against its golden, plus explanatory notes."""

    key: CaptureKey
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    incomplete: Optional[str] = None
    golden: Optional[str] = None
    #: How the golden's torch / CUDA-HIP runtime / driver / device differ from the capture's.
    toolchain: list[str] = field(default_factory=list)
    #: The golden was written under another torch release (not just another build of it).
    torch_release_changed: bool = False
    #: Which ops lead the failure and which are view/metadata ops (the project's settings).
    classes: OpClasses = DEFAULT_CLASSES

    @property
    def ok(self) -> bool:
        return not self.changes

    def ordered(self, section: str) -> list[Change]:
        """The changes of ``section`` in reading order: op lines by class (compute first), else as computed."""
        items = [c for c in self.changes if c.section == section]
        if section != "ops":
            return items
        return sorted(items, key=lambda c: self.classes.rank(c.subject))  # stable: by name within a class

    def render(
        self, width: Optional[int] = MAX_NAME_WIDTH, *, brief: bool = False, full_diff: Optional[str] = None
    ) -> list[str]:
        """Human-readable lines: a heading per key, then per section, then notes."""
        where = f" ({self.golden})" if self.golden else ""
        lines = [f"{key_label(self.key)}{where}:"]
        fold = brief and any(not self.is_view(c) for c in self.changes)
        for section in SECTIONS:
            items = self.ordered(section)
            if not items:
                continue
            counts = {k: sum(1 for c in items if c.kind == k) for k in ("added", "removed", "changed")}
            summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            lines.append(f"  {section}: {summary}")
            entries: list = [(None, (c.head(width), c.lists)) for c in items]
            if brief and section == "ops":
                headline, entries = _glance(entries, self.classes)
                lines[1:1] = [f"  {headline}"] if headline else []
            view = fold and section == "ops"
            lines += _section_lines(entries, view, self.classes, full_diff, lambda _, entry: _line(entry, width))
        lines.extend(f"  note: {n}" for n in self.notes)
        return lines

    def is_view(self, change: Change) -> bool:
        """A change of a view/metadata op (never a kernel or launch line)."""
        return change.section == "ops" and self.classes.rank(change.subject)[0] == VIEW

    def to_dict(self) -> dict:
        return {
            "key": self.key.to_dict(),
            "golden": self.golden,
            "incomplete": self.incomplete,
            "notes": list(self.notes),
            "changes": [c.to_dict() for c in self.changes],
        }


def _folded_line(subjects: Sequence[str], full_diff: Optional[str]) -> str:
    """The one line standing for view/metadata op lines: how many, of which ops, and the file that has them."""
    names = list(dict.fromkeys(s.split("::", 1)[1] if s.startswith("aten::") else s for s in subjects))
    which = fit_list(names, 48)
    where = f"; full diff in {full_diff}" if full_diff else ""
    n = len(subjects)
    return f"+ {n} view/metadata op line{'s' if n != 1 else ''} ({which}){where}"


def _line(entry: Entry, width: Optional[int]) -> str:
    """A line's text with its lists, fitted to a failure line (whole when ``width`` is None)."""
    text = _fill_slots(entry[0], entry[1], None if width is None else LIST_BUDGET)
    return text if width is None else _fit_line(text, MAX_LINE_WIDTH)


def _section_lines(
    items: Sequence[tuple[Any, Entry]], fold: bool, classes: OpClasses, full_diff: Optional[str], show: Any
) -> list[str]:
    """A section's lines, ``show(sizes, entry)`` each; with ``fold``, view/metadata op lines as one."""
    views = [e for _, e in items if fold and classes.rank(_subject(e[0]))[0] == VIEW]
    out = [f"    {show(sizes, e)}" for sizes, e in items if e not in views]
    return out + ([f"    {_folded_line([_subject(e[0]) for e in views], full_diff)}"] if views else [])


_TOKEN = re.compile(r"[\w:.<>]+|\x00")
#: The profiler's input type names of torch dtypes.
_DTYPES = {"float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16", "int": "int32"}
#: Ops that reach a GEMM through another op, outermost first: the op launching the kernels names them.
_GEMM_CALLERS = ("linear", "einsum", "matmul", "conv1d", "conv2d", "conv3d", "convolution", "_convolution")


def _swaps(entry: Entry) -> tuple[frozenset, bool]:
    """The token swaps turning a line's old entries into its new ones, and whether they are all it says."""
    text, lists = entry
    pair = f"{slot(0)} → {slot(1)}"
    if pair not in text or len(lists[0]) != len(lists[1]):
        return frozenset(), False
    tokens = [(_TOKEN.findall(was), _TOKEN.findall(now)) for was, now in zip(lists[0], lists[1])]
    if any(len(a) != len(b) for a, b in tokens):
        return frozenset(), False
    swaps = frozenset((x, y) for a, b in tokens for x, y in zip(a, b) if x != y)
    return swaps, text.endswith(pair) and len(lists) == 2


def _glance(items: list[tuple[Any, Entry]], classes: OpClasses) -> tuple[Optional[str], list[tuple[Any, Entry]]]:
    """Op lines at a glance: a headline for the swap most lines share (the lines it alone explains go), then
    each GEMM caller's line folded into the launching op's line saying the same change."""
    found = [_swaps(entry) for _, entry in items]
    shared = Counter(swap for swaps, _ in found for swap in swaps).most_common(1)
    headline = None
    if shared and shared[0][1] >= 3 and shared[0][1] * 2 > len(items):  # most lines, and more than a headline
        (was, now), _ = shared[0]
        ops = list(dict.fromkeys(_subject(e[0]) for (_, e), (swaps, _) in zip(items, found) if (was, now) in swaps))
        short = [op.rsplit("::", 1)[-1] for op in ops]
        if any(classes.kind(op) == "gemm" and name not in _GEMM_CALLERS for op, name in zip(ops, short)):
            short = [name for name in short if name not in _GEMM_CALLERS]  # a GEMM is named once, by its leaf
        kind = (
            "dtype" if {was, now} <= set(_DTYPES) else "shape" if f"{was}{now}".strip(_HOLE).isdigit() else "op input"
        )
        # The ops are named (compute first, as the lines are): which ops changed is what a reviewer looks for.
        named = ", ".join(short[:6]) + (f", … +{len(short) - 6} more" if len(short) > 6 else "")
        headline = f"{kind} changed: {_DTYPES.get(was, was)} → {_DTYPES.get(now, now)} in {len(short)} op"
        headline = (
            headline.replace(_HOLE, "bs")
            + f"{'s' * (len(short) != 1)} ({named}; below: only what that does not explain)"
        )
        items = [item for item, (swaps, whole) in zip(items, found) if not (whole and swaps == {(was, now)})]
    names = [_subject(e[0]).rsplit("::", 1)[-1] for _, e in items]
    # What a line says changed, whatever the op's own shapes: a caller folds into a leaf saying the same.
    said = [
        (e[0][0], _swaps(e)[0], re.findall(r"×\d+|count \d+ → \d+", _line(e, None).split(" ", 2)[-1])) for _, e in items
    ]
    leaves = [
        j for j, (_, e) in enumerate(items) if classes.kind(_subject(e[0])) == "gemm" and names[j] not in _GEMM_CALLERS
    ]
    callers: dict[int, list[int]] = {}
    for i, (sizes, _) in enumerate(items):
        leaf = next((j for j in leaves if items[j][0] == sizes and said[j] == said[i]), None)
        if names[i] in _GEMM_CALLERS and (said[i][1] or said[i][2]) and leaf is not None:
            callers.setdefault(leaf, []).append(i)
    for leaf, found_callers in callers.items():
        sizes, (text, lists) = items[leaf]
        marker, subject, rest = text.split(" ", 2)
        chain = " › ".join(sorted({names[i] for i in found_callers}, key=_GEMM_CALLERS.index))
        items[leaf] = (sizes, (f"{marker} {subject} (from {chain}) {rest}", lists))
    dropped = {i for found_callers in callers.values() for i in found_callers}
    return headline, [item for i, item in enumerate(items) if i not in dropped]


def cut_lines(lines: list[str], full_path: Optional[Any], *, max_lines: int = MAX_DIFF_LINES) -> list[str]:
    """``lines`` cut to ``max_lines``, ending with where the full diff is when cut."""
    if len(lines) <= max_lines:
        return list(lines)
    hidden = len(lines) - (max_lines - 1)
    where = f"; full diff in {full_path}" if full_path else ""
    return lines[: max_lines - 1] + [f"… {hidden} more lines{where}"]


#: A line as ``(text, lists)``: the text with :func:`~.change.slot` markers where its lists go.
Entry = tuple[str, tuple[tuple[str, ...], ...]]


def _abstract(entry: Entry, bs: int) -> Entry:
    text, lists = entry
    return abstract_bs(text, bs), tuple(tuple(abstract_bs(x, bs) for x in items) for items in lists)


def _fill(template: Entry, bs: int) -> Entry:
    text, lists = template
    put = lambda t: t.replace(_HOLE, str(bs))  # noqa: E731
    return put(text), tuple(tuple(put(x) for x in items) for items in lists)


def _content(entry: Entry) -> Entry:
    """What a line says, whatever order its lists are in: two sizes' lines merge by this."""
    text, lists = entry
    return text, tuple(tuple(sorted(items)) for items in lists)


def _holes(template: Entry) -> int:
    text, lists = template
    return text.count(_HOLE) + sum(x.count(_HOLE) for items in lists for x in items)


def _sizes(sizes: Iterable[int]) -> str:
    """``bs=1,2,4,8``; past :data:`~.report.LIST_LIMIT` sizes ``bs=1…256 (256 sizes)``, so a line stays short."""
    ordered = sorted(sizes)
    if len(ordered) > LIST_LIMIT:
        return f"bs={ordered[0]}…{ordered[-1]} ({len(ordered)} sizes)"
    return "bs=" + ",".join(str(bs) for bs in ordered)


def _subject(template: str) -> str:
    """The op or kernel a change line is about: its second word (``~ aten::mm …``)."""
    return template.split(" ", 2)[1] if template.count(" ") >= 2 else ""


def _grouped(
    items: dict[int, list[Entry]], by_subject: bool = True, classes: Optional[OpClasses] = None
) -> list[tuple[list[int], Entry]]:
    """``[(sizes, template)]`` covering every ``(size, line)`` of ``items`` once."""
    left = {bs: Counter(_content(e) for e in entries) for bs, entries in items.items()}
    own = {bs: {_content(e): e for e in entries} for bs, entries in items.items()}
    out: list[tuple[list[int], Entry]] = []
    while any(+lines for lines in left.values()):
        best: Optional[tuple] = None
        for bs, lines in left.items():
            for content in +lines:
                template = _abstract(own[bs][content], bs)
                covered = [other for other, theirs in left.items() if theirs[_content(_fill(template, other))] > 0]
                # Most sizes first; then the template with the fewest holes (the least guessed).
                score = (len(covered), -_holes(template))
                if best is None or score > best[0]:
                    best = (score, template, covered)
        assert best is not None
        _, template, covered = best
        for bs in covered:
            left[bs][_content(_fill(template, bs))] -= 1
        if len(covered) == 1 and _holes(template):
            template = _fill(template, covered[0])  # one size: print it as it is
        out.append((covered, template))

    # By op class (``classes``: compute ops first), then by op or kernel name (unless
    # ``by_subject`` is False), then in the order the per-size diffs list them
    # (removed before added; total launches first).
    def position(item: tuple[list[int], Entry]) -> tuple:
        sizes, template = item
        subject = _subject(template[0]) if by_subject else ""
        rank = classes.rank(subject) if classes is not None else (0, 0)
        where = min([_content(e) for e in items[bs]].index(_content(_fill(template, bs))) for bs in sizes)
        return (rank, subject, where, sizes)

    return sorted(out, key=position)


def _render(sizes: list[int], template: Entry) -> str:
    text, lists = template
    shown = [[x.replace(_HOLE, "bs") for x in items] for items in lists]
    line = _fill_slots(text.replace(_HOLE, "bs"), shown, LIST_BUDGET)
    return f"{_sizes(sizes)}: {_fit_line(line, MAX_LINE_WIDTH)}"


def _group_lines(
    diffs: Sequence[tuple[CaptureKey, KeyDiff]], all_sizes: Sequence[int], full_diff: Optional[str] = None
) -> list[str]:
    """Failure lines of the diffs of one runner/variant/rank across batch sizes, each change once."""
    by_bs = {key.batch_size: diff for key, diff in diffs}
    first = diffs[0][0]
    where = key_label(first).split(" ", 1)[1] + " " if " " in key_label(first) else ""
    kernel_sizes = sorted(bs for bs, d in by_bs.items() if any(c.section == "kernels" for c in d.changes))
    heading = f"{where}{_sizes(by_bs)} differ from their goldens"
    if kernel_sizes:
        smaller = [bs for bs in all_sizes if bs < kernel_sizes[0]]
        heading += f"; the kernel set first changes at bs={kernel_sizes[0]}"
        if smaller:
            heading += f" ({_sizes(smaller)} keep theirs)"
    lines = [heading + ":"]
    classes = diffs[0][1].classes
    fold = any(not d.is_view(c) for d in by_bs.values() for c in d.changes)
    for section in SECTIONS:
        items = {bs: [(c.head(), c.lists) for c in d.ordered(section)] for bs, d in by_bs.items()}
        items = {bs: found for bs, found in items.items() if found}
        if not items:
            continue
        grouped = _grouped(items, by_subject=section != "launches", classes=classes if section == "ops" else None)
        if section == "ops":
            headline, grouped = _glance(grouped, classes)
            lines[1:1] = [f"  {headline}"] if headline else []
        if grouped:
            lines.append(f"  {section}:")
            lines += _section_lines(grouped, fold and section == "ops", classes, full_diff, _render)
    notes = {bs: [(n, ()) for n in d.notes] for bs, d in by_bs.items() if d.notes}
    lines.extend(f"  note: {_render(sizes, template)}" for sizes, template in _grouped(notes))
    return lines


def failure_body(failed: Sequence[Any], checked: Sequence[Any], full_diff: Optional[str] = None) -> list[str]:
    """The failed keys' lines with each runner/variant/rank's diffs grouped across batch sizes."""
    groups: dict[tuple, list] = {}
    for k in failed:
        if k.diff is not None and k.diff.changes:
            groups.setdefault((k.key.runner, k.key.variant, k.key.rank), []).append(k)
    body: list[str] = []
    for k in failed:
        where = (k.key.runner, k.key.variant, k.key.rank)
        group = groups.get(where, [])
        if k not in group:
            body.extend(k.lines)
            continue
        if len(group) < 2:
            body.extend(k.diff.render(brief=True, full_diff=full_diff) + k.lines[len(k.diff.render()) :])
            continue
        if k is group[0]:
            sizes = [o.key.batch_size for o in checked if (o.key.runner, o.key.variant, o.key.rank) == where]
            body.extend(_group_lines([(o.key, o.diff) for o in group], sizes, full_diff))
        body.extend(k.lines[len(k.diff.render()) :])
    return body
