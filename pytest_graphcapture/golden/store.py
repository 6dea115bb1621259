"""Golden files on disk: reading, checked writing, the write lock, the harvest folder and orphaned goldens."""

from __future__ import annotations

import contextlib
import os
import shutil
from operator import itemgetter, methodcaller
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from .._io import JSONProblem, dumps_entries, encode_utf8, loads_unique, require_regular, unpack_graphs, write_atomic
from ..errors import GoldenError, UsageError
from ..keys import CaptureKey, is_int, safe_name
from ..naming import GOLDEN_SUFFIX, golden_file_name, is_hidden, nodeid_components
from ..summary.model import SCHEMA_VERSION, Summary
from ..summary.model import summary_from_dict as model_summary_from_dict
from .change import gated_content
from .expect import MEMORY_BUDGET_FIELD, launch_budget_of

LOCK_NAME = ".graphcapture-write.lock"
#: What the refusal says about each kind of writer (the second line of the lock file); ``{pid}`` is `` (pid N)``.
_WRITERS = {
    "pytest": "another pytest run{pid} is writing goldens here (--update-golden)",
    "accept": "a graphcapture accept{pid} is writing goldens here",
    "check": "a graphcapture check --update{pid} is writing goldens here",
}


def _try_lock(fd: int) -> bool:
    if os.name == "nt":  # pragma: no cover - exercised on Windows only
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


class GoldenLock:
    """The write lock of the golden tree at ``golden_dir``; :meth:`acquire` raises GoldenError when held."""

    def __init__(self, golden_dir: Path, writer: str = "pytest") -> None:
        if writer not in _WRITERS:
            raise ValueError(f"unknown golden writer {writer!r}; one of {', '.join(_WRITERS)}")
        self.golden_dir = Path(golden_dir)
        self.writer = writer
        self.path = self.golden_dir / LOCK_NAME
        self._fd: Optional[int] = None
        self._created_dir = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise GoldenError naming the run that holds it."""
        if self._fd is not None:
            return
        self._created_dir = not self.golden_dir.exists()
        try:
            self.golden_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GoldenError(self.golden_dir, f"cannot create the golden dir: {exc.strerror or exc}") from None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise GoldenError(self.path, f"cannot create the write lock: {exc.strerror or exc}") from None
            if not _try_lock(fd):
                pid, writer = _read_holder(fd)
                os.close(fd)
                who = _WRITERS.get(writer, _WRITERS["pytest"]).format(pid=f" (pid {pid})" if pid else "")
                raise GoldenError(self.golden_dir, f"{who}; one writer at a time: run again when it has finished")
            # The holder before us may have removed the file between our open and our lock: lock the live one.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n{self.writer}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock and remove its file, and the golden dir when the lock made it and nothing was written."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if os.name != "nt":  # an open file cannot be removed on Windows; it stays, empty of meaning
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        os.close(fd)
        if self._created_dir:
            with contextlib.suppress(OSError):
                self.golden_dir.rmdir()  # only when empty


def _read_holder(fd: int) -> tuple[Optional[int], str]:
    """The holder's pid (None when unknown) and kind of writer (a lock file with only a pid: pytest)."""
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace") if hasattr(os, "pread") else ""
    except OSError:
        return None, "pytest"
    lines = text.split()
    pid = int(lines[0]) if lines and lines[0].isdigit() else None
    return pid, lines[1] if len(lines) > 1 and lines[1] in _WRITERS else "pytest"


#: Environment variables by which CI services announce themselves (the tests' isolation uses this list too).
CI_VARIABLES = tuple(
    "CI GITHUB_ACTIONS GITLAB_CI BUILDKITE JENKINS_URL TF_BUILD CIRCLECI TRAVIS TEAMCITY_VERSION "
    "BITBUCKET_BUILD_NUMBER DRONE".split()
)

#: Values of a CI variable that mean "not on CI" (compared lowercased; an empty value too).
CI_OFF_VALUES = ("0", "false", "no")


def ci_environment(environ: Optional[dict] = None) -> Optional[str]:
    """Name of the CI environment variable that is set, or None when not on CI."""
    environ = os.environ if environ is None else environ
    for name in CI_VARIABLES:
        value = environ.get(name, "")
        if value and value.lower() not in CI_OFF_VALUES:
            return name
    return None


#: The file that marks a --golden-out folder as a harvest this plugin wrote (and may empty).
HARVEST_MARK = ".graphcapture-harvest"
_HARVEST_MARK_TEXT = "Obtained summaries written by pytest-graphcapture (--golden-out); emptied by each session.\n"


def reset_folder(folder: Path) -> None:
    """Make ``folder`` an empty folder (created when missing)."""
    if folder.is_dir() and not folder.is_symlink():
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    folder.mkdir(parents=True, exist_ok=True)


