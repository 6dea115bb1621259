"""Load Chrome/Kineto trace files (``.json`` and ``.json.gz``) safely and fast.

Why a module of its own: trace files come from other machines and other tools,
so every way they can be wrong must end in one clear line naming the file and the
problem (:class:`~pytest_graphcapture.errors.TraceFormatError`), never in a
traceback, and a decompression bomb must not take the machine down.

Speed matters (traces reach hundreds of MB), so loading is exactly what a plain
``gzip`` + ``json`` load does: read the (decompressed) bytes once, decode them as
UTF-8 and hand them to the C JSON parser.  The only extra work is a size check
and one cheap type check per event.

Decisions, documented because callers rely on them:

* The decompressed size is capped (default 2 GiB).  Raise it with the
  ``max_bytes`` argument or the environment variable
  ``GRAPH_CAPTURE_MAX_TRACE_BYTES`` (bytes, or a number with ``K``/``M``/``G``
  suffix); the error message says so.
* ``NaN``/``Infinity`` are rejected: they are not JSON and no profiler we read
  writes them, so they mean the file was produced by something else.
* Events that are not JSON objects are an error (naming the index of the first
  one) rather than silently skipped: a trace with such events is damaged, and
  skipping would let a damaged trace pass as a kernel regression or a clean run.
  Wrong-typed *fields* inside an event (a non-string name or category, non-dict
  ``args``) are tolerated by the summarizer, which treats them as missing.
* Arrays and objects may nest :data:`MAX_NESTING` levels deep (the top-level object
  is level 1; Kineto writes 7 at most).  A parser's own limit moves with the depth of the
  caller's stack (a file read from ``pytest`` failed where the CLI read it), so the
  limit is checked on the text before parsing: every reader gives the same answer.
"""

from __future__ import annotations

import os
import re
import zlib
from typing import BinaryIO, Iterator, Optional, Union

from .._io import JSONProblem, loads_strict, require_regular
from ..errors import TraceFormatError, UsageError

DEFAULT_MAX_TRACE_BYTES = 2 * 1024**3
MAX_TRACE_BYTES_ENV = "GRAPH_CAPTURE_MAX_TRACE_BYTES"

#: The deepest nesting of arrays and objects a trace may have (the top-level object is level 1).
MAX_NESTING = 100

