"""Golden files: where they live, how they are written and read, and how two summaries differ.

This module has no pytest imports so the CLI and other tools can use it.

Layout (``golden_path``)::

    <golden dir>/<platform>/<test module path>/<class>.../<test name>/<runner>_bs_<bs>[_<variant>][_rank<r>].json

Every component that comes from users (platform, module path parts, classes, test
names with parametrize ids, runner, variant) goes through :func:`keys.safe_name`,
and the final path is checked to resolve inside the golden dir.  The ``_rank<r>``
suffix is only present for ranks other than 0 — except in multi-rank captures,
where every rank's golden carries it (``_rank0`` too, ``explicit_rank=True``) and a
golden shared by all ranks carries none (see docs/multi-rank.md).

Files are JSON with sorted keys, 2-space indent and a trailing newline, written
atomically (temp file in the same directory, fsync, ``os.replace``).  A file is
only rewritten when its bytes change, so re-running on unchanged code leaves
goldens byte-identical.

The diff (:func:`compare`) is built on deepdiff over views keyed by kernel name
and op name, so each change is one readable line per item.
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from deepdiff import DeepDiff

from .errors import GoldenError, UsageError
from .gcpause import gc_paused
from .keys import CaptureKey, safe_name

SECTIONS: tuple[str, ...] = ("kernels", "ops", "launches")
#: Optional golden field: the most launches this key's capture may record (see :func:`launch_budget_violations`).
#: It is not part of the summary, so it is never diffed; ``--update-golden`` carries it over.
BUDGET_FIELD = "launch_budget"
GOLDEN_SUFFIX = ".json"
#: Failure messages are cut after this many lines; the full diff goes to a file.
MAX_DIFF_LINES = 60
#: Kernel names longer than this are shortened (in the middle) in failure messages.
MAX_NAME_WIDTH = 120

#: Migrations of golden dicts from schema version ``n`` to ``n + 1``.  Schema 1 is the
#: first released format, so there is nothing to migrate yet; a future schema bump adds
#: its step here and old goldens keep working.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


def _summary_module() -> Any:
    # Imported lazily: summary.py depends on the capture side, golden.py must not.
    from . import summary

    return summary


def current_schema_version() -> int:
    """Schema version this plugin writes (``summary.SCHEMA_VERSION``)."""
    return int(_summary_module().SCHEMA_VERSION)


# --------------------------------------------------------------------------- layout


def nodeid_components(nodeid: str) -> list[str]:
    """Path components of a test ``nodeid`` below the platform folder.

    ``tests/models/test_x.py::TestA::test_b[ü/1]`` → ``["tests", "models", "test_x.py",
    "TestA", "test_b_u_1-<hash>"]``.  Parametrize ids (which may contain ``::`` or ``/``)
    stay in the last component.  Every component is :func:`safe_name`'d, so ``..``,
    absolute paths and separators cannot escape.
    """
    module, sep, rest = str(nodeid).partition("::")
    parts = [safe_name(p) for p in module.replace("\\", "/").split("/") if p not in ("", ".")]
    if not parts:
        raise UsageError(f"cannot derive a golden folder from test id {nodeid!r}")
    if sep:
        head, bracket, params = rest.partition("[")
        names = [n for n in head.split("::") if n]
        if not names:
            names = [""]
        names[-1] = names[-1] + bracket + params
        parts.extend(safe_name(n) for n in names)
    return parts


def golden_file_name(key: CaptureKey, *, explicit_rank: bool = False) -> str:
    """``<runner>_bs_<bs>[_<variant>].json``, with ``_rank<r>`` when rank != 0 or ``explicit_rank``."""
    rank = f"_rank{key.rank}" if key.rank or explicit_rank else ""
    return f"{key.stem}{rank}{GOLDEN_SUFFIX}"


def ensure_inside(root: Path, path: Path) -> Path:
    """Return ``path`` if it resolves inside ``root``; GoldenError otherwise.

    Resolving follows symlinks, so a link inside the golden dir that points elsewhere
    is refused as well.
    """
    root_resolved = Path(root).resolve()
    resolved = Path(path).resolve()
    if resolved != root_resolved and root_resolved not in resolved.parents:
        raise GoldenError(path, f"refusing to use a path outside the golden dir {root_resolved}")
    return Path(path)


def golden_folder(golden_dir: Path, platform: str, nodeid: str) -> Path:
    """Folder holding the goldens of test ``nodeid`` on ``platform``."""
    folder = Path(golden_dir).joinpath(safe_name(platform), *nodeid_components(nodeid))
    return ensure_inside(golden_dir, folder)


def golden_path(golden_dir: Path, platform: str, nodeid: str, key: CaptureKey) -> Path:
    """The golden file of ``key`` for test ``nodeid`` on ``platform`` (checked to stay inside)."""
    path = golden_folder(golden_dir, platform, nodeid) / golden_file_name(key)
    return ensure_inside(golden_dir, path)


def golden_files(folder: Path) -> list[Path]:
    """Golden files directly in ``folder`` (not recursive: sub-folders belong to other tests)."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.iterdir()
        if p.is_file() and p.name.endswith(GOLDEN_SUFFIX) and not p.name.startswith(".")
    )


