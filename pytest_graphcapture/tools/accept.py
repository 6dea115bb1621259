"""``graphcapture accept HARVEST_DIR``: bring goldens written by ``--golden-out`` into the golden tree, all or nothing.

Every file is checked (layout, content, the golden it replaces) before any is written, under the tree's write lock;
a failed write or Ctrl-C puts back what was written, or names the goldens left and the command that finishes.
"""

from __future__ import annotations

import fnmatch
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from .._io import require_regular, write_atomic
from ..errors import GoldenError, GraphCaptureError, UsageError
from ..golden import store
from ..golden.store import GoldenLock
from ..keys import UNKNOWN_BATCH_SIZE, safe_name
from ..naming import GOLDEN_SUFFIX, HARVEST_DIFF_NAME, HARVEST_PICTURE_NAME, golden_file_name, is_hidden
from .matrix import describe_differences


@dataclass
class _Planned:
    """One harvested golden: where it goes, what accepting it does (created/changed/unchanged), its bytes after and before."""

    rel: str
    source: Path
    target: Path
    data: dict
    action: str
    diff: list[str] = field(default_factory=list)
    raw: bytes = b""
    before: Optional[bytes] = None  # None: no golden yet


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


def _plan(harvest: Path, golden_dir: Path, only: Optional[str] = None) -> list[_Planned]:
    """Check every harvested file and work out what accepting it does; UsageError naming every refused file."""
    harvest, golden_dir = Path(harvest), Path(golden_dir)
    if not harvest.is_dir():
        raise UsageError(f"{harvest}: not a directory (give the folder --golden-out wrote)")
    files = sorted(
        p
        for p in harvest.rglob("*")
        if p.is_file()
        and not any(is_hidden(q) for q in p.relative_to(harvest).parts)
        and p.name not in (HARVEST_DIFF_NAME, HARVEST_PICTURE_NAME)  # written beside the harvest, not goldens
    )
    if only is not None:
        files = [p for p in files if fnmatch.fnmatchcase(p.relative_to(harvest).as_posix(), only)]
    if not files:
        what = f" matching --only {only!r}" if only is not None else ""
        raise UsageError(f"{harvest}: no harvested goldens{what}")
    refused: list[str] = []
    planned: list[_Planned] = []
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
            raw = store.encode_golden(data, rel)
            before = _current_bytes(target)
            item = _action(rel.as_posix(), path, target, data, before)
        except GraphCaptureError as exc:
            refused.append(f"  {harvest / rel}: {getattr(exc, 'problem', exc)}")
            continue
        item.raw, item.before = raw, before
        planned.append(item)
    if refused:
        raise UsageError(
            f"refusing to accept {len(refused)} of {len(files)} files (nothing written):\n" + "\n".join(refused)
        )
    return planned


def _current_bytes(target: Path) -> Optional[bytes]:
    """The golden file ``target`` now, or None when there is none; GoldenError when it cannot be read."""
    try:
        if not require_regular(target, error=GoldenError, missing_ok=True):
            return None
        return target.read_bytes()
    except GoldenError as exc:
        raise GoldenError(target, f"the golden it replaces, {target}, {exc.problem}") from None
    except OSError as exc:
        raise GoldenError(target, f"the golden it replaces, {target}, cannot be read: {exc.strerror or exc}") from None


def _action(rel: str, source: Path, target: Path, data: dict, before: Optional[bytes]) -> _Planned:
    if before is None:
        return _Planned(rel, source, target, data, "created")
    try:
        old = store.load_golden_dict(target)
        expected = store.summary_from_dict(old, target)
    except GoldenError as exc:
        return _Planned(rel, source, target, data, "changed", [f"the current golden is unreadable: {exc.problem}"])
    if store.same_content(old, data):
        # Same content: the golden keeps the environment that produced it, whatever the harvest ran in.
        return _Planned(rel, source, target, data, "unchanged")
    lines = describe_differences(expected, store.summary_from_dict(data, source))
    if old.get("launch_budget") != data.get("launch_budget"):
        lines.append(f"~ launch_budget: {old.get('launch_budget')} → {data.get('launch_budget')}")
    return _Planned(rel, source, target, data, "changed", lines)


