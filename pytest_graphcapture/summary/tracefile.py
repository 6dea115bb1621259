"""Trace files (``.json``/``.json.gz``) read safely: whole, or in slices of events with bounded memory.
Every way a file can be wrong ends in one line naming the file and the problem."""

from __future__ import annotations

import json
import os
import re
import sys
import zlib
from typing import Any, BinaryIO, Iterator, Optional, Union

import msgspec

from .._io import JSONProblem, loads_strict, require_regular
from ..errors import TraceEventError, TraceFormatError, UsageError
from .collect import DECODER, Collector, feed_records

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
_BLOCK_BYTES = 8 * 1024**2

_READ_BYTES = 1024**2


def trace_blocks(path: Union[str, "os.PathLike[str]"], limit: int, block_bytes: int = _BLOCK_BYTES) -> Iterator[bytes]:
    """The file's bytes in blocks of at most ``block_bytes``, decompressed when it is gzip (by its magic bytes)."""
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


#: ``{``/``}`` become ``[``/``]``; every byte but brackets and quotes is deleted (see :func:`_nesting_depth`).
_BRACKETS = bytes.maketrans(b"{}", b"[]")

_NOT_STRUCTURE = bytes(sorted(set(range(256)) - set(b'[]{}"')))


def _nesting_depth(data: bytes, limit: int = MAX_NESTING) -> int:
    """How deep the arrays and objects of the JSON text ``data`` nest, counted up to ``limit + 1``."""
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


def _parse_trace_bytes(data: bytes, path: Union[str, "os.PathLike[str]"] = "<trace>") -> dict:
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
    if _nesting_depth(data) > MAX_NESTING:
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
    """Load a ``.json``/``.json.gz`` Chrome trace; raise TraceFormatError naming file and problem."""
    return _parse_trace_bytes(read_trace_bytes(path, max_bytes=max_bytes), path)


#: Bytes of JSON per slice: big enough that per-slice costs vanish, small enough to keep memory low.
SLICE_BYTES = 8 * 1024**2

_WS = re.compile(rb"[ \t\n\r]*")

_BOM = b"\xef\xbb\xbf"


class Unusual(Exception):
    """The file needs the whole-file reader (which reports its problem, if it has one)."""


def fast_parser_name() -> str:
    """Which parser reads slices: ``msgspec <version>``."""
    return f"msgspec {msgspec.__version__}"


def _parse_slice(data: Any) -> Any:
    """The events of ``data`` (``[`` + slice + ``]``); else where trailing bytes start, or None."""
    try:
        return DECODER.decode(data)
    except msgspec.DecodeError as exc:
        trailing = _MSGSPEC_TRAILING.search(str(exc))
        return int(trailing.group(1)) - 1 if trailing else None  # msgspec counts bytes from 1
    except RecursionError:
        return None


#: msgspec's message when a value ends before the input does (the array closed inside the slice).
_MSGSPEC_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


_DIGIT_MARKS = bytes.maketrans(b"0123456789", b"1" * 10)


def _long_digit_run(data: bytes) -> bool:
    """Whether ``data`` may hold an integer with more digits than ``int()`` reads (the stdlib parse refuses it)."""
    digits = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 0
    if not digits:
        return False
    step = (digits + 1) // 2
    samples = data[::step].translate(_DIGIT_MARKS)
    at = samples.find(b"11")
    while at >= 0:
        if data[at * step : (at + 1) * step + 1].isdigit():
            return True
        at = samples.find(b"11", at + 1)
    return False


def _check_text(data: Any, outer_levels: int) -> None:
    """Raise :class:`Unusual` unless the JSON text ``data`` passes the checks every slice gets (module docstring)."""
    raw = bytes(data)
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Unusual("invalid UTF-8") from None
    if _long_digit_run(raw):
        raise Unusual("a number with more digits than int() reads")
    if _nesting_depth(raw) + outer_levels > MAX_NESTING:
        raise Unusual("nested too deep")


def _feed_checked(collector: Collector, events: list) -> None:
    """Feed ``events``; an event the collector refuses leaves the verdict to the whole-file reader."""
    try:
        feed_records(collector, events)
    except TraceEventError:
        raise Unusual("an event the collector refuses") from None


class _Reader:
    """A growing window over the blocks, with JSON token helpers for the top level."""

    def __init__(self, blocks: Iterator[bytes]) -> None:
        self._blocks = blocks
        self.buf = bytearray()  # mutable: a slice is bracketed in place (see _read_events)
        self.pos = 0
        self.eof = False

    def fill(self, wanted: int) -> bool:
        """Make ``wanted`` bytes available after ``pos`` if the file has them; False at the end."""
        if len(self.buf) - self.pos >= wanted:
            return True
        keep = 1 if self.pos else 0  # the byte before pos stays: _read_events brackets a slice with it
        parts = [memoryview(self.buf)[self.pos - keep :]]
        have = len(parts[0]) - keep
        while have < wanted:
            block = next(self._blocks, None)
            if block is None:
                self.eof = True
                break
            parts.append(block)
            have += len(block)
        self.buf = bytearray().join(parts)
        self.pos = keep
        return have >= wanted

    def skip_ws(self) -> int:
        """Skip whitespace; the next byte (-1 at the end of the file)."""
        while True:
            self.pos = _WS.match(self.buf, self.pos).end()
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self.fill(1):
                return -1

    def value(self) -> Any:
        """Parse one JSON value at ``pos`` with the stdlib (top-level values are small)."""
        size = 64 * 1024
        decoder = json.JSONDecoder(parse_constant=_reject_constant)
        while True:
            self.fill(size)
            window = self.buf[self.pos : self.pos + size]
            try:
                text = window.decode("utf-8")
            except UnicodeDecodeError as exc:
                if exc.start < len(window) - 3 or self.eof:
                    raise Unusual("invalid UTF-8") from None
                text = window[: exc.start].decode("utf-8")
            try:
                value, end = decoder.raw_decode(text)
            except (ValueError, RecursionError):
                if self.eof and len(self.buf) - self.pos <= size:
                    raise Unusual("invalid JSON at the top level") from None
                size *= 4
                continue
            if end == len(text) and not self.eof:  # a number may go on past the window
                size *= 4
                continue
            used = text[:end].encode("utf-8")
            _check_text(used, 1)  # inside the top-level object
            self.pos += len(used)
            return value


