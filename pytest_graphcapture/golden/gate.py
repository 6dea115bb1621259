"""The golden gate as a pure function: compare a capture result with its goldens and say what happened.

:func:`check_result` takes a capture result (anything iterable over key results
with ``.key`` and ``.summary``), the test's golden folder and the check's options;
it reads, compares and — in update mode — writes goldens, and returns a
:class:`CheckOutcome` with one :class:`KeyOutcome` per key and the failure text.
It never imports pytest: the ``golden`` fixture turns a failed outcome into a
test failure, and the same function can gate any other runner.

:func:`unused_goldens` is the end-of-session policy: golden files in the folders
of tests that passed, which no check used.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Union

from ..errors import GoldenError, GraphCaptureError, UsageError
from ..keys import CaptureKey, key_label
from ..naming import golden_file_name
from ..summary.model import Summary
from ..summary.normalize import LEVELS, compile_patterns
from . import store
from .axis import failure_body
from .budget import (
    BUDGET_FIELD,
    DEFAULT_MEMORY_TOLERANCE,
    MEMORY_BUDGET_FIELD,
    budget_from_option,
    budget_hints,
    check_tolerance,
    launch_budget_of,
    launch_budget_violations,
    memory_budget_violations,
    over_budget_tag,
)
from .diff import SECTIONS, KeyDiff, _check_level, _check_sections, _complete, compare, compare_dicts
from .report import summarize_labels

#: Edits a summary dict in place (the post-processing hook); None when nobody does.
Postprocess = Optional[Callable[[dict], None]]
#: A project's own kernel-name normalization ``(name, level) -> name or None`` (the normalize hook).
Rename = Optional[Callable[[str, str], Optional[str]]]


@dataclass(frozen=True)
class CheckOptions:
    """What one ``golden.check`` call asked for."""

    level: str = "name"
    ignore_kernels: tuple[str, ...] = ()
    ignore_ops: tuple[str, ...] = ()
    sections: tuple[str, ...] = SECTIONS
    max_launches: Union[int, Mapping[int, int], None] = None
    share_ranks: bool = False
    rename: Rename = None
    max_graph_memory: Union[int, Mapping[int, int], None] = None
    memory_tolerance: float = DEFAULT_MEMORY_TOLERANCE

    def __post_init__(self) -> None:
        check_tolerance(self.memory_tolerance)
        if self.level not in LEVELS:
            raise UsageError(f"golden.check(level={self.level!r}): expected one of {', '.join(LEVELS)}")
        object.__setattr__(self, "sections", _check_sections(self.sections))
        # A bad pattern is the caller's mistake, not a mismatch of every key: refuse it up front.
        for option in ("ignore_kernels", "ignore_ops"):
            given = getattr(self, option)
            patterns = (given,) if isinstance(given, str) else tuple(given)
            compile_patterns(patterns, what=f"golden.check({option}=...):")
            object.__setattr__(self, option, patterns)


@dataclass
class KeyOutcome:
    """One key's result: ``outcome`` is passed / failed / created / updated (what was written)."""

    key: CaptureKey
    label: str
    golden: Path
    outcome: str
    lines: list[str] = field(default_factory=list)
    missing: bool = False
    over_budget: bool = False
    #: Over its launch budget and otherwise fine: ``--update-golden`` cannot fix it.
    budget_only: bool = False
    #: Which budgets it is over (``over_budget`` is set for either).
    over_launch: bool = False
    over_memory: bool = False
    incomplete: Optional[str] = None
    #: The comparison behind ``lines`` when they start with its rendering.
    diff: Optional[KeyDiff] = None

    @property
    def failed(self) -> bool:
        """Failed the check; a key over budget fails even when its golden was written."""
        return self.outcome == "failed" or self.over_budget