def _put_back(started: list[_Planned], golden_dir: Path) -> list[_Planned]:
    """Restore the goldens of ``started``; return those that could not be (a second Ctrl-C stops and returns the rest)."""
    left: list[_Planned] = []
    pending = list(reversed(started))
    for done, item in enumerate(pending):
        try:
            if item.before is None:
                store.remove_golden(item.target, golden_dir)
            else:
                write_atomic(item.target, item.before, error=GoldenError)
        except GraphCaptureError:
            left.append(item)
        except KeyboardInterrupt:
            return left + pending[done:]
    return left


def _after_failure(head: str, started: list[_Planned], golden_dir: Path, finish: str) -> str:
    """Put back what was written; the one-line account of the tree: ``head``, then what happened to it."""
    left = _put_back(started, golden_dir)
    if not left:
        return f"{head}; nothing was accepted (every golden written before was put back)"
    names = ", ".join(item.rel for item in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    count = "1 golden holds" if len(left) == 1 else f"{len(left)} goldens hold"
    return f"{head}; putting back stopped: {count} the harvest's version ({names}); finish accepting with: {finish}"


def _apply(planned: list[_Planned], golden_dir: Path, *, finish: str = "graphcapture accept") -> None:
    """Write every created or changed golden; on a failure (UsageError) or Ctrl-C put back those written, then raise.

    ``finish`` is the command that accepts the harvest again, named when putting back cannot complete."""
    writes = [item for item in planned if item.action != "unchanged"]
    started: list[_Planned] = []
    try:
        for item in writes:
            started.append(item)  # before writing: an interruption right after the rename is put back too
            write_atomic(item.target, item.raw, error=GoldenError)
    except GraphCaptureError as exc:
        raise UsageError(_after_failure(str(exc), started, golden_dir, finish)) from None
    except KeyboardInterrupt:
        head = f"while writing golden {len(started)} of {len(writes)}"
        raise KeyboardInterrupt(_after_failure(head, started, golden_dir, finish)) from None
    except BaseException:
        _put_back(started, golden_dir)  # a bug: put back, and let its traceback through
        raise


def _command(harvest: Path, golden_dir: Path, only: Optional[str]) -> str:
    """The ``graphcapture accept`` command line that accepts this harvest again."""
    words = ["graphcapture", "accept", str(harvest), "--golden-dir", str(golden_dir)]
    words += ["--only", only] if only is not None else []
    return shlex.join(words)


def accept(harvest: Path, golden_dir: Path, *, only: Optional[str] = None, dry_run: bool = False) -> list[str]:
    """Accept the harvested goldens (see the module docstring); returns the lines to print."""
    lock = None
    if not dry_run:  # held from planning to the last write: the tree compared is the tree written
        lock = GoldenLock(golden_dir, writer="accept")
        lock.acquire()
    try:
        return _accept(Path(harvest), Path(golden_dir), only, dry_run)
    finally:
        if lock is not None:
            lock.release()


def _accept(harvest: Path, golden_dir: Path, only: Optional[str], dry_run: bool) -> list[str]:
    planned = _plan(harvest, golden_dir, only)
    lines: list[str] = []
    for item in planned:
        lines.append(f"{item.action:<9} {item.rel}")
        lines += [f"    {line}" for line in item.diff]
    counts = {a: sum(1 for p in planned if p.action == a) for a in ("created", "changed", "unchanged")}
    tally = f"{counts['created']} created, {counts['changed']} changed, {counts['unchanged']} unchanged"
    if dry_run:
        lines.append(f"dry run: {tally} in {golden_dir}; nothing written")
    else:
        _apply(planned, golden_dir, finish=_command(harvest, golden_dir, only))
        lines.append(f"accepted into {golden_dir}: {tally}")
    return lines
