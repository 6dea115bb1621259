"""The golden gate as a pure function: compare a CaptureResult with its goldens and say what happened (no pytest)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from .._io import gc_paused
from ..errors import GoldenError, GraphCaptureError, UsageError
from ..keys import CaptureKey, key_label
from ..naming import golden_file_name
from ..result import CaptureResult, KeyResult
from ..summary.model import Summary
from . import store
from .change import KeyDiff, failure_body, keeping_environment_of, toolchain_lead, toolchain_lead_of_some
from .diff import CheckOptions, compare_dicts, compare_keys, completeness, require_level
from .expect import (
    BUDGET_FIELD,
    EXPECT_FIELD,
    MEMORY_BUDGET_FIELD,
    budget_from_option,
    budget_hints,
    golden_expectations,
    launch_budget_of,
    launch_budget_violations,
    memory_budget_violations,
    over_budget_tag,
    unevaluated,
    unmet,
)
from .report import summarize_labels
from .traces import split_single_capture

#: Edits a summary dict in place (the post-processing hook); None when nobody does.
_Postprocess = Optional[Callable[[dict], None]]


@dataclass
class _KeyOutcome:
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
    #: An expectation (``golden.check(expect=...)`` or the golden's ``expect``) does not hold.
    unmet: bool = False
    incomplete: Optional[str] = None
    #: Its golden is in the folder, but the run did not capture the key (a size that fell back to eager).
    not_captured: bool = False
    #: Why no golden may be written from this capture (its profiler was silenced): set, nothing is written.
    no_golden: Optional[str] = None
    #: The comparison behind ``lines`` when they start with its rendering.
    diff: Optional[KeyDiff] = None

    @property
    def failed(self) -> bool:
        """Failed the check; a key over budget or missing an expectation fails even when its golden was written."""
        return self.outcome == "failed" or self.over_budget or self.unmet


@dataclass
class CheckOutcome:
    """Every key of one check, and the text a failed check shows."""

    runner: str
    platform: str
    level: str
    folder: Path
    out_folder: Optional[Path]
    total: int
    keys: list[_KeyOutcome] = field(default_factory=list)
    #: Problems that do not fail the check (an obtained summary that could not be written).
    warnings: list[str] = field(default_factory=list)
    #: The golden tree ``folder`` is in (the accept command names the harvest root and this).
    golden_dir: Optional[Path] = None
    #: ``(golden, why)`` of goldens in ``folder`` this run was narrowed not to check (never pruned by it).
    unchecked: list[tuple[Path, str]] = field(default_factory=list)

    @property
    def failed(self) -> list[_KeyOutcome]:
        return [k for k in self.keys if k.failed]

    def accept_command(self, display: Callable[[Path], str]) -> str:
        """The command accepting this test's harvested goldens (:func:`_accept_command`)."""
        assert self.out_folder is not None and self.golden_dir is not None
        rel = self.folder.relative_to(self.golden_dir)
        harvest = Path(*self.out_folder.parts[: len(self.out_folder.parts) - len(rel.parts)])
        return _accept_command(display(harvest), display(self.golden_dir), rel.as_posix())

    def failure_parts(
        self, *, rerun: str, display: Callable[[Path], str], ci_var: Optional[str], full_diff: Optional[str] = None
    ) -> tuple[str, list[str], list[str]]:
        """The failure as (head line naming every failed key, each key's diff lines, how to accept)."""
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
                else f"{k.label} (not captured)"
                if k.not_captured
                else f"{k.label} ({over_budget_tag(k.over_launch, k.over_memory)})"
                if k.over_budget
                else f"{k.label} (expectation not met)"
                if k.unmet and k.outcome != "failed"
                else k.label
                for k in failed
            ]
            what = f"does not match its goldens for {summarize_labels(tagged)}"
        head = (
            f"graph capture of {self.runner} {what} (platform {self.platform}, level {self.level}, "
            f"{len(failed)} of {self.total} keys)"
        )
        body = failure_body(failed, [k for k in self.keys if not k.not_captured], full_diff)  # captured sizes only
        lead = _lead(failed)
        if lead:  # the likeliest explanation of a kernel change leads the message
            head = f"{lead}\n{head}"
        tail = [f"goldens: {display(self.folder)}/"]
        if self.out_folder is not None:
            tail.append(f"obtained summaries written to {display(self.out_folder)}/; accept them with:")
            tail.append(f"  {self.accept_command(display)}")
        tail += budget_hints([k.label for k in failed if k.over_launch], [k.label for k in failed if k.over_memory])
        if any(k.unmet for k in failed):
            tail.append(
                "an expectation does not hold: change the code, or the expectation (golden.check(expect=...) "
                "or the golden file's 'expect' field); --update-golden cannot fix it"
            )
        if missing and len(missing) < len(failed):
            tail.append(f"create only the missing ones with: {rerun} --update-golden=new")
        where = f" (locally: updating is refused on CI, {ci_var} is set)" if ci_var else ""
        if len(budget_only) < len(failed):  # --update-golden cannot fix a budget-only failure
            verb = "create" if len(missing) == len(failed) else "accept"
            tail.append(f"{verb} them with: {rerun} --update-golden{where}")
        return head, body, tail

    def per_key_lines(self) -> list[str]:
        """Every failed key's own lines, batch size by batch size, nothing shortened: the full record (diff file)."""
        lines: list[str] = []
        for k in self.failed:
            if k.diff is not None:
                lines += k.diff.render(None) + k.lines[len(k.diff.render()) :]
            else:
                lines += k.lines
        return lines


