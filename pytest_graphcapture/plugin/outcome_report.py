"""A golden check's outcome, told: every key in the session report, a failure as pytest shows it.

The failure message is the outcome's grouped, compute-first text; the full
per-batch-size diff (nothing folded or cut) goes to a file the message names —
beside the harvested goldens with ``--golden-out``, else the session's diff folder.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Optional

import pytest

from .._io import write_atomic
from ..errors import FileError
from ..golden.change import cut_lines
from ..golden.gate import CheckOutcome
from ..golden.report import KeyRecord
from ..keys import safe_name
from ..naming import HARVEST_DIFF_NAME
from . import settings
from .golden_session import GoldenSession


def record_outcome(s: GoldenSession, nodeid: str, outcome: CheckOutcome, result: Any) -> None:
    """Add every key of ``outcome`` to the report; fail the test with the failure text when a key failed."""
    metrics = {kr.key: kr.metrics.to_dict() for kr in result if getattr(kr, "metrics", None) is not None}
    for message in outcome.warnings:  # output that could not be written: the run fails at its end
        s.report.errors.append(message)
        warnings.warn(pytest.PytestWarning(message), stacklevel=4)
    for key in outcome.keys:
        s.report.add_record(
            KeyRecord(
                nodeid,
                outcome.platform,
                key.label,
                s.rel(key.golden),
                "failed" if key.outcome == "passed" and key.failed else key.outcome,
                key.incomplete,
                metrics.get(key.key),
            )
        )
    if outcome.unchecked:  # a narrowed run: these goldens are neither checked nor unused, and it says so
        for path, _why in outcome.unchecked:
            s.report.mark_used(outcome.platform, s.rel(path))
        for why in dict.fromkeys(why for _, why in outcome.unchecked):
            paths = [p.name for p, w in outcome.unchecked if w == why]
            more = f", … +{len(paths) - 3} more" if len(paths) > 3 else ""
            s.report.notes.append(f"{nodeid}: {len(paths)} golden(s), {why}: {', '.join(paths[:3])}{more}")
    if not outcome.failed:
        return
    diff_path: Optional[Path] = full_diff_path(s, nodeid, outcome)

    def parts(where: Optional[Path]) -> tuple[str, list[str], list[str]]:
        return outcome.failure_parts(
            rerun=s.rerun_command(nodeid),
            display=lambda p: s.display(Path(p)),
            ci_var=settings.ci_environment(),
            full_diff=s.display(where) if where is not None else None,
        )

    head, body, tail = parts(diff_path)
    per_key = outcome.per_key_lines()  # the full record: every batch size's own diff
    full = [head, *per_key, *tail]
    s.report.add_failure(nodeid, outcome.platform, "\n".join(full) + "\n")
    shown = cut_lines(body, None)
    if shown != body or body != per_key:
        if not _write(diff_path, full):
            head, body, tail = parts(None)  # no file to point at
            diff_path = None
        shown = cut_lines(body, s.display(diff_path) if diff_path else None)
        if diff_path and shown == body:
            shown.append(f"per-batch-size diff in {s.display(diff_path)}")
    pytest.fail("\n".join([head, *shown, *tail]), pytrace=False)


def full_diff_path(s: GoldenSession, nodeid: str, outcome: CheckOutcome) -> Path:
    """Where a failure's full per-batch-size diff is written (beside harvested goldens, else the diff dir)."""
    if outcome.out_folder is not None:
        return outcome.out_folder / HARVEST_DIFF_NAME
    return s.diff_dir() / f"{safe_name(nodeid)}.txt"


def _write(path: Optional[Path], lines: list[str]) -> bool:
    if path is None:
        return False
    try:
        write_atomic(path, "\n".join(lines) + "\n")
    except FileError:
        return False
    return True