def stream_trace(
    path: Union[str, "os.PathLike[str]"], collector: Collector, *, max_bytes: Optional[int] = None
) -> dict:
    """Feed ``path``'s events to ``collector`` in slices; return the top-level object without ``traceEvents``."""
    return _read_top(_Reader(trace_blocks(path, resolve_max_bytes(max_bytes), SLICE_BYTES)), collector)


def _read_top(reader: _Reader, collector: Collector) -> dict:
    reader.fill(len(_BOM))
    if reader.buf.startswith(_BOM):
        reader.pos = len(_BOM)
    if reader.skip_ws() != ord("{"):
        raise Unusual("the top level is not an object")
    reader.pos += 1
    top: dict = {}
    seen_events = False
    first = True
    while True:
        byte = reader.skip_ws()
        if byte == ord("}") and first:
            break
        if byte != ord('"'):
            raise Unusual("expected a key")
        key = reader.value()
        if reader.skip_ws() != ord(":"):
            raise Unusual("expected ':'")
        reader.pos += 1
        if key == "traceEvents" and reader.skip_ws() == ord("["):
            if seen_events:
                raise Unusual("a second traceEvents key")
            seen_events = True
            reader.pos += 1
            _read_events(reader, collector)
        else:
            reader.skip_ws()
            top[key] = reader.value()
            if key == "traceEvents":
                raise Unusual("traceEvents is not a list")
        first = False
        byte = reader.skip_ws()
        if byte == ord(","):
            reader.pos += 1
            continue
        if byte == ord("}"):
            break
        raise Unusual("expected ',' or '}'")
    reader.pos += 1
    if reader.skip_ws() != -1:
        raise Unusual("data after the top-level object")
    if not seen_events:
        raise Unusual("no traceEvents list")
    return top


#: Cuts tried per slice before the file is left to the whole-file reader.
_ATTEMPTS = 4

#: Kept out of the first cut near the end: the top-level fields after ``traceEvents`` hold ``},{`` too.
_TAIL_RESERVE = 256 * 1024


def _read_events(reader: _Reader, collector: Collector) -> None:
    """Parse the ``traceEvents`` array from ``reader.pos`` (just after ``[``) through its ``]``."""
    if reader.skip_ws() == ord("]"):
        reader.pos += 1
        return
    while True:
        reader.fill(SLICE_BYTES)
        buf, start = reader.buf, reader.pos
        size = len(buf)
        reserved = reader.eof and size - start > 2 * _TAIL_RESERVE
        limit = size - _TAIL_RESERVE if reserved else size
        attempts = 0
        while True:
            cut = buf.rfind(b"}", start, limit)
            if cut < 0:
                if reserved and not attempts:
                    reserved, limit = False, size  # the reserve held the only candidates
                    continue
                if reader.eof or attempts:
                    raise Unusual("no complete event")
                reader.fill(2 * (size - start) + 1)  # one event longer than a slice: read on
                break
            limit = cut
            after = _WS.match(buf, cut + 1).end()
            if after >= size:
                continue
            closing = buf[after] == 0x5D  # "]"
            if not closing:
                if buf[after] != 0x2C:  # ","
                    continue
                following = _WS.match(buf, after + 1).end()
                if following >= size or buf[following] != 0x7B:  # "{"
                    continue
            # "[" + slice + "]" in place: the bytes around the slice are consumed or are the separator after it.
            before, behind = buf[start - 1], buf[cut + 1]
            buf[start - 1], buf[cut + 1] = 0x5B, 0x5D
            data = memoryview(buf)[start - 1 : cut + 2]
            events = _parse_slice(data)
            close = 0
            if events.__class__ is int:  # the array closed inside the slice: parse up to its "]"
                close = _last_bracket(data, events)
                events = _parse_slice(data[: close + 1]) if close else None
            if events.__class__ is list:
                _check_text(data[: close + 1] if close else data, 1)  # the array is inside the top-level object
            buf[start - 1], buf[cut + 1] = before, behind
            if close:
                if events.__class__ is not list:
                    raise Unusual("the end of the events does not parse")
                _feed_checked(collector, events)
                reader.pos = start + close  # data[i] is buf[start - 1 + i]
                return
            if events is None:
                attempts += 1
                if attempts >= _ATTEMPTS:
                    raise Unusual("a slice of events does not parse")
                continue
            _feed_checked(collector, events)
            del events
            if closing:
                reader.pos = after + 1
                return
            reader.pos = following
            break


def _last_bracket(data: Any, trailing: int) -> int:
    """Index of the ``]`` before ``trailing`` (whitespace between), 0 if there is none."""
    end = trailing - 1
    while end > 0 and data[end] in _BLANKS:
        end -= 1
    return end if end > 0 and data[end] == 0x5D else 0


_BLANKS = b" \t\n\r"