def _lead(failed: list[_KeyOutcome]) -> Optional[str]:
    """The toolchain line leading a failure: for every failed key, or naming the keys it holds for."""
    diffs = [k.diff for k in failed if k.diff is not None]
    toolchain = list(dict.fromkeys(t for d in diffs for t in d.toolchain))
    release = any(d.torch_release_changed for d in diffs)
    groups: dict[tuple[str, ...], list[str]] = {}
    for k in failed:
        if k.diff is not None and k.diff.toolchain:
            groups.setdefault(tuple(k.diff.toolchain), []).append(k.label)
    named = sum(len(labels) for labels in groups.values())
    if not named or named == len(failed):
        return toolchain_lead(toolchain, release)
    shown = [(summarize_labels(labels), list(changes)) for changes, labels in groups.items()]
    return toolchain_lead_of_some(shown, named, len(failed), release)


def _accept_command(harvest: str, golden_dir: str, rel: str) -> str:
    """``graphcapture accept`` of the harvested goldens of one test folder ``rel`` (below both roots)."""
    quote = shlex.quote
    return f"graphcapture accept {quote(harvest)} --golden-dir {quote(golden_dir)} --only {quote(rel + '/*')}"


def _postprocessed(summary: Summary, label: str, postprocess: _Postprocess) -> Summary:
    """Run the post-processing hook on the summary dict and validate what it left."""
    if postprocess is None:
        return summary  # nobody post-processes: skip the dict round trip
    data = summary.to_dict()
    postprocess(data)
    return store.summary_from_dict(data, f"summary of {label} after pytest_graphcapture_postprocess_summary")


@dataclass
class _KeyCheck:
    """What one key's check read: its golden (path, as shown, parsed or its error) and the normalized capture."""

    path: Path
    shown: str
    actual: Summary
    data: dict
    old: Optional[dict]
    old_error: Optional[GoldenError]
    identical: bool
    carried: bool
    #: The golden is of an older schema: update mode rewrites it even when it passes.
    stale: bool
    #: The golden existed when the key's check looked (one look per key).
    exists: bool