def reset_harvest(folder: Path, where: str) -> None:
    """Empty ``folder`` and mark it as a harvest; UsageError (``where`` names the option and path) when it is not ours."""
    try:
        entries = list(folder.iterdir()) if folder.is_dir() else []
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if entries and not (folder / HARVEST_MARK).is_file():
        raise UsageError(
            f"{where}: the folder holds files pytest-graphcapture did not write; "
            f"each session starts from an empty harvest folder: give a new or empty folder"
        )
    try:
        reset_folder(folder)
        (folder / HARVEST_MARK).write_text(_HARVEST_MARK_TEXT, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{where}: cannot write: {exc.strerror or exc}") from None


def _v1_to_v2(data: dict) -> dict:
    """Schema 2 names each kernel's launching op; a schema 1 golden names none."""
    data.setdefault("unattributed", None)
    return data


#: Migrations of golden dicts from schema version ``n`` to ``n + 1``; old goldens keep working.
MIGRATIONS: dict[int, Callable[[dict], dict]] = {1: _v1_to_v2}


def current_schema_version() -> int:
    """Schema version this plugin writes (:data:`summary.model.SCHEMA_VERSION`)."""
    return SCHEMA_VERSION


def _resolved_path(path: Path) -> Path:
    """``path`` with every symlink followed; a symlink loop is a GoldenError naming it."""
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError) as exc:  # RuntimeError: "Symlink loop" before Python 3.13
        raise GoldenError(path, f"cannot be resolved (a symlink loop?): {exc}") from None


def ensure_inside(root: Path, path: Path) -> Path:
    """Return ``path`` if it resolves inside ``root``; GoldenError otherwise."""
    root_resolved = _resolved_path(root)
    resolved = _resolved_path(path)
    if resolved != root_resolved and root_resolved not in resolved.parents:
        raise GoldenError(path, f"refusing to use a path outside the golden dir {root_resolved}")
    return Path(path)


def golden_folder(golden_dir: Path, platform: str, nodeid: str, check: Optional[str] = None) -> Path:
    """Folder holding the goldens of test ``nodeid`` on ``platform`` (of its check named ``check``, if given)."""
    parts = [safe_name(platform), *nodeid_components(nodeid)] + ([safe_name(check)] if check else [])
    folder = Path(golden_dir).joinpath(*parts)
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
        p for p in folder.iterdir() if p.is_file() and p.name.endswith(GOLDEN_SUFFIX) and not p.name.startswith(".")
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
    root_resolved = _resolved_path(root)
    parent = _resolved_path(path).parent
    while parent != root_resolved and root_resolved in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def dumps(data: Mapping[str, Any]) -> str:
    """The canonical text of a golden: one line per kernel, op and launch entry (:func:`_io.dumps_entries`)."""
    try:
        return dumps_entries(dict(data))
    except (TypeError, ValueError) as exc:
        raise GoldenError("<summary>", f"cannot be written as JSON: {exc}") from None


def encode_golden(data: Mapping[str, Any], path: Any) -> bytes:
    """The bytes of golden ``data`` as :func:`write_golden` writes them; GoldenError naming ``path`` if it cannot."""
    try:
        text = dumps(data)
    except GoldenError as exc:
        raise GoldenError(path, exc.problem) from None
    return encode_utf8(text, path, error=GoldenError)


def write_golden(path: Path, data: Mapping[str, Any]) -> str:
    """Write summary dict ``data`` to ``path`` unless the bytes are already there."""
    path = Path(path)
    raw = encode_golden(data, path)
    require_regular(path, error=GoldenError, missing_ok=True)
    try:
        old = path.read_bytes()
    except FileNotFoundError:
        old = None
    except OSError as exc:
        raise GoldenError(path, f"cannot read: {exc.strerror or exc}") from None
    if old == raw:
        return "unchanged"
    write_atomic(path, raw, error=GoldenError)
    return "created" if old is None else "updated"


_NAME = itemgetter("name")
_TYPES = itemgetter("input_types")
_OP = methodcaller("get", "op")


def _covers(data: Any, colons: int) -> bool:
    """Whether ``colons`` is at most the keys plus the string colons of a parsed golden (see :func:`_io.loads_unique`)."""
    if type(data) is not dict:
        return False
    weight = 0
    entries: dict[str, list] = {}
    try:
        for name, value in data.items():
            weight += 1 + name.count(":")
            if name in ("kernels", "ops") and type(value) is list and set(map(type, value)) <= {dict}:
                weight += sum(map(len, value)) + "".join(map(_NAME, value)).count(":")
                entries[name] = value
            else:
                weight += repr(value).count(":")  # exact for JSON values: one ': ' per key, strings' colons kept
        if weight >= colons:
            return True
        weight += "".join(map("".join, map(_TYPES, entries.get("ops", ())))).count(":")
        launching = list(filter(None, map(_OP, entries.get("kernels", ()))))
        if set(map(type, launching)) <= {dict}:
            weight += sum(map(len, launching)) + "".join(map(_NAME, launching)).count(":")
    except (KeyError, TypeError, RecursionError):
        return False  # not the golden layout: let the strict parse decide
    return weight >= colons


