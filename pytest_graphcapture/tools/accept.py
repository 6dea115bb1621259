"""``graphcapture accept HARVEST_DIR``: bring goldens written by ``--golden-out`` into the golden tree.

Every file under HARVEST_DIR is checked before anything is written: it must sit in
the golden layout (``<platform>/<test path>/<test>/<runner>_bs_<bs>[_<variant>][_rank<r>].json``,
the platform folder and file name matching the summary inside) and be a valid
golden.  Any file that is not is refused, by name, and nothing is written.  Then
each key is reported as created, changed (with its diff, as a failing check prints
it) or unchanged, and written atomically; if a write fails, the files already
written are put back, so nothing is ever half-applied.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .._io import write_atomic
from ..errors import GoldenError, GraphCaptureError, UsageError
from ..golden import store
from ..golden.environment import environment_differences
from ..keys import UNKNOWN_BATCH_SIZE, safe_name
from ..naming import GOLDEN_SUFFIX, HARVEST_DIFF_NAME, golden_file_name, is_hidden
from .dirdiff import describe_differences


@dataclass
class Planned:
    """One harvested golden: where it goes and what accepting it does."""

    rel: str
    source: Path
    target: Path
    data: dict
    action: str  # created / changed / unchanged
    diff: list[str] = field(default_factory=list)


def _layout_problem(rel: Path, data: dict) -> Optional[str]:
    """Why ``rel`` (relative to the harvest dir) is not where the golden of ``data`` belongs, or None."""
    parts = rel.parts
    if len(parts) < 3:
        return "not in the golden layout <platform>/<test file>/<test>/<runner>_bs_<bs>.json"
    bad = [p for p in parts[:-1] if p != safe_name(p)]
    if bad:
        return f"folder name {bad[0]!r} is not one the plugin writes"
    summary = store.summary_from_dict(data, rel)
    if summary.key.batch_size == UNKNOWN_BATCH_SIZE:
        return "its key does not say the batch size (bs=?); goldens are per batch size"
    if parts[0] != safe_name(summary.platform):
        return f"sits under platform folder {parts[0]!r} but holds a summary of platform {summary.platform!r}"
    names = {golden_file_name(summary.key), golden_file_name(summary.key, explicit_rank=True)}
    if rel.name not in names:
        return f"holds the summary of {summary.key}, whose golden is named {golden_file_name(summary.key)}"
    return None


def plan(harvest: Path, golden_dir: Path, only: Optional[str] = None) -> list[Planned]:
    """Check every harvested file and work out what accepting it does; UsageError naming every refused file."""
    harvest, golden_dir = Path(harvest), Path(golden_dir)
    if not harvest.is_dir():
        raise UsageError(f"{harvest}: not a directory (give the folder --golden-out wrote)")
    files = sorted(
        p
        for p in harvest.rglob("*")
        if p.is_file()
        and not any(is_hidden(q) for q in p.relative_to(harvest).parts)
        and p.name != HARVEST_DIFF_NAME  # the failure text a check writes beside its harvest, not a golden
    )
    if only is not None:
        files = [p for p in files if fnmatch.fnmatchcase(p.relative_to(harvest).as_posix(), only)]
    if not files:
        what = f" matching --only {only!r}" if only is not None else ""
        raise UsageError(f"{harvest}: no harvested goldens{what}")
    refused: list[str] = []
    planned: list[Planned] = []
    for path in files:
        rel = path.relative_to(harvest)
        try:
            if not path.name.endswith(GOLDEN_SUFFIX):
                raise GoldenError(rel, "not a golden file (*.json)")
            data = store.load_golden_dict(path)
            problem = _layout_problem(rel, data)
            if problem:
                raise GoldenError(rel, problem)
            target = store.ensure_inside(golden_dir, golden_dir / rel)
        except GraphCaptureError as exc:
            refused.append(f"  {harvest / rel}: {getattr(exc, 'problem', exc)}")
            continue
        planned.append(_action(rel.as_posix(), path, target, data))
    if refused:
        raise UsageError(
            f"refusing to accept {len(refused)} of {len(files)} files (nothing written):\n" + "\n".join(refused)
        )
    return planned


def _action(rel: str, source: Path, target: Path, data: dict) -> Planned:
    if not target.exists():
        return Planned(rel, source, target, data, "created")
    try:
        old = store.load_golden_dict(target)
        expected = store.summary_from_dict(old, target)
    except GoldenError as exc:
        return Planned(rel, source, target, data, "changed", [f"the current golden is unreadable: {exc.problem}"])
    if store.same_content(old, data):
        # Same entries: only a harvest of another environment changes the file (the golden then records it).
        moved = environment_differences(old.get("environment") or {}, data.get("environment") or {})
        if not moved:
            return Planned(rel, source, target, data, "unchanged")
        line = f"~ environment: {'; '.join(moved)} (kernels, ops and launches unchanged)"
        return Planned(rel, source, target, data, "changed", [line])
    lines = describe_differences(expected, store.summary_from_dict(data, source))
    if old.get("launch_budget") != data.get("launch_budget"):
        lines.append(f"~ launch_budget: {old.get('launch_budget')} → {data.get('launch_budget')}")
    return Planned(rel, source, target, data, "changed", lines)


def apply(planned: list[Planned], golden_dir: Path) -> None:
    """Write every created or changed golden; on a failure restore the ones already written, then raise."""
    done: list[tuple[Path, Optional[bytes]]] = []
    try:
        for item in planned:
            if item.action == "unchanged":
                continue
            before = item.target.read_bytes() if item.target.exists() else None
            store.write_golden(item.target, item.data)
            done.append((item.target, before))
    except GraphCaptureError as exc:
        for target, before in reversed(done):
            if before is None:
                store.remove_golden(target, golden_dir)
            else:
                write_atomic(target, before, error=GoldenError)
        raise UsageError(f"{exc}; nothing was accepted (the goldens written before it were put back)") from None


def accept(harvest: Path, golden_dir: Path, *, only: Optional[str] = None, dry_run: bool = False) -> list[str]:
    """Accept the harvested goldens (see the module docstring); returns the lines to print."""
    planned = plan(harvest, golden_dir, only)
    lines: list[str] = []
    for item in planned:
        lines.append(f"{item.action:<9} {item.rel}")
        lines += [f"    {line}" for line in item.diff]
    counts = {a: sum(1 for p in planned if p.action == a) for a in ("created", "changed", "unchanged")}
    tally = f"{counts['created']} created, {counts['changed']} changed, {counts['unchanged']} unchanged"
    if dry_run:
        lines.append(f"dry run: {tally} in {golden_dir}; nothing written")
    else:
        apply(planned, Path(golden_dir))
        lines.append(f"accepted into {golden_dir}: {tally}")
    return lines