@dataclass
class _Gate:
    """One check: the shared state of :func:`check_result` while it walks the keys."""

    golden_dir: Path
    folder: Path
    out_folder: Optional[Path]
    update: Optional[str]
    options: CheckOptions
    explicit_rank: bool
    postprocess: _Postprocess
    display: Callable[[Path], str]
    warnings: list[str] = field(default_factory=list)
    #: The keys are of several runners (engine traces): labels name the runner.
    runners: bool = False

    def normalized(self, summary: Summary, key: CaptureKey) -> Summary:
        o = self.options
        actual = _postprocessed(summary, str(key), self.postprocess)
        require_level(o.level, actual, "the captured summary", f"summary of {key}")
        # The gate only reads the normalized copy's entries: no need to copy every op dict.
        return actual.normalized(
            o.level, ignore_kernels=o.ignore_kernels, ignore_ops=o.ignore_ops, rename=o.rename, share_entries=True
        )

    def check_key(
        self, item: KeyResult, option_budget: Optional[int], option_memory: Optional[int] = None
    ) -> _KeyOutcome:
        key = item.key
        path = self.folder / golden_file_name(key, explicit_rank=self.explicit_rank)
        if path.is_symlink():  # the folder is checked and the name is safe: only a link can lead elsewhere
            store.ensure_inside(self.golden_dir, path)
        shown = self.display(path)
        out = _KeyOutcome(key, key_label(key, explicit_rank=self.explicit_rank, runner=self.runners), path, "failed")
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
        out.no_golden = item.no_golden
        # ``data`` is only read (its top level aside): sharing the entry lists skips copying them.
        data = actual.to_dict(share_entries=True)
        # The golden is read once: its budget, the fast path and the diff all use this dict.
        old: Optional[dict] = None
        old_error: Optional[GoldenError] = None
        identical = stale = False
        exists = path.exists()
        if exists:
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
        try:
            golden_expect = golden_expectations(old, shown) if old_error is None else ()
        except GoldenError as exc:
            out.lines = [f"{out.label}: {exc}"]
            return out
        if old is not None and EXPECT_FIELD in old:
            data[EXPECT_FIELD] = old[EXPECT_FIELD]  # kept like the budgets
        budget_lines = launch_budget_violations(
            key,
            int(actual.launches.get("total", 0)),
            [(golden_budget, f"{BUDGET_FIELD} in {shown}"), (option_budget, "golden.check(max_launches=...)")],
        )
        memory_lines = memory_budget_violations(
            key,
            item.metrics.memory_reserved,
            [
                (golden_memory, f"{MEMORY_BUDGET_FIELD} in {shown}"),
                (option_memory, "golden.check(max_graph_memory=...)"),
            ],
            self.options.memory_tolerance,
        )
        out.over_launch, out.over_memory = bool(budget_lines), bool(memory_lines)
        budget_lines += memory_lines
        unmet_lines, skipped = self.unmet(item, key, golden_expect, shown)
        out.unmet = bool(unmet_lines)
        if skipped:  # never a silent pass: the key is incomplete, naming what was not evaluated
            reason = f"no kernel evidence, so not evaluated: {'; '.join(skipped)}"
            out.incomplete = f"{out.incomplete}; {reason}" if out.incomplete else reason
        if self.out_folder is not None and out.no_golden is None:
            try:
                store.write_golden(self.out_folder / path.name, data)
            except GoldenError as exc:
                self.warnings.append(f"--golden-out: {exc}")
        carried = golden_budget is not None or golden_memory is not None or EXPECT_FIELD in data
        self.compare(out, _KeyCheck(path, shown, actual, data, old, old_error, identical, carried, stale, exists))
        if budget_lines or unmet_lines:  # over budget or an unmet expectation fails the key, whatever was written
            out.budget_only = out.outcome != "failed"
            out.lines = (out.lines if out.outcome == "failed" else []) + budget_lines + unmet_lines
            out.over_budget = bool(budget_lines)
        return out

    def unmet(self, item: KeyResult, key: CaptureKey, golden_expect: tuple, shown: str) -> tuple[list[str], list[str]]:
        """Lines of the expectations (the check's and the golden's) that do not hold for this key, and those
        that could not be evaluated (:func:`~.expect.unevaluated`)."""
        given = [(self.options.expect, "golden.check(expect=...)"), (golden_expect, f"expect in {shown}")]
        if not any(items for items, _ in given):
            return [], []
        summary = _postprocessed(item.summary, str(key), self.postprocess)
        lines = unmet(key, summary, given, level=self.options.level, rename=self.options.rename)
        return lines, unevaluated(key, summary, given)

    def compare(self, out: _KeyOutcome, check: _KeyCheck) -> None:
        """Set ``out``'s outcome and lines: pass, fail with the diff, or write in update mode."""
        path, shown, actual, data, old = check.path, check.shown, check.actual, check.data, check.old
        if not check.exists:
            if self.update:
                self.write(out, path, data, "created")
                return
            out.missing = True
            out.lines = [f"{out.label}: missing golden {shown}"]
            return
        if check.identical or (old is not None and check.carried and store.same_content(old, data)):
            if self.update == "all" and old is not None:
                # Same content: the file keeps the environment that produced it, and is rewritten
                # only when it is in an older text layout (write_golden leaves equal bytes alone).
                self.write(out, path, keeping_environment_of(old, data), "updated")
                return
            out.outcome = "passed"  # identical to the golden: nothing to diff, nothing to rewrite
            return
        try:
            if check.old_error is not None:
                raise check.old_error
            expected = store.summary_from_dict(old, path)
            diff = compare_keys(expected, actual, self.options, golden=shown)
        except GoldenError as exc:
            if self.update == "all" and "newer than this pytest-graphcapture" not in exc.problem:
                self.write(out, path, data, "updated")
                return
            out.lines = [f"{out.label}: {exc}"]
            return
        if self.update == "all":
            if out.incomplete is not None and completeness(old)[0]:
                # Never replace complete kernel evidence with an incomplete capture.
                if not diff.ok:
                    out.lines = diff.render() + [
                        "  note: not updated: the capture is incomplete and the golden is complete"
                    ]
                    return
            elif not store.same_content(old, data):
                self.write(out, path, data, "updated")  # new content, recorded with the environment that produced it
                return
            elif check.stale:
                self.write(out, path, keeping_environment_of(old, data), "updated")
                return
            out.outcome = "passed"
            return
        if diff.ok:
            out.outcome = "passed"
        else:
            out.lines, out.diff = diff.render(), diff

    def write(self, out: _KeyOutcome, path: Path, data: dict, outcome: str) -> None:
        if out.no_golden is not None:
            # A capture whose profiler another client silenced is never a golden, nor replaces one.
            out.lines = [f"{out.label}: not written: {out.no_golden}"]
            return
        try:
            done = store.write_golden(path, data)
        except GoldenError as exc:
            out.lines = [f"{out.label}: {exc}"]
            return
        out.outcome = "passed" if done == "unchanged" else outcome

    def share_ranks(self, items: list) -> tuple[list, list[_KeyOutcome]]:
        """``share_ranks=True``: rank 0's items where all ranks agree, a failed outcome per key where not."""
        groups: dict[tuple, list] = {}
        for item in items:
            groups.setdefault((item.key.runner, item.key.variant_name or "", item.key.batch_size), []).append(item)
        kept: list = []
        failures: list[_KeyOutcome] = []
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
                _KeyOutcome(
                    first.key,
                    label,
                    self.folder / golden_file_name(first.key),
                    "failed",
                    [head, *("  " + line for line in lines)],
                )
            )
        return kept, failures


