"""File plumbing shared by every layer: atomic writes (nothing half-written is ever visible), a paused GC, strict JSON.

Temp files are dot-files ``.<target>.<pid>-<random>.partial<suffixes>``; a write sweeps those of writers no longer running.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import stat
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Union

from .errors import FileError

try:  # a C JSON parser that builds plain dicts and lists faster than the stdlib (a dependency)
    import msgspec
except ImportError:  # pragma: no cover - the stdlib parses instead, to the same objects
    msgspec = None

_PARTIAL_MARK = ".partial"
#: ``.<target>.<pid>-<random>.partial…``: the writer's pid tells whether a leftover is still being written.
_LEFTOVER = re.compile(r"^\..+\.(?:(?P<pid>\d+)-)?[A-Za-z0-9_]{8}\.partial")
#: Leftovers without a pid (written by older versions) are removed once this old (seconds).
_LEGACY_AGE = 3600.0
_swept: set[str] = set()


def is_scratch(name: str) -> bool:
    """A temp file of an atomic write (ours, or what an exporter made of its name): never an input."""
    return name.startswith(".") or f"{_PARTIAL_MARK}." in name or name.endswith((_PARTIAL_MARK, ".tmp"))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


def _sweep_leftovers(folder: Union[str, Path]) -> list[Path]:
    """Remove the temp files in ``folder`` whose writer no longer runs (no pid, or not POSIX: older than an hour)."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    now = time.time()
    for entry in entries:
        match = _LEFTOVER.match(entry.name)
        if match is None or not entry.is_file(follow_symlinks=False):
            continue
        pid = match["pid"]
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > _LEGACY_AGE
        except OSError:
            continue
        stale = old if pid is None or os.name != "posix" else not _running(int(pid))
        if stale:
            with contextlib.suppress(OSError):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
    return removed


def _sweep_once(folder: Path) -> None:
    key = os.path.abspath(folder)
    if key not in _swept:
        _swept.add(key)
        _sweep_leftovers(folder)


def _file_kind(mode: int) -> str:
    """What a non-regular file is, for messages."""
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def require_regular(path: Union[str, Path], *, error: type[FileError] = FileError, missing_ok: bool = False) -> bool:
    """Raise ``error(path, …)`` unless ``path`` is a regular file (a FIFO would block); False when missing and ``missing_ok``."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if missing_ok:
            return False
        raise error(path, "does not exist") from None
    except OSError as exc:
        raise error(path, f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        raise error(path, f"is {_file_kind(mode)}, not a regular file")
    return True


def format_bytes(count: float) -> str:
    """``1536`` → ``1.5 KiB``: a byte count as a person reads it (binary units)."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Disable the cyclic GC inside the block; the previous state is always restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


# --------------------------------------------------------------------------- atomic writes


def write_via(path: Union[str, Path], export: Callable[[Path], None], *, error: type[FileError] = FileError) -> None:
    """Run ``export(tmp)`` on a temp dot-file beside ``path`` (same suffixes), fsync it and rename it onto ``path``.

    An ``OSError`` becomes ``error(path, problem)``; anything else propagates after the temp file is removed."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        existing = require_regular(path, error=error, missing_ok=True)
        mode = path.stat().st_mode & 0o777 if existing else 0o644
        _sweep_once(path.parent)
        fd, name = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}-", suffix=f"{_PARTIAL_MARK}{''.join(path.suffixes)}", dir=path.parent
        )
        os.close(fd)
    except OSError as exc:
        raise error(path, f"cannot write: {exc.strerror or exc}") from None
    tmp = Path(name)
    try:
        export(tmp)
        fd = os.open(tmp, os.O_RDWR)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(exc, OSError):
            raise error(path, f"cannot write: {exc.strerror or exc}") from None
        raise
    _fsync_dir(path.parent)


def encode_utf8(text: str, path: Union[str, Path], *, error: type[FileError] = FileError) -> bytes:
    """``text`` as UTF-8 bytes, encoded before any file is opened; ``error(path, …)`` naming a lone surrogate."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start : exc.end]
        raise error(
            path,
            f"cannot write: the text holds {bad!r} (character {exc.start}), a lone surrogate UTF-8 cannot "
            f"encode (from a \\u escape without its pair, or a file name that is not UTF-8)",
        ) from None


def write_atomic(path: Union[str, Path], data: Union[str, bytes], *, error: type[FileError] = FileError) -> None:
    """Write ``data`` (text is UTF-8 encoded) to ``path`` atomically (see :func:`write_via`)."""
    raw = encode_utf8(data, path, error=error) if isinstance(data, str) else data

    def write(tmp: Path) -> None:
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
            handle.write(raw)

    write_via(path, write, error=error)


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


