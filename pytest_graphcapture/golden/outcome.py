"""What a golden check is asked and what it returns: the options, one outcome per key, the failure text."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Optional, Union

from ..errors import UsageError
from ..keys import CaptureKey
from ..summary.normalize import LEVELS, compile_patterns
from .axis import failure_body
from .budget import (
    DEFAULT_MEMORY_TOLERANCE,
    budget_hints,
    check_tolerance,
    over_budget_tag,
)
from .diff import SECTIONS, KeyDiff, check_sections
from .environment import toolchain_lead, toolchain_lead_of_some
from .expect import Expect, expectations
from .op_classes import DEFAULT_CLASSES, OpClasses
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
    #: Which ops lead a failure and which fold as view/metadata ops (``golden_view_ops`` / ``golden_compute_ops``).
    op_classes: OpClasses = DEFAULT_CLASSES
    #: Kernel expectations that must hold per batch size (``golden.check(expect=...)``).
    expect: tuple[Expect, ...] = ()

    def __post_init__(self) -> None:
        check_tolerance(self.memory_tolerance)
        object.__setattr__(self, "expect", expectations(self.expect, "golden.check(expect=...)"))
        if self.level not in LEVELS:
            raise UsageError(f"golden.check(level={self.level!r}): expected one of {', '.join(LEVELS)}")
        object.__setattr__(self, "sections", check_sections(self.sections))
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
    keys: list[KeyOutcome] = field(default_factory=list)
    #: Problems that do not fail the check (an obtained summary that could not be written).
    warnings: list[str] = field(default_factory=list)
    #: The golden tree ``folder`` is in (the accept command names the harvest root and this).
    golden_dir: Optional[Path] = None
    #: ``(golden, why)`` of goldens in ``folder`` this run was narrowed not to check (never pruned by it).
    unchecked: list[tuple[Path, str]] = field(default_factory=list)

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
        self,
        *,
        rerun: str,
        display: Callable[[Path], str],
        ci_var: Optional[str],
        full_diff: Optional[str] = None,
    ) -> tuple[str, list[str], list[str]]:
        """The failure as (head line naming every failed key, each key's diff lines, how to accept).

        ``rerun`` is the command that re-runs the test (``pytest 'x.py::test'``);
        ``display`` shows a path to the user; ``ci_var`` names the CI variable when on CI;
        ``full_diff`` is where the full per-batch-size diff (:meth:`per_key_lines`) is written.
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


def _lead(failed: list[KeyOutcome]) -> Optional[str]:
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


def accept_command(harvest: str, golden_dir: str, rel: str) -> str:
    """``graphcapture accept`` of the harvested goldens of one test folder ``rel`` (below both roots)."""
    quote = shlex.quote
    return f"graphcapture accept {quote(harvest)} --golden-dir {quote(golden_dir)} --only {quote(rel + '/*')}"