def _order(kr: KeyResult) -> tuple:
    return (kr.key.runner, kr.key.variant_name or "", kr.key.rank, kr.key.batch_size)


def check_result(
    result: CaptureResult,
    *,
    golden_dir: Path,
    folder: Path,
    out_folder: Optional[Path] = None,
    update: Optional[str] = None,
    options: Optional[CheckOptions] = None,
    postprocess: _Postprocess = None,
    display: Callable[[Path], str] = str,
    selected: Optional[tuple[Callable[[CaptureKey], bool], str]] = None,
) -> CheckOutcome:
    """Compare every key of ``result`` with its golden in ``folder``; write goldens when ``update`` says so."""
    options = options if options is not None else CheckOptions()
    budgets = {kr.key: budget_from_option(options.max_launches, kr.key) for kr in result}
    memory = {
        kr.key: budget_from_option(options.max_graph_memory, kr.key, argument="max_graph_memory") for kr in result
    }
    items = sorted(result, key=_order)
    runner = result.runner_name or "capture"
    if not items:
        raise UsageError(f"golden.check: the capture result of {runner} has no captured keys, nothing to compare")
    if result.mode == "single" and all(kr.summary is None for kr in items):
        split = split_single_capture(result)
        if split is None:
            raise UsageError(
                "golden.check: this capture ran with --graph-capture-trace=single, and its one trace holds no "
                "capture windows to split into per-batch-size summaries (a capture on CPU records none); "
                "check it with the per-bs mode (the default, or --graph-capture-trace=per-bs)"
            )
        result, items = split, sorted(split, key=_order)
    if all(kr.summary is None for kr in items):
        raise UsageError(
            f"golden.check: the capture result of {runner} holds no summaries (captured with "
            f"graph_capture(summarize=False)?), so there is nothing to compare; capture with summaries "
            f"(the default) to check goldens"
        )
    explicit_rank = result.world_size > 1 and not options.share_ranks
    gate = _Gate(golden_dir, folder, out_folder, update, options, explicit_rank, postprocess, display)
    gate.runners = len({kr.key.runner for kr in items}) > 1
    share_failures: list[_KeyOutcome] = []
    if options.share_ranks:
        items, share_failures = gate.share_ranks(items)
    outcome = CheckOutcome(runner, str(result.platform), options.level, folder, out_folder, len(result))
    outcome.golden_dir = Path(golden_dir)
    outcome.keys = []
    for item in items:
        # The cyclic GC stays off while a key is checked: the golden's parsed dict is acyclic and
        # freed by reference counting when the key is done, so a collection would only re-traverse it.
        with gc_paused():
            outcome.keys.append(gate.check_key(item, budgets.get(item.key), memory.get(item.key)))
    outcome.keys += share_failures
    _not_captured(outcome, result, gate, selected)
    outcome.warnings = gate.warnings
    return outcome


