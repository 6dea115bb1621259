"""Reading a trace file's events in slices, so summarizing takes little memory however large the file.

Loading a whole trace holds the JSON text and every parsed event at once: about six
times the file's uncompressed size.  Here the gzip stream is read in blocks, the
``traceEvents`` array is cut into slices of whole events, each slice is parsed on its
own and handed to a :class:`~.collect.Collector`, and nothing of it is kept.

Cutting: a slice ends at a ``}`` followed by ``,`` and ``{`` (or by the array's
``]``).  Such a place can also lie inside an event (a nested object in a list) or a
string; a slice cut there does not parse, because ``[`` + slice + ``]`` is valid JSON
only when the cut falls between two elements of the array.  A slice that does not
parse is cut again at an earlier candidate, so every event is parsed exactly once,
whole.

Parsing: with `msgspec <https://jcristharif.com/msgspec/>`_ installed, each slice is
decoded into typed records holding only the fields a summary reads (``name``,
``cat``, ``ts``, ``dur``, ``tid``, ``pid`` and eight ``args`` fields, the op shapes left as JSON
text); every other field is checked as JSON and skipped without building Python objects.  That is several times
faster than ``json.loads``.  Without msgspec the stdlib parses the slices into dicts.

Anything unusual (a parse error in the file, an event that is not an object, a
non-object ``args``, a second ``traceEvents`` key, numbers outside the double range,
an event the collector refuses) raises :class:`Unusual`: the caller then reads the
file the whole-file way (:func:`~.tracefile.load_trace`), which either gives the same
events or the one-line error that names the problem.  The size cap is enforced here
as well.

Checked on every slice, because the fast parser skips the fields a summary does not
read without looking into them, and the verdict must not depend on which bytes a
parser looked at (or on the file's size): the slice is UTF-8 (overlong forms,
surrogates and code points above U+10FFFF refused, as the whole-file decode does),
holds no run of digits longer than ``int()`` reads (``sys.get_int_max_str_digits``),
and nests no deeper than :data:`~.tracefile.MAX_NESTING`.  A slice that fails a check
raises :class:`Unusual`, so the whole-file reader names the problem.
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Callable, Iterator, Optional, Union

from ..errors import TraceEventError
from . import records
from .collect import Collector
from .records import feed_records as _feed_records
from .tracefile import MAX_NESTING, nesting_depth, resolve_max_bytes, trace_blocks

try:  # the fast parser; the stdlib does the same work more slowly without it
    import msgspec
except ImportError:  # pragma: no cover - exercised by the tests through FAST_PARSER = False
    msgspec = None

#: Bytes of JSON per slice: big enough that per-slice costs vanish, small enough to keep memory low.
SLICE_BYTES = 8 * 1024**2

_WS = re.compile(rb"[ \t\n\r]*")

_BOM = b"\xef\xbb\xbf"


class Unusual(Exception):
    """The file needs the whole-file reader (which reports its problem, if it has one)."""


def fast_parser_name() -> str:
    """Which parser reads slices: ``msgspec <version>`` or ``json (stdlib)``."""
    return f"msgspec {msgspec.__version__}" if msgspec is not None else "json (stdlib)"


def _parse_slice_records(data: Any) -> Any:
    """The events of ``data`` (``[`` + slice + ``]``); else where trailing bytes start, or None."""
    try:
        return records.DECODER.decode(data)
    except msgspec.DecodeError as exc:
        trailing = _MSGSPEC_TRAILING.search(str(exc))
        return int(trailing.group(1)) - 1 if trailing else None  # msgspec counts bytes from 1
    except RecursionError:
        return None


#: msgspec's message when a value ends before the input does (the array closed inside the slice).
_MSGSPEC_TRAILING = re.compile(r"trailing characters \(byte (\d+)\)")


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _parse_slice_dicts(data: Any) -> Any:
    """Like :func:`_parse_slice_records`, with the stdlib parser (event dicts)."""
    try:
        text = str(data, "utf-8")
        events = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        return len(text[: exc.pos].encode("utf-8")) if exc.msg == "Extra data" else None
    except (ValueError, RecursionError):
        return None
    for event in events:
        if event.__class__ is not dict:
            raise Unusual("an event is not an object")
    return events


_DIGIT_MARKS = bytes.maketrans(b"0123456789", b"1" * 10)


def _long_digit_run(data: bytes) -> bool:
    """Whether ``data`` may hold an integer with more digits than ``int()`` reads (the stdlib parse refuses it).

    Any run of ``2 * step`` digits holds two sample points ``step`` apart, so only the
    stretches between neighbouring digit samples are looked at; a stretch of ``step + 1``
    digits counts as found (such a number is no profiler's, and a false alarm only sends
    the file to the whole-file reader).
    """
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
    """Raise :class:`Unusual` unless the JSON text ``data`` passes the checks every slice gets (module docstring).

    ``outer_levels``: the arrays and objects around ``data`` in the file.
    """
    raw = bytes(data)
    if not raw.isascii():
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise Unusual("invalid UTF-8") from None
    if _long_digit_run(raw):
        raise Unusual("a number with more digits than int() reads")
    if nesting_depth(raw) + outer_levels > MAX_NESTING:
        raise Unusual("nested too deep")


def _feed_checked(feed: Callable, collector: Collector, events: list) -> None:
    """``feed(collector, events)``; an event the collector refuses leaves the verdict to the whole-file reader.

    (A later part of the file may hold a problem the whole-file reader names first.)
    """
    try:
        feed(collector, events)
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
    path: Union[str, "os.PathLike[str]"],
    collector: Collector,
    *,
    max_bytes: Optional[int] = None,
    fast: Optional[bool] = None,
) -> dict:
    """Feed ``path``'s events to ``collector``; return the top-level object without ``traceEvents``.

    ``fast`` picks the slice parser (default: msgspec when installed).  Raises
    :class:`Unusual` when the file must be read whole (see the module docstring).
    """
    limit = resolve_max_bytes(max_bytes)
    if fast is None:
        fast = msgspec is not None
    if fast:
        parse: Callable[[bytes], Optional[list]] = _parse_slice_records
        feed: Callable[[Collector, list], None] = _feed_records
    else:
        parse, feed = _parse_slice_dicts, Collector.feed_dicts
    return _read_top(_Reader(trace_blocks(path, limit, SLICE_BYTES)), collector, parse, feed)


def _read_top(reader: _Reader, collector: Collector, parse: Callable, feed: Callable) -> dict:
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
            _read_events(reader, collector, parse, feed)
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

#: Near the end of the file, the last bytes are kept out of the first cut: the top-level fields after
#: ``traceEvents`` (device lists, metadata) hold ``},{`` too, and a cut there would not parse.
_TAIL_RESERVE = 256 * 1024


def _read_events(reader: _Reader, collector: Collector, parse: Callable, feed: Callable) -> None:
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
            # "[" + slice + "]" without copying: the bytes around the slice are already consumed
            # (the array's "[" or the "," before it) or are the "," / blank / "]" after it.
            before, behind = buf[start - 1], buf[cut + 1]
            buf[start - 1], buf[cut + 1] = 0x5B, 0x5D
            data = memoryview(buf)[start - 1 : cut + 2]
            events = parse(data)
            close = 0
            if events.__class__ is int:  # the array closed inside the slice: parse up to its "]"
                close = _last_bracket(data, events)
                events = parse(data[: close + 1]) if close else None
            if events.__class__ is list:
                _check_text(data[: close + 1] if close else data, 1)  # the array is inside the top-level object
            buf[start - 1], buf[cut + 1] = before, behind
            if close:
                if events.__class__ is not list:
                    raise Unusual("the end of the events does not parse")
                _feed_checked(feed, collector, events)
                reader.pos = start + close  # data[i] is buf[start - 1 + i]
                return
            if events is None:
                attempts += 1
                if attempts >= _ATTEMPTS:
                    raise Unusual("a slice of events does not parse")
                continue
            _feed_checked(feed, collector, events)
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