@dataclass
class CheckOutcome:
    """Every key of one check, and the text a failed check shows."""

    runner: str
    platform: str
    level: str
    folder: Path
    out_folder: Optional[Path]
    total: int
    keys: list[KeyOutcome] = field(default_factory=list)
    #: Problems that do not fail the check (an obtained summary that could not be written).
    warnings: list[str] = field(default_factory=list)
    #: The golden tree ``folder`` is in (the accept command names the harvest root and this).
    golden_dir: Optional[Path] = None

    @property
    def failed(self) -> list[KeyOutcome]:
        return [k for k in self.keys if k.failed]

    def accept_command(self, display: Callable[[Path], str]) -> str:
        """The command accepting this test's harvested goldens (:func:`accept_command`)."""
        assert self.out_folder is not None and self.golden_dir is not None
        rel = self.folder.relative_to(self.golden_dir)
        harvest = Path(*self.out_folder.parts[: len(self.out_folder.parts) - len(rel.parts)])
        return accept_command(display(harvest), display(self.golden_dir), rel.as_posix())

    def failure_parts(
        self, *, rerun: str, display: Callable[[Path], str], ci_var: Optional[str]
    ) -> tuple[str, list[str], list[str]]:
        """The failure as (head line naming every failed key, each key's diff lines, how to accept).

        ``rerun`` is the command that re-runs the test (``pytest 'x.py::test'``);
        ``display`` shows a path to the user; ``ci_var`` names the CI variable when on CI.
        """
        failed = self.failed
        labels = [k.label for k in failed]
        missing = [k for k in failed if k.missing]
        budget_only = [k for k in failed if k.budget_only]
        if len(missing) == len(failed):
            what = f"has no golden for {summarize_labels(labels)}"
        else:
            tagged = [
                f"{k.label} (missing)"
                if k.missing
                else f"{k.label} ({over_budget_tag(k.over_launch, k.over_memory)})"
                if k.over_budget
                else k.label
                for k in failed
            ]
            what = f"does not match its goldens for {summarize_labels(tagged)}"
        head = (
            f"graph capture of {self.runner} {what} (platform {self.platform}, level {self.level}, "
            f"{len(failed)} of {self.total} keys)"
        )
        body = failure_body(failed, self.keys)
        toolchain = list(dict.fromkeys(t for k in failed if k.diff is not None for t in k.diff.toolchain))
        if toolchain:  # the likeliest explanation of a kernel change leads the message
            head = f"{'; '.join(toolchain)} since the goldens were written (may explain the diff)\n{head}"
        tail = [f"goldens: {display(self.folder)}/"]
        if self.out_folder is not None:
            tail.append(f"obtained summaries written to {display(self.out_folder)}/; accept them with:")
            tail.append(f"  {self.accept_command(display)}")
        tail += budget_hints([k.label for k in failed if k.over_launch], [k.label for k in failed if k.over_memory])
        if missing and len(missing) < len(failed):
            tail.append(f"create only the missing ones with: {rerun} --update-golden=new")
        where = f" (locally: updating is refused on CI, {ci_var} is set)" if ci_var else ""
        if len(budget_only) < len(failed):  # --update-golden cannot fix a budget-only failure
            verb = "create" if len(missing) == len(failed) else "accept"
            tail.append(f"{verb} them with: {rerun} --update-golden{where}")
        return head, body, tail

    def per_key_lines(self) -> list[str]:
        """Every failed key's own lines, batch size by batch size: the full record (diff file)."""
        return [line for k in self.failed for line in k.lines]


def accept_command(harvest: str, golden_dir: str, rel: str) -> str:
    """``graphcapture accept`` of the harvested goldens of one test folder ``rel`` (below both roots)."""
    quote = shlex.quote
    return f"graphcapture accept {quote(harvest)} --golden-dir {quote(golden_dir)} --only {quote(rel + '/*')}"


def _postprocessed(summary: Summary, label: str, postprocess: Postprocess) -> Summary:
    """Run the post-processing hook on the summary dict and validate what it left."""
    if postprocess is None:
        return summary  # nobody post-processes: skip the dict round trip
    data = summary.to_dict()
    postprocess(data)
    return store.summary_from_dict(data, f"summary of {label} after pytest_graphcapture_postprocess_summary")