def _not_captured(
    outcome: CheckOutcome,
    result: CaptureResult,
    gate: _Gate,
    selected: Optional[tuple[Callable[[CaptureKey], bool], str]],
) -> None:
    """Fail each golden in the folder whose key the run should have captured and did not."""
    used = {k.golden for k in outcome.keys}
    runners = {kr.key.runner for kr in result}
    for path in store.golden_files(gate.folder):
        if path in used:
            continue
        try:
            key = store.read_golden(path).key
        except GoldenError as exc:
            if selected is not None or not result.whole:
                outcome.unchecked.append((path, "their keys cannot be read, and this run was narrowed"))
            elif gate.update != "all":
                outcome.keys.append(_KeyOutcome(CaptureKey(path.name, 1), path.name, path, "failed", [str(exc)]))
                outcome.total += 1
            continue
        if not (_covers(result, key) if result.traces else key.runner in runners):  # a runner: all its keys
            if result.traces:
                outcome.unchecked.append(
                    (path, "their keys are not in the traces named (name their folder to check all)")
                )
            continue  # another runner's golden: the session's to call unused
        if selected is not None and not selected[0](key):
            outcome.unchecked.append((path, f"{selected[1]} left their keys out"))
        elif gate.update != "all":
            label = key_label(key, explicit_rank=gate.explicit_rank, runner=gate.runners)
            line = f"{label}: not captured, but {gate.display(path)} holds its golden (did it fall back to eager?)"
            outcome.keys.append(_KeyOutcome(key, label, path, "failed", [line], not_captured=True))
            outcome.total += 1


#: How a trace of a whole capture is split (``TraceKeys.split_by``): it holds every key of its runner and rank.
_WHOLE_CAPTURE = ("annotations", "windows")


def _covers(result: CaptureResult, key: CaptureKey) -> bool:
    """Whether the traces read should hold ``key``: a named folder holds every key, a named trace its own."""
    if result.whole:
        return True
    for trace in result.traces:
        keys = [s.key for s in trace.summaries]
        if key in keys:
            return True
        if trace.split_by in _WHOLE_CAPTURE and any((k.runner, k.rank) == (key.runner, key.rank) for k in keys):
            return True
    return False