_GZIP_MAGIC = b"\x1f\x8b"
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(text: str) -> int:
    """Parse ``"2147483648"``, ``"512M"``, ``"4GiB"`` into bytes (powers of 1024)."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (use bytes or a number with K, M or G)")
    unit = (match.group(2) or "").lower()[:1]
    value = int(match.group(1)) * _UNITS[unit]
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return value


def resolve_max_bytes(max_bytes: Optional[int] = None) -> int:
    """The decompressed-size cap: argument > ``GRAPH_CAPTURE_MAX_TRACE_BYTES`` > 2 GiB."""
    if max_bytes is not None:
        if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
            raise UsageError(f"max_bytes must be a positive integer, got {max_bytes!r}")
        return max_bytes
    raw = os.environ.get(MAX_TRACE_BYTES_ENV)
    if raw:
        try:
            return parse_size(raw)
        except ValueError as exc:
            raise UsageError(f"environment variable {MAX_TRACE_BYTES_ENV}: {exc}") from None
    return DEFAULT_MAX_TRACE_BYTES


def _too_big(limit: int) -> str:
    return (
        f"trace is larger than {limit} bytes after decompression; raise the limit with "
        f"{MAX_TRACE_BYTES_ENV}=<bytes> (e.g. 8G) or the max_bytes argument"
    )


#: Bytes handed out per block by :func:`trace_blocks` (and read per step from a gzip file: 1 MiB).
BLOCK_BYTES = 8 * 1024**2
_READ_BYTES = 1024**2


def trace_blocks(path: Union[str, "os.PathLike[str]"], limit: int, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """The file's bytes in blocks of at most ``block_bytes``, decompressed when it is gzip (by its magic bytes).

    Multi-member gzip and trailing zero padding are read; past ``limit`` decompressed
    bytes, or on corrupt, truncated or trailing data, TraceFormatError names the file
    and the problem, so a decompression bomb never takes the machine down.
    """
    if not os.path.isdir(path):  # a FIFO or a device would block the read: refuse it first
        require_regular(path, error=TraceFormatError, missing_ok=True)
    try:
        with open(path, "rb") as handle:
            head = handle.read(2)
            if not head:
                raise TraceFormatError(path, "file is empty")
            handle.seek(0)
            if head == _GZIP_MAGIC:
                yield from _gunzip_blocks(path, handle, limit, block_bytes)
                return
            if os.fstat(handle.fileno()).st_size > limit:
                raise TraceFormatError(path, _too_big(limit))
            total = 0
            while True:
                block = handle.read(block_bytes)
                if not block:
                    return
                total += len(block)
                if total > limit:  # the file grew while it was read
                    raise TraceFormatError(path, _too_big(limit))
                yield block
    except TraceFormatError:
        raise
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory, not a trace file") from None
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read file: {exc.strerror or exc}") from None


def _gunzip_blocks(
    path: Union[str, "os.PathLike[str]"], handle: BinaryIO, limit: int, block_bytes: int
) -> Iterator[bytes]:
    decomp = zlib.decompressobj(wbits=31)
    pending = b""
    total = 0
    while True:
        if not pending:
            pending = handle.read(_READ_BYTES)
            if not pending:
                break
        if decomp.eof:  # a further member, or the zero padding some writers add
            pending = pending.lstrip(b"\0")
            if len(pending) < len(_GZIP_MAGIC):
                more = handle.read(_READ_BYTES)
                pending += more
                if more:
                    continue
                if not pending.strip(b"\0"):
                    break
            if not pending.startswith(_GZIP_MAGIC):
                raise TraceFormatError(path, "corrupt gzip data: unexpected bytes after the gzip stream")
            decomp = zlib.decompressobj(wbits=31)
        try:
            block = decomp.decompress(pending, block_bytes)
        except zlib.error as exc:
            raise TraceFormatError(path, f"corrupt gzip data: {exc}") from None
        pending = decomp.unconsumed_tail or decomp.unused_data
        total += len(block)
        if total > limit:
            raise TraceFormatError(path, _too_big(limit))
        if block:
            yield block
    if not decomp.eof:
        raise TraceFormatError(path, "truncated gzip stream (the file ends before the gzip end marker)")


def read_trace_bytes(path: Union[str, "os.PathLike[str]"], *, max_bytes: Optional[int] = None) -> bytes:
    """Return the decompressed bytes of a trace file, enforcing the size cap."""
    data = b"".join(trace_blocks(path, resolve_max_bytes(max_bytes)))
    if not data.strip():
        with open(path, "rb") as handle:
            gzipped = handle.read(2) == _GZIP_MAGIC
        raise TraceFormatError(path, "gzip content is empty" if gzipped else "file is empty")
    return data


#: ``{``/``}`` become ``[``/``]``; every byte but brackets and quotes is deleted (see :func:`nesting_depth`).
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))


def nesting_depth(data: bytes, limit: int = MAX_NESTING) -> int:
    """How deep the arrays and objects of the JSON text ``data`` nest, counted up to ``limit + 1``.

    Exact for valid JSON, and for a valid start of it (containers still open at the
    end count as closed there); some deterministic number for anything else.  Fast
    because it keeps only the structure: escapes go, every byte but brackets and
    quotes goes, string contents go (two adjacent quotes can be dropped whatever
    they close and open: nothing lies between them), then each pass of
    ``replace("[]", "")`` removes the innermost containers, one level a pass.
    """
    if b"\\" in data:  # escapes exist only inside strings: an escaped quote is no string end
        data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = data.translate(_BRACKETS, _NOT_STRUCTURE).replace(b'""', b"")
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])  # what lies outside strings
    still_open = marks.count(b"[") - marks.count(b"]")
    if still_open > 0:
        marks += b"]" * still_open
    depth = 0
    while marks and depth <= limit:
        inner = marks.replace(b"[]", b"")
        if len(inner) == len(marks):
            break
        marks = inner
        depth += 1
    return depth


def too_deep(limit: int = MAX_NESTING) -> str:
    """The problem of a trace that nests deeper than ``limit``, for :class:`TraceFormatError`."""
    return f"invalid JSON: nesting too deep (more than {limit} levels of arrays and objects; a Kineto trace has 7)"


def parse_trace_bytes(data: bytes, path: Union[str, "os.PathLike[str]"] = "<trace>") -> dict:
    """Parse decompressed trace bytes into the top-level trace object, validating its shape."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TraceFormatError(
            path, f"not UTF-8 text (invalid byte at offset {exc.start}); is it a gzip or JSON file?"
        ) from None
    if text.startswith("\ufeff"):
        text = text[1:]
    first = text.lstrip()[:1]
    if first not in ("{", "["):
        raise TraceFormatError(path, "not a gzip or JSON file (content does not start with '{')")
    if nesting_depth(data) > MAX_NESTING:
        raise TraceFormatError(path, too_deep())
    try:
        trace = loads_strict(text)
    except JSONProblem as exc:
        raise TraceFormatError(path, str(exc)) from None
    if not isinstance(trace, dict):
        raise TraceFormatError(
            path, f"top level is a JSON {type(trace).__name__}, expected an object with a traceEvents list"
        )
    if "traceEvents" not in trace:
        raise TraceFormatError(path, "no traceEvents key: not a Chrome/Kineto trace")
    events = trace["traceEvents"]
    if not isinstance(events, list):
        raise TraceFormatError(path, f"traceEvents is a JSON {type(events).__name__}, expected a list")
    for index, event in enumerate(events):
        if event.__class__ is not dict:
            raise TraceFormatError(path, f"traceEvents[{index}] is a JSON {type(event).__name__}, expected an object")
    return trace


def load_trace(path: Union[str, "os.PathLike[str]"], *, max_bytes: Optional[int] = None) -> dict:
    """Load a ``.json``/``.json.gz`` Chrome trace; raise TraceFormatError naming file and problem.

    Gzip is recognised by its magic bytes, not the file name, so a mis-named file
    still loads.  ``max_bytes`` caps the decompressed size (see module docstring).
    """
    return parse_trace_bytes(read_trace_bytes(path, max_bytes=max_bytes), path)