# --------------------------------------------------------------------------- strict JSON


class JSONProblem(ValueError):
    """Why a text is not the JSON we accept; ``str()`` is a phrase for an error message."""


def _reject_constant(name: str) -> Any:
    raise JSONProblem(f"invalid JSON: non-standard constant {name} (NaN/Infinity are not allowed)")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):  # rare: find the name for the message
        seen: set = set()
        for name, _ in pairs:
            if name in seen:
                raise JSONProblem(f"duplicate key {name!r}")
            seen.add(name)
    return obj


def loads_strict(text: str, *, unique_keys: bool = False) -> Any:
    """``json.loads`` refusing NaN/Infinity (and duplicate keys with ``unique_keys``); JSONProblem says why."""
    try:
        with gc_paused():
            return json.loads(
                text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys if unique_keys else None
            )
    except JSONProblem:
        raise
    except json.JSONDecodeError as exc:
        # A string still open at the end of the text is a truncation too (the cut fell inside a name).
        if exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string"):
            raise JSONProblem("truncated JSON (the content ends before it is complete)") from None
        raise JSONProblem(f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:
        raise JSONProblem("invalid JSON: nesting too deep") from None
    except ValueError as exc:
        raise JSONProblem(f"invalid JSON: {exc}") from None


def is_text(value: str) -> bool:
    """Whether ``value`` can be written as UTF-8: JSON parsers accept a lone surrogate escape (``\\ud800``), no file can hold it."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


if msgspec is not None:
    _fast_loads = msgspec.json.Decoder().decode
    _FAST_ERRORS: tuple[type[BaseException], ...] = (msgspec.MsgspecError, ValueError, RecursionError)
else:  # pragma: no cover

    def _fast_loads(text: str) -> Any:
        return json.loads(text, parse_constant=_reject_constant)

    _FAST_ERRORS = (ValueError, RecursionError)


def loads_unique(text: str, covers: Callable[[Any, int], bool]) -> Any:
    """What ``loads_strict(text, unique_keys=True)`` returns or raises, at C speed when no key can be repeated.

    ``covers(data, n)``: whether ``n`` is at most the keys of every object in ``data`` plus the colons of its strings."""
    # Rule: without a \u escape, text.count(":") == keys written + colons inside strings, so when it equals keys
    # kept + colons of the parsed strings no object repeated a key. Anything not cleared (an escape, a text
    # the fast parser refuses) goes through loads_strict, so result and message are the same.
    if "\\" not in text or "\\u" not in text:
        try:
            with gc_paused():
                data = _fast_loads(text)
        except _FAST_ERRORS:
            pass  # loads_strict below raises the same, with its message
        else:
            if covers(data, text.count(":")):
                return data
    return loads_strict(text, unique_keys=True)


#: Fields of a summary that hold entries (kernels, ops, launch counts): written one entry a line.
_ENTRY_SECTIONS = ("kernels", "ops", "launches")


def _compact_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, allow_nan=False, separators=(", ", ": "))


def _entry_json(value: Any) -> str:
    """One entry on one line, its ``name`` first so a reviewer reads what it is before its numbers."""
    if isinstance(value, dict) and "name" in value:
        rest = _compact_json({k: v for k, v in value.items() if k != "name"})
        head = f'{{"name": {_compact_json(value["name"])}'
        return head + ("}" if rest == "{}" else f", {rest[1:]}")
    return _compact_json(value)


def _expanded(name: str, value: Any, indent: str, last: bool) -> list[str]:
    """``"name": value`` with lists one element a line and dicts one field a line, recursively for dicts."""
    comma = "" if last else ","
    head = f"{indent}{_compact_json(name)}: "
    if isinstance(value, list) and value:
        body = [f"{indent}  {_entry_json(item)}," for item in value]
        body[-1] = body[-1][:-1]
        return [head + "[", *body, f"{indent}]{comma}"]
    if isinstance(value, dict) and value:
        items = sorted(value.items())
        body = [line for i, (k, v) in enumerate(items) for line in _expanded(k, v, indent + "  ", i == len(items) - 1)]
        return [head + "{", *body, f"{indent}}}{comma}"]
    return [head + _compact_json(value) + comma]


def dumps_entries(data: dict) -> str:
    """JSON of a summary or golden made for review: a header of one line per field, then one line per entry.

    A one-op change is then a one-line diff; still plain JSON. TypeError/ValueError for what JSON cannot hold."""
    return "\n".join(_entry_lines(pack_graphs(data), "")) + "\n"


#: A summary's list of its graphs (a key of several graphs), last.
_GRAPHS_SECTION = "graphs"
#: In a key of several graphs as written, each kernel and op entry's count in each graph (capture order).
PER_GRAPH = "per_graph"
#: The entry sections each graph of a key holds a share of (the key's are their sums).
_SHARED = ("kernels", "ops")


def pack_graphs(data: dict) -> dict:
    """A key of several graphs as written: each entry once with its count per graph (``per_graph``).

    A key whose graphs are not its entries' shares is written as it is."""
    graphs = data.get(_GRAPHS_SECTION)
    if not isinstance(graphs, list) or not graphs or not all(isinstance(g, dict) for g in graphs):
        return data
    out = dict(data)
    for name in _SHARED:
        entries = data.get(name)
        if not isinstance(entries, list) or not all(isinstance(e, dict) and PER_GRAPH not in e for e in entries):
            return data
        index = {_identity(e): i for i, e in enumerate(entries)}
        if len(index) != len(entries):
            return data
        counts = [[0] * len(graphs) for _ in entries]
        for g, graph in enumerate(graphs):
            for entry in graph.get(name) or ():
                i = index.get(_identity(entry)) if isinstance(entry, dict) else None
                if i is None or not isinstance(entry.get("count"), int) or counts[i][g]:
                    return data
                counts[i][g] = entry["count"]
        out[name] = [{**e, PER_GRAPH: c} for e, c in zip(entries, counts)]
    out[_GRAPHS_SECTION] = [{k: v for k, v in g.items() if k not in _SHARED} for g in graphs]
    return out if unpack_graphs(out) == data else data  # lossless, or written as it is


def unpack_graphs(data: Any) -> Any:
    """Undo :func:`pack_graphs` (anything else as it is); a ``per_graph`` not one count per graph is a ValueError."""
    graphs = data.get(_GRAPHS_SECTION) if isinstance(data, dict) else None
    if not isinstance(graphs, list) or not all(isinstance(g, dict) for g in graphs):
        return data
    packed = [name for name in _SHARED if isinstance(data.get(name), list)]
    if not any(isinstance(e, dict) and PER_GRAPH in e for name in packed for e in data[name]):
        return data
    out = dict(data)
    shares: list[dict] = [{k: v for k, v in g.items()} for g in graphs]
    for name in packed:
        for share in shares:
            share[name] = []
        entries = []
        for i, entry in enumerate(data[name]):
            counts = entry.get(PER_GRAPH) if isinstance(entry, dict) else None
            if not (isinstance(counts, list) and len(counts) == len(graphs) and all(_count(c) for c in counts)):
                raise ValueError(
                    f"{name}[{i}].{PER_GRAPH} must be one count of at least 0 per graph ({len(graphs)}), got {counts!r}"
                )
            entry = {k: v for k, v in entry.items() if k != PER_GRAPH}
            entries.append(entry)
            for share, count in zip(shares, counts):
                if count:
                    share[name].append({**entry, "count": count})
        out[name] = entries
    out[_GRAPHS_SECTION] = [{k: s[k] for k in (*_SHARED, *graphs[j]) if k in s} for j, s in enumerate(shares)]
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _identity(entry: dict) -> str:
    return _compact_json({k: v for k, v in entry.items() if k != "count"})


def _entry_lines(data: dict, indent: str, comma: str = "") -> list[str]:
    """The lines of :func:`dumps_entries` for ``data`` at ``indent``; a key's graphs follow its own entries."""
    sections = (*_ENTRY_SECTIONS, _GRAPHS_SECTION)
    header = sorted(k for k in data if k not in sections)
    names = header + [k for k in sections if k in data]
    lines = [indent + "{"]
    inner = indent + "  "
    for i, name in enumerate(names):
        last = i == len(names) - 1
        if name == _GRAPHS_SECTION and isinstance(data[name], list) and all(isinstance(g, dict) for g in data[name]):
            lines.append(f"{inner}{_compact_json(name)}: [")
            for j, graph in enumerate(data[name]):
                comma = "" if j == len(data[name]) - 1 else ","
                if any(k in graph for k in _SHARED):
                    lines += _entry_lines(graph, inner + "  ", comma)
                else:  # packed (pack_graphs): a graph's own fields, one line
                    lines.append(f"{inner}  {_compact_json(graph)}{comma}")
            lines.append(f"{inner}]{'' if last else ','}")
        elif name in _ENTRY_SECTIONS:
            lines += _expanded(name, data[name], inner, last)
        else:
            lines.append(f"{inner}{_compact_json(name)}: {_compact_json(data[name])}{'' if last else ','}")
    lines.append(indent + "}" + comma)
    return lines