class _Gate:
    """One check: the shared state of :func:`check_result` while it walks the keys."""

    def __init__(
        self,
        golden_dir: Path,
        folder: Path,
        out_folder: Optional[Path],
        update: Optional[str],
        options: CheckOptions,
        explicit_rank: bool,
        postprocess: Postprocess,
        display: Callable[[Path], str],
    ) -> None:
        self.golden_dir, self.folder, self.out_folder = golden_dir, folder, out_folder
        self.update, self.options, self.explicit_rank = update, options, explicit_rank
        self.postprocess, self.display = postprocess, display
        self.warnings: list[str] = []

    def normalized(self, summary: Summary, key: CaptureKey) -> Summary:
        o = self.options
        actual = _postprocessed(summary, str(key), self.postprocess)
        _check_level(o.level, actual, "the captured summary", f"summary of {key}")
        return actual.normalized(o.level, ignore_kernels=o.ignore_kernels, ignore_ops=o.ignore_ops, rename=o.rename)

    def check_key(self, item: Any, option_budget: Optional[int], option_memory: Optional[int] = None) -> KeyOutcome:
        key = item.key
        path = self.folder / golden_file_name(key, explicit_rank=self.explicit_rank)
        if path.is_symlink():  # the folder is checked and the name is safe: only a link can lead elsewhere
            store.ensure_inside(self.golden_dir, path)
        shown = self.display(path)
        out = KeyOutcome(key, key_label(key, explicit_rank=self.explicit_rank), path, "failed")
        if item.summary is None:
            out.lines = [
                f"{out.label} ({shown}):",
                "  not profiled: the capture returned no summary for this key, "
                "so there is nothing to compare (capture with summaries enabled)",
            ]
            return out
        try:
            actual = self.normalized(item.summary, key)
        except UsageError:
            raise  # the check's own arguments are wrong: a usage error, not this key's mismatch
        except GraphCaptureError as exc:
            out.lines = [f"{out.label} ({shown}):", f"  {exc}"]
            return out
        if not actual.complete:
            out.incomplete = actual.incomplete_reason or "no reason given"
        data = actual.to_dict()
        # The golden is read once: its budget, the fast path and the diff all use this dict.
        old: Optional[dict] = None
        old_error: Optional[GoldenError] = None
        identical = stale = False
        if path.exists():
            try:
                old = store.parse_golden_file(path)
                stale = old.get("schema_version") != store.current_schema_version()
                # Same content as a valid summary dict: valid by construction, skip the checks.
                identical = store.same_content(old, data)
                if not identical:
                    old = store.checked_golden_dict(old, path)
            except GoldenError as exc:
                old, old_error = None, exc
        golden_budget = launch_budget_of(old, path) if old_error is None else None
        golden_memory = launch_budget_of(old, path, field=MEMORY_BUDGET_FIELD) if old_error is None else None
        for name, value in ((BUDGET_FIELD, golden_budget), (MEMORY_BUDGET_FIELD, golden_memory)):
            if value is not None:
                data[name] = value  # kept by --update-golden and in --golden-out files
        budget_lines = launch_budget_violations(
            key,
            int(actual.launches.get("total", 0)),
            [(golden_budget, f"{BUDGET_FIELD} in {shown}"), (option_budget, "golden.check(max_launches=...)")],
        )
        metrics = getattr(item, "metrics", None)
        memory_lines = memory_budget_violations(
            key,
            getattr(metrics, "memory_reserved", None),
            [
                (golden_memory, f"{MEMORY_BUDGET_FIELD} in {shown}"),
                (option_memory, "golden.check(max_graph_memory=...)"),
            ],
            self.options.memory_tolerance,
        )
        out.over_launch, out.over_memory = bool(budget_lines), bool(memory_lines)
        budget_lines += memory_lines
        if self.out_folder is not None:
            try:
                store.write_golden(self.out_folder / path.name, data)
            except GoldenError as exc:
                self.warnings.append(f"--golden-out: {exc}")
        carried = golden_budget is not None or golden_memory is not None
        self.compare(out, path, shown, actual, data, old, old_error, identical, carried, stale)
        if budget_lines:  # over budget fails the key, whatever was written
            out.budget_only = out.outcome != "failed"
            out.lines = (out.lines if out.outcome == "failed" else []) + budget_lines
            out.over_budget = True
        return out

    def compare(
        self,
        out: KeyOutcome,
        path: Path,
        shown: str,
        actual: Summary,
        data: dict,
        old: Optional[dict],
        old_error: Optional[GoldenError],
        identical: bool,
        carried: bool,
        stale: bool = False,
    ) -> None:
        """Set ``out``'s outcome and lines: pass, fail with the diff, or write in update mode.

        ``stale``: the file is of an older schema; update mode rewrites it even when it passes.
        """
        if not path.exists():
            if self.update:
                self.write(out, path, data, "created")
                return
            out.missing = True
            out.lines = [f"{out.label}: missing golden {shown}"]
            return
        if identical or (old is not None and carried and store.same_content(old, data)):
            if self.update == "all" and old is not None:
                # Same content: only a file in an older text layout is rewritten (its own environment kept).
                self.write(out, path, old, "updated")
                return
            out.outcome = "passed"  # identical to the golden: nothing to diff, nothing to rewrite
            return
        try:
            if old_error is not None:
                raise old_error
            expected = store.summary_from_dict(old, path)
            o = self.options
            diff = compare(
                expected,
                actual,
                level=o.level,
                ignore_kernels=o.ignore_kernels,
                ignore_ops=o.ignore_ops,
                sections=o.sections,
                golden=shown,
                rename=o.rename,
            )
        except GoldenError as exc:
            if self.update == "all" and "newer than this pytest-graphcapture" not in exc.problem:
                self.write(out, path, data, "updated")
                return
            out.lines = [f"{out.label}: {exc}"]
            return
        if self.update == "all":
            if out.incomplete is not None and _complete(old)[0]:
                # Never replace complete kernel evidence with an incomplete capture.
                if not diff.ok:
                    out.lines = diff.render() + [
                        "  note: not updated: the capture is incomplete and the golden is complete"
                    ]
                    return
            elif stale or not store.same_content(old, data):
                self.write(out, path, data, "updated")
                return
            out.outcome = "passed"
            return
        if diff.ok:
            out.outcome = "passed"
        else:
            out.lines, out.diff = diff.render(), diff

    def write(self, out: KeyOutcome, path: Path, data: dict, outcome: str) -> None:
        try:
            done = store.write_golden(path, data)
        except GoldenError as exc:
            out.lines = [f"{out.label}: {exc}"]
            return
        out.outcome = "passed" if done == "unchanged" else outcome

    def share_ranks(self, items: list) -> tuple[list, list[KeyOutcome]]:
        """``share_ranks=True``: rank 0's items where all ranks agree, a failed outcome per key where not."""
        groups: dict[tuple, list] = {}
        for item in items:
            groups.setdefault((item.key.runner, item.key.variant_name or "", item.key.batch_size), []).append(item)
        kept: list = []
        failures: list[KeyOutcome] = []
        for members in groups.values():
            members.sort(key=lambda kr: kr.key.rank)
            first = members[0]
            if len(members) == 1 or any(m.summary is None for m in members):
                kept.append(first)
                continue
            try:
                views = [self.normalized(m.summary, m.key).to_dict() for m in members]
            except GraphCaptureError:
                kept.append(first)  # the regular check reports the bad summary
                continue
            lines: list[str] = []
            differ: list[int] = []
            for member, view in zip(members[1:], views[1:]):
                diff = compare_dicts(
                    views[0],
                    view,
                    member.key,
                    sections=self.options.sections,
                    golden=f"compared with rank {first.key.rank}",
                )
                if not diff.ok:
                    differ.append(member.key.rank)
                    lines.extend(diff.render())
            if not differ:
                kept.append(first)
                continue
            label = key_label(first.key)
            many = len(differ) > 1
            head = (
                f"{label}: share_ranks=True, but rank{'s' if many else ''} {', '.join(map(str, differ))} "
                f"differ{'' if many else 's'} from rank {first.key.rank}, so they cannot share one golden "
                f"(use per-rank goldens: golden.check(result) without share_ranks):"
            )
            failures.append(
                KeyOutcome(
                    first.key,
                    label,
                    self.folder / golden_file_name(first.key),
                    "failed",
                    [head, *("  " + line for line in lines)],
                )
            )
        return kept, failures