def remove_golden(path: Path, root: Path) -> None:
    """Delete golden ``path`` and the folders above it that became empty, up to ``root``."""
    ensure_inside(root, path)
    try:
        Path(path).unlink()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise GoldenError(path, f"cannot delete: {exc.strerror or exc}") from None
    root_resolved = Path(root).resolve()
    parent = Path(path).resolve().parent
    while parent != root_resolved and root_resolved in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


# --------------------------------------------------------------------------- writing


def dumps(data: Mapping[str, Any]) -> str:
    """The canonical text of a golden: sorted keys, 2-space indent, trailing newline."""
    try:
        return json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise GoldenError("<summary>", f"cannot be written as JSON: {exc}") from None


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file in the same dir, fsync and ``os.replace``.

    On any failure the temp file is removed and the previous file is left intact, so a
    parallel reader (pytest -n) never sees a half-written golden.
    """
    path = Path(path)
    data = text.encode("utf-8")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise GoldenError(path, f"cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise GoldenError(path, f"cannot write: {exc.strerror or exc}") from None
        raise
    _fsync_dir(path.parent)


def _fsync_dir(folder: Path) -> None:
    # Makes the rename durable on POSIX; not possible (nor needed) on Windows.
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_golden(path: Path, data: Mapping[str, Any]) -> str:
    """Write summary dict ``data`` to ``path`` unless the bytes are already there.

    Returns ``"created"``, ``"updated"`` or ``"unchanged"``.
    """
    path = Path(path)
    text = dumps(data)
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise GoldenError(path, f"cannot read: {exc.strerror or exc}") from None
    if old == text.encode("utf-8"):
        return "unchanged"
    write_atomic(path, text)
    return "created" if old is None else "updated"


# --------------------------------------------------------------------------- reading


class _DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # rare: find the name for the message
        seen: set = set()
        for name, _ in pairs:
            if name in seen:
                raise _DuplicateKey(name)
            seen.add(name)
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_golden_text(text: str, path: Any) -> dict:
    """Parse golden JSON text: duplicate keys and NaN/Infinity are errors naming ``path``."""
    try:
        with gc_paused():
            data = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_reject_constant)
    except _DuplicateKey as exc:
        raise GoldenError(path, f"duplicate key {exc.args[0]!r}") from None
    except RecursionError:
        raise GoldenError(path, "nested too deeply to be a golden file") from None
    except ValueError as exc:
        raise GoldenError(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise GoldenError(path, f"expected a JSON object at the top level, got {type(data).__name__}")
    return data


def migrate(data: dict, path: Any) -> dict:
    """Bring a golden dict to the current schema version (see :data:`MIGRATIONS`)."""
    current = current_schema_version()
    if "schema_version" not in data:
        raise GoldenError(path, "no schema_version: not a pytest-graphcapture golden file")
    version = data["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        raise GoldenError(path, f"schema_version must be an integer, got {version!r}")
    if version > current:
        raise GoldenError(path, f"schema_version {version} is newer than this pytest-graphcapture reads "
                                f"({current}); upgrade the plugin (pip install -U pytest-graphcapture)")
    while version < current:
        step = MIGRATIONS.get(version)
        if step is None:
            raise GoldenError(path, f"schema_version {version} is too old to read (no migration to "
                                    f"{version + 1}); re-create it with --update-golden")
        data = step(dict(data))
        version += 1
        data["schema_version"] = version
    return data


def _expect(cond: bool, path: Any, problem: str) -> None:
    if not cond:
        raise GoldenError(path, problem)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def validate_sections(data: Mapping[str, Any], path: Any) -> None:
    """Check the types of the sections the diff reads, so bad files fail with a named error."""
    kernels = data.get("kernels")
    _expect(isinstance(kernels, list), path, f"'kernels' must be a list, got {type(kernels).__name__}")
    for i, item in enumerate(kernels):
        _expect(isinstance(item, dict), path, f"kernels[{i}] must be an object")
        _expect(isinstance(item.get("name"), str), path, f"kernels[{i}].name must be a string")
        _expect(_is_int(item.get("count")), path, f"kernels[{i}].count must be an integer")
        for dim in ("grid", "block"):
            if dim in item:
                _expect(isinstance(item[dim], list) and all(_is_int(v) for v in item[dim]), path,
                        f"kernels[{i}].{dim} must be a list of integers")
    ops = data.get("ops")
    _expect(isinstance(ops, list), path, f"'ops' must be a list, got {type(ops).__name__}")
    for i, item in enumerate(ops):
        _expect(isinstance(item, dict), path, f"ops[{i}] must be an object")
        _expect(isinstance(item.get("name"), str), path, f"ops[{i}].name must be a string")
        _expect(_is_int(item.get("count")), path, f"ops[{i}].count must be an integer")
        _expect(isinstance(item.get("input_dims", []), list), path, f"ops[{i}].input_dims must be a list")
        _expect(isinstance(item.get("input_types", []), list), path, f"ops[{i}].input_types must be a list")
    launches = data.get("launches")
    _expect(isinstance(launches, dict), path, f"'launches' must be an object, got {type(launches).__name__}")
    _expect(_is_int(launches.get("total")), path, "launches.total must be an integer")
    by_api = launches.get("by_api", {})
    _expect(isinstance(by_api, dict) and all(_is_int(v) for v in by_api.values()), path,
            "launches.by_api must map API names to integers")
    env = data.get("environment", {})
    _expect(isinstance(env, dict), path, "'environment' must be an object")
    if BUDGET_FIELD in data:
        budget = data[BUDGET_FIELD]
        _expect(_is_int(budget) and budget >= 0, path,
                f"'{BUDGET_FIELD}' must be a non-negative integer (maximum launches of this batch size), "
                f"got {budget!r}")


def parse_golden_file(path: Path) -> dict:
    """Read and parse the golden at ``path``: a JSON object, no duplicate keys (GoldenError naming it).

    Not yet migrated or type-checked: see :func:`checked_golden_dict`.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise GoldenError(path, "does not exist") from None
    except OSError as exc:
        raise GoldenError(path, f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GoldenError(path, f"not UTF-8 text: {exc}") from None
    return parse_golden_text(text, path)


def checked_golden_dict(data: dict, path: Any) -> dict:
    """Migrate a parsed golden to the current schema and type-check it (GoldenError naming ``path``)."""
    data = migrate(data, path)
    validate_sections(data, path)
    return data


def load_golden_dict(path: Path) -> dict:
    """Read, parse, migrate and type-check the golden at ``path`` (GoldenError naming it)."""
    return checked_golden_dict(parse_golden_file(path), path)


def summary_from_dict(data: Mapping[str, Any], path: Any) -> Any:
    """``Summary.from_dict`` with every failure turned into a GoldenError naming ``path``."""
    from .errors import GraphCaptureError

    summary_cls = _summary_module().Summary
    try:
        return summary_cls.from_dict(dict(data), source=str(path))
    except GoldenError:
        raise
    except GraphCaptureError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise GoldenError(path, problem) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise GoldenError(path, f"invalid summary: {type(exc).__name__}: {exc}") from None


def read_golden(path: Path) -> Any:
    """The :class:`~pytest_graphcapture.summary.Summary` stored at ``path``."""
    return summary_from_dict(load_golden_dict(path), path)


def same_content(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when two golden dicts differ at most in ``environment`` (informational only)."""
    strip = lambda d: {k: v for k, v in d.items() if k != "environment"}  # noqa: E731
    return strip(old) == strip(new)


# --------------------------------------------------------------------------- diff


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _shorten(name: str, width: Optional[int]) -> str:
    if width is None or len(name) <= width:
        return name
    keep = width - 1
    return f"{name[: keep * 2 // 3]}…{name[-(keep - keep * 2 // 3):]}"


def _kernel_label(item: Mapping[str, Any]) -> str:
    extras = []
    kind = item.get("kind")
    if kind not in (None, "kernel"):
        extras.append(f"({kind})")
    for dim in ("grid", "block"):
        if dim in item:
            extras.append(f"{dim}={_compact(item[dim])}")
    return " ".join([item["name"], *extras])


def kernel_view(kernels: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{kernel label: count}``; the label carries kind/grid/block when present."""
    view: dict[str, int] = {}
    for item in kernels:
        label = _kernel_label(item)
        view[label] = view.get(label, 0) + int(item["count"])
    return view


def _op_signature(item: Mapping[str, Any]) -> str:
    return _compact([item.get("input_dims", []), item.get("input_types", [])])


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


@dataclass
class Change:
    """One difference: ``section`` (kernels/ops/launches), ``kind`` (added/removed/changed)."""

    section: str
    kind: str
    subject: str
    old: Any = None
    new: Any = None
    detail: str = ""

    def render(self, width: Optional[int] = MAX_NAME_WIDTH) -> str:
        marker = {"added": "+", "removed": "-", "changed": "~"}[self.kind]
        return f"{marker} {_shorten(self.subject, width)}{self.detail}"

    def to_dict(self) -> dict:
        return {"section": self.section, "kind": self.kind, "subject": self.subject,
                "old": self.old, "new": self.new, "text": self.render(None)}


def _deepdiff(expected: Any, actual: Any) -> DeepDiff:
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


def _kernel_changes(expected: list, actual: list) -> list[Change]:
    changes = []
    tree = _tree(kernel_view(expected), kernel_view(actual))
    for path, _, new in tree.get("dictionary_item_added", []):
        changes.append(Change("kernels", "added", path[0], None, new, f" ×{new}"))
    for path, old, _ in tree.get("dictionary_item_removed", []):
        changes.append(Change("kernels", "removed", path[0], old, None, f" ×{old}"))
    for path, old, new in tree.get("values_changed", []) + tree.get("type_changes", []):
        changes.append(Change("kernels", "changed", path[0], old, new, f" ×{old} → ×{new}"))
    return sorted(changes, key=lambda c: (c.subject, c.kind))


def _sig_text(sig: str, show_types: bool) -> str:
    dims, types = json.loads(sig)
    text = _compact(dims)
    if show_types and types:
        text += f" ({', '.join(str(t) for t in types)})"
    return text


def _op_changes(expected: list, actual: list) -> list[Change]:
    exp, act = op_view(expected), op_view(actual)
    tree = _tree(exp, act)
    changes: list[Change] = []
    for path, _, new in tree.get("dictionary_item_added", []):
        if len(path) == 1:
            for sig, count in sorted(new.items()):
                changes.append(Change("ops", "added", path[0], None, sig, f" {_sig_text(sig, False)} ×{count}"))
    for path, old, _ in tree.get("dictionary_item_removed", []):
        if len(path) == 1:
            for sig, count in sorted(old.items()):
                changes.append(Change("ops", "removed", path[0], sig, None, f" {_sig_text(sig, False)} ×{count}"))
    # Ops present on both sides: per-op shape sets (matched by name).
    touched = sorted({p[0] for entries in tree.values() for p, _, _ in entries if p[0] in exp and p[0] in act})
    for name in touched:
        old_shapes, new_shapes = exp[name], act[name]
        removed = sorted(s for s in old_shapes if s not in new_shapes)
        added = sorted(s for s in new_shapes if s not in old_shapes)
        for sig in sorted(s for s in old_shapes if s in new_shapes and old_shapes[s] != new_shapes[s]):
            changes.append(Change("ops", "changed", name, old_shapes[sig], new_shapes[sig],
                                  f" {_sig_text(sig, False)} ×{old_shapes[sig]} → ×{new_shapes[sig]}"))
        if removed or added:
            old_dims = {json.dumps(json.loads(s)[0]) for s in removed}
            new_dims = {json.dumps(json.loads(s)[0]) for s in added}
            show_types = old_dims == new_dims  # only the dtypes changed: say so
            old_text = ", ".join(_sig_text(s, show_types) for s in removed) or "(none)"
            new_text = ", ".join(_sig_text(s, show_types) for s in added) or "(none)"
            old_counts = [old_shapes[s] for s in removed]
            new_counts = [new_shapes[s] for s in added]
            counts = ""
            if sum(old_counts) != sum(new_counts):
                counts = f" (×{sum(old_counts)} → ×{sum(new_counts)})"
            changes.append(Change("ops", "changed", name, removed, added, f" {old_text} → {new_text}{counts}"))
    order = {"removed": 0, "added": 1, "changed": 2}
    return sorted(changes, key=lambda c: (c.subject, order[c.kind]))


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


def _flatten(env: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in env.items():
        if isinstance(value, Mapping):
            flat.update(_flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def environment_note(expected_env: Mapping[str, Any], actual_env: Mapping[str, Any], *, limit: int = 6) -> Optional[str]:
    """One line saying how the golden's environment differs from the current one, or None.

    Informational only: the environment never decides pass or fail.
    """
    old, new = _flatten(expected_env or {}), _flatten(actual_env or {})
    names = sorted(n for n in set(old) | set(new) if old.get(n, "(absent)") != new.get(n, "(absent)"))
    if not names:
        return None
    items = [f"{n} {old.get(n, '(absent)')} → {new.get(n, '(absent)')}" for n in names[:limit]]
    if len(names) > limit:
        items.append(f"… {len(names) - limit} more")
    return "environment differs from the golden's (may explain the diff): " + "; ".join(items)


def key_label(key: CaptureKey, *, explicit_rank: bool = False) -> str:
    """``bs=4``, with ``variant=`` when set and ``rank=`` when rank != 0 or ``explicit_rank``."""
    label = f"bs={key.batch_size}"
    if key.variant is not None:
        label += f" variant={key.variant}"
    if key.rank or explicit_rank:
        label += f" rank={key.rank}"
    return label


@dataclass
class KeyDiff:
    """The differences of one capture key against its golden, plus explanatory notes."""

    key: CaptureKey
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    incomplete: Optional[str] = None
    golden: Optional[str] = None

    @property
    def ok(self) -> bool:
        return not self.changes

    def render(self, width: Optional[int] = MAX_NAME_WIDTH) -> list[str]:
        """Human-readable lines: a heading per key, then per section, then notes."""
        where = f" ({self.golden})" if self.golden else ""
        lines = [f"{key_label(self.key)}{where}:"]
        for section in SECTIONS:
            items = [c for c in self.changes if c.section == section]
            if not items:
                continue
            counts = {k: sum(1 for c in items if c.kind == k) for k in ("added", "removed", "changed")}
            summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
            lines.append(f"  {section}: {summary}")
            lines.extend(f"    {c.render(width)}" for c in items)
        lines.extend(f"  note: {n}" for n in self.notes)
        return lines

    def to_dict(self) -> dict:
        return {"key": self.key.to_dict(), "golden": self.golden, "incomplete": self.incomplete,
                "notes": list(self.notes), "changes": [c.to_dict() for c in self.changes]}


def _check_sections(sections: Sequence[str]) -> tuple[str, ...]:
    if isinstance(sections, str):
        sections = (sections,)
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        raise UsageError(f"sections={tuple(sections)!r}: expected a non-empty subset of {SECTIONS}")
    return tuple(s for s in SECTIONS if s in sections)


def _check_level(level: str, summary: Any, what: str, path: Any) -> None:
    levels = tuple(_summary_module().LEVELS)
    if level not in levels:
        raise UsageError(f"level={level!r}: expected one of {', '.join(levels)}")
    own = getattr(summary, "level", levels[0])
    if own in levels and levels.index(level) < levels.index(own):
        raise GoldenError(path, f"{what} is at level {own!r}, cannot compare at the finer level {level!r}; "
                                f"check at level {own!r} or re-create it with --update-golden")


def diff_dicts(expected: Mapping[str, Any], actual: Mapping[str, Any], *,
               sections: Sequence[str] = SECTIONS) -> list[Change]:
    """Changes between two summary dicts (shaped like ``Summary.to_dict()``), in ``sections``."""
    changes: list[Change] = []
    sections = _check_sections(sections)
    if "kernels" in sections:
        changes += _kernel_changes(expected.get("kernels", []), actual.get("kernels", []))
    if "ops" in sections:
        changes += _op_changes(expected.get("ops", []), actual.get("ops", []))
    if "launches" in sections:
        changes += _launch_changes(expected.get("launches", {}), actual.get("launches", {}))
    return changes


def _complete(data: Mapping[str, Any]) -> tuple[bool, Optional[str]]:
    value = data.get("complete", {"value": True})
    if isinstance(value, Mapping):
        return bool(value.get("value", True)), value.get("reason")
    return bool(value), data.get("incomplete_reason")


def compare_dicts(expected: Mapping[str, Any], actual: Mapping[str, Any], key: CaptureKey, *,
                  sections: Sequence[str] = SECTIONS, golden: Optional[str] = None) -> KeyDiff:
    """:class:`KeyDiff` of two already-normalized summary dicts.

    An incomplete actual summary (or golden) skips the kernel section: missing kernel
    evidence is not a regression; ops and launches are still compared.  The
    environment is only mentioned when there are differences.
    """
    sections = _check_sections(sections)
    result = KeyDiff(key=key, golden=golden)
    act_ok, act_reason = _complete(actual)
    exp_ok, exp_reason = _complete(expected)
    if not act_ok:
        result.incomplete = act_reason or "no reason given"
        if "kernels" in sections:
            result.notes.append(f"incomplete: {result.incomplete} (kernels not compared)")
            sections = tuple(s for s in sections if s != "kernels")
    elif not exp_ok and "kernels" in sections:
        result.notes.append(f"golden was written from an incomplete capture ({exp_reason or 'no reason given'}); "
                            "kernels not compared, refresh it with --update-golden")
        sections = tuple(s for s in sections if s != "kernels")
    if sections:
        result.changes = diff_dicts(expected, actual, sections=sections)
    if result.changes:
        note = environment_note(expected.get("environment", {}), actual.get("environment", {}))
        if note:
            result.notes.append(note)
    return result


def compare(expected: Any, actual: Any, *, level: str = "name", ignore_kernels: Sequence[str] = (),
            ignore_ops: Sequence[str] = (), sections: Sequence[str] = SECTIONS,
            golden: Optional[str] = None) -> KeyDiff:
    """Compare golden ``expected`` with ``actual`` (both Summary objects) at ``level``.

    Both sides are normalized to ``level`` and stripped of kernels/ops matching the
    ``ignore_*`` regexes first.  ``golden`` is the golden's display path, used in
    error messages and in the rendered heading.
    """
    _check_level(level, actual, "the captured summary", golden or "<actual>")
    _check_level(level, expected, "the golden", golden or "<golden>")
    exp = expected.normalized(level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops))
    act = actual.normalized(level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops))
    return compare_dicts(exp.to_dict(), act.to_dict(), actual.key, sections=sections, golden=golden)


def cut_lines(lines: list[str], full_path: Optional[Any], *, max_lines: int = MAX_DIFF_LINES) -> list[str]:
    """``lines`` cut to ``max_lines``, ending with where the full diff is when cut."""
    if len(lines) <= max_lines:
        return list(lines)
    hidden = len(lines) - (max_lines - 1)
    where = f"; full diff in {full_path}" if full_path else ""
    return lines[: max_lines - 1] + [f"… {hidden} more lines{where}"]


# --------------------------------------------------------------------------- launch budgets


def budget_from_option(max_launches: Any, key: CaptureKey) -> Optional[int]:
    """The ``golden.check(max_launches=...)`` budget of ``key``: an int for every key, or ``{bs: int}``.

    A mapping without the key's batch size sets no budget for it.  Bad values are a
    UsageError naming the argument.
    """
    if max_launches is None:
        return None
    if isinstance(max_launches, Mapping):
        for bs, limit in max_launches.items():
            if not _is_int(bs) or bs < 1:
                raise UsageError(f"golden.check(max_launches=...): key {bs!r} is not a batch size (positive int)")
            if not _is_int(limit) or limit < 0:
                raise UsageError(f"golden.check(max_launches=...): budget of bs={bs} must be a non-negative "
                                 f"integer, got {limit!r}")
        return max_launches.get(key.batch_size)
    if not _is_int(max_launches) or max_launches < 0:
        raise UsageError(f"golden.check(max_launches={max_launches!r}): expected a non-negative integer or "
                         f"a {{batch_size: integer}} mapping")
    return int(max_launches)


def launch_budget_of(data: Optional[Mapping[str, Any]]) -> Optional[int]:
    """The ``launch_budget`` of a loaded golden dict, or None (no golden, or no budget in it)."""
    budget = data.get(BUDGET_FIELD) if data is not None else None
    return int(budget) if _is_int(budget) else None


def launch_budget_violations(key: CaptureKey, launches: int,
                             budgets: Sequence[tuple[Optional[int], str]]) -> list[str]:
    """One line per exceeded budget: ``bs=8: 212 kernel launches > budget 200 (source)``."""
    return [f"{key_label(key)}: {launches} kernel launches > budget {limit} ({source})"
            for limit, source in budgets if limit is not None and launches > limit]


def copy_command(src_folder: Path, dst_folder: Path) -> str:
    """Shell command that accepts harvested goldens: copy the obtained files over the goldens."""
    src, dst = shlex.quote(str(src_folder)), shlex.quote(str(dst_folder))
    return f"mkdir -p {dst} && cp {src}/*{GOLDEN_SUFFIX} {dst}/"