def parse_golden_text(text: str, path: Any) -> dict:
    """Parse golden JSON text: duplicate keys, NaN/Infinity and absurd nesting are errors naming ``path``."""
    try:
        data = loads_unique(text, _covers)
    except JSONProblem as exc:
        raise GoldenError(path, str(exc)) from None
    if not isinstance(data, dict):
        raise GoldenError(path, f"expected a JSON object at the top level, got {type(data).__name__}")
    try:
        return unpack_graphs(data)  # a key of several graphs is written one line per entry
    except ValueError as exc:
        raise GoldenError(path, str(exc)) from None


def migrate(data: dict, path: Any) -> dict:
    """Bring a golden dict to the current schema version (see :data:`MIGRATIONS`)."""
    current = current_schema_version()
    if "schema_version" not in data:
        raise GoldenError(path, "no schema_version: not a pytest-graphcapture golden file")
    version = data["schema_version"]
    if not is_int(version):
        raise GoldenError(path, f"schema_version must be an integer, got {version!r}")
    if version > current:
        raise GoldenError(
            path,
            f"schema_version {version} is newer than this pytest-graphcapture reads "
            f"({current}); upgrade the plugin (pip install -U pytest-graphcapture)",
        )
    while version < current:
        step = MIGRATIONS.get(version)
        if step is None:
            raise GoldenError(
                path,
                f"schema_version {version} is too old to read (no migration to "
                f"{version + 1}); re-create it with --update-golden",
            )
        data = step(dict(data))
        version += 1
        data["schema_version"] = version
    return data


def parse_golden_file(path: Path) -> dict:
    """Read and parse the golden at ``path``: a JSON object, no duplicate keys (GoldenError naming it)."""
    path = Path(path)
    require_regular(path, error=GoldenError)
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
    """Migrate a parsed golden to the current schema and check its budget fields (GoldenError naming ``path``)."""
    data = migrate(data, path)
    launch_budget_of(data, path)
    launch_budget_of(data, path, field=MEMORY_BUDGET_FIELD)
    return data


def load_golden_dict(path: Path) -> dict:
    """Read, parse and migrate the golden at ``path`` (GoldenError naming it)."""
    return checked_golden_dict(parse_golden_file(path), path)


def summary_from_dict(data: Mapping[str, Any], path: Any) -> Summary:
    """The Summary of a golden dict; any fault is a GoldenError naming ``path`` and the field."""
    return model_summary_from_dict(dict(data), str(path), error=GoldenError)


def read_golden(path: Path) -> Summary:
    """The :class:`~pytest_graphcapture.summary.model.Summary` stored at ``path``."""
    return summary_from_dict(load_golden_dict(path), path)


def same_content(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when two golden dicts gate the same: they differ at most in what no check compares."""
    return gated_content(old) == gated_content(new)


def unused_goldens(
    golden_dir: Path,
    folders: Iterable[tuple[str, str, bool]],
    used: set[tuple[str, str]],
    selected: Optional[Callable[[CaptureKey], bool]] = None,
) -> list[tuple[str, Path]]:
    """``(platform, path)`` of golden files no check used, in folders whose every test passed."""
    settled: dict[tuple[str, str], bool] = {}
    for platform, folder, passed in folders:
        settled[(platform, folder)] = settled.get((platform, folder), True) and passed
    found = []
    for (platform, folder), passed in sorted(settled.items()):
        if not passed:  # a failed test may not have checked every key: its folder is left alone
            continue
        for path in golden_files(Path(golden_dir) / folder):
            if (platform, path.relative_to(golden_dir).as_posix()) not in used and _selected(path, selected):
                found.append((platform, path))
    return found


def _selected(path: Path, selected: Optional[Callable[[CaptureKey], bool]]) -> bool:
    """Whether the golden at ``path`` holds a key ``selected`` lets be captured (True without a selection)."""
    if selected is None:
        return True
    try:
        key = read_golden(path).key
    except GoldenError:
        return False  # which key it holds is unknown: it may be one the selection left out
    return selected(key)


def orphaned_goldens(
    golden_dir: Path, collected: Iterable[str], protected: Iterable[str] = ()
) -> list[tuple[str, Path]]:
    """``(platform, path)`` of every golden file whose folder belongs to no test in ``collected``."""
    root = Path(golden_dir)
    if not root.is_dir():
        return []
    known = {tuple(nodeid_components(nodeid)) for nodeid in collected}
    shielded = [tuple(nodeid_components(nodeid)) for nodeid in protected if nodeid]
    found: list[tuple[str, Path]] = []
    for platform_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not is_hidden(p)):
        for folder, dirs, _files in os.walk(platform_dir):  # links are not followed: a loop cannot hang the scan
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            parts = Path(folder).relative_to(platform_dir).parts
            if parts in known or parts[:-1] in known or any(parts[: len(s)] == s for s in shielded):
                continue
            found.extend((platform_dir.name, path) for path in golden_files(Path(folder)))
    return found