def check_result(
    result: Any,
    *,
    golden_dir: Path,
    folder: Path,
    out_folder: Optional[Path] = None,
    update: Optional[str] = None,
    options: CheckOptions = CheckOptions(),
    postprocess: Postprocess = None,
    display: Callable[[Path], str] = str,
) -> CheckOutcome:
    """Compare every key of ``result`` with its golden in ``folder``; write goldens when ``update`` says so.

    ``update`` is None (compare only), ``"new"`` (create missing goldens) or
    ``"all"`` (also rewrite changed ones).  ``out_folder`` also receives every
    obtained summary in the golden layout.  Raises UsageError for a result that
    cannot be checked at all (no keys, single-trace mode) and GoldenError for a
    golden path that leads outside ``golden_dir``.
    """
    budgets = {kr.key: budget_from_option(options.max_launches, kr.key) for kr in result}
    memory = {
        kr.key: budget_from_option(options.max_graph_memory, kr.key, argument="max_graph_memory") for kr in result
    }
    items = sorted(result, key=lambda kr: (kr.key.runner, kr.key.variant_name or "", kr.key.rank, kr.key.batch_size))
    runner = getattr(result, "runner_name", "") or "capture"
    if not items:
        raise UsageError(f"golden.check: the capture result of {runner} has no captured keys, nothing to compare")
    if getattr(result, "mode", None) == "single" and all(kr.summary is None for kr in items):
        raise UsageError(
            "golden.check: this capture ran with --graph-capture-trace=single, which records one trace "
            "for the whole capture phase and no per-batch-size summaries to compare; golden checks "
            "need the per-bs mode (the default, or --graph-capture-trace=per-bs)"
        )
    if all(kr.summary is None for kr in items):
        raise UsageError(
            f"golden.check: the capture result of {runner} holds no summaries (captured with "
            f"graph_capture(summarize=False)?), so there is nothing to compare; capture with summaries "
            f"(the default) to check goldens"
        )
    explicit_rank = int(getattr(result, "world_size", 1) or 1) > 1 and not options.share_ranks
    gate = _Gate(golden_dir, folder, out_folder, update, options, explicit_rank, postprocess, display)
    share_failures: list[KeyOutcome] = []
    if options.share_ranks:
        items, share_failures = gate.share_ranks(items)
    outcome = CheckOutcome(runner, str(result.platform), options.level, folder, out_folder, len(result))
    outcome.golden_dir = Path(golden_dir)
    outcome.keys = [gate.check_key(item, budgets.get(item.key), memory.get(item.key)) for item in items]
    outcome.keys += share_failures
    outcome.warnings = gate.warnings
    return outcome


def unused_goldens(
    golden_dir: Path, folders: Iterable[tuple[str, str, bool]], used: set[tuple[str, str]]
) -> list[tuple[str, Path]]:
    """``(platform, path)`` of golden files no check used, in folders whose every test passed.

    ``folders`` holds ``(platform, folder relative to golden_dir, test passed)``
    per test that checked the folder.  A test that failed, errored or never
    finished may not have checked all of its keys, so its folder is left alone.
    """
    settled: dict[tuple[str, str], bool] = {}
    for platform, folder, passed in folders:
        settled[(platform, folder)] = settled.get((platform, folder), True) and passed
    found = []
    for (platform, folder), passed in sorted(settled.items()):
        if not passed:
            continue
        for path in store.golden_files(Path(golden_dir) / folder):
            if (platform, path.relative_to(golden_dir).as_posix()) not in used:
                found.append((platform, path))
    return found
