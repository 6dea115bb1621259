"""What the ``graphcapture`` command prints reaches a terminal: control characters are shown, never obeyed.

Kernel names, op names, file names and error texts come from traces and folders
anyone can write.  Printed raw, an escape sequence in one of them recolours the
terminal, rewrites its title (OSC), moves the cursor over earlier lines, or — with
the bidirectional-text controls — shows characters in another order than they are
stored.  :func:`printable` turns each such character into a visible escape
(``\\u001b``); :func:`escaped_output` routes everything the command writes to
stdout and stderr through it, so no printer can forget to.

The escape is JSON's own spelling, so the JSON ``graphcapture summarize`` prints
stays valid JSON meaning the same strings (JSON already escapes C0 controls this
way; C1 controls and bidi controls it leaves raw).  Files the command writes
(``--out``, ``--html``) are data, not terminal output, and are left as they are.

Standard output goes straight to its file descriptor, every byte or an error
(:class:`_WholeWrites`): Python's buffered writer keeps quiet about a write the
pipe took only part of (the reader left mid-write, ``| head -1``) and drops the
rest, so the command would exit 0 having printed a fraction of its answer.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator, TextIO

#: Characters that steer a terminal rather than show: C0 controls but newline and tab, DEL, C1
#: controls (U+0080-U+009F, among them the one-character CSI), and the bidirectional-text
#: embeddings, overrides and isolates, which reorder what is shown.
_STEERING = [*(c for c in range(0x20) if chr(c) not in "\n\t"), *range(0x7F, 0xA0), *range(0x202A, 0x202F)]
_STEERING += [*range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C]
_ESCAPES = {code: f"\\u{code:04x}" for code in _STEERING}


def printable(text: str) -> str:
    """``text`` with every terminal-steering character written as a visible ``\\uXXXX`` escape."""
    return text.translate(_ESCAPES)


class _Printable:
    """A text stream that writes :func:`printable` text to the stream it wraps (anything else: delegated)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(printable(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _WholeWrites:
    """A text stream writing straight to ``stream``'s file descriptor until every byte is out.

    A short write is followed by another, so a reader that left ends the command in
    ``BrokenPipeError`` (the command's exit code 141), never in output silently cut.
    """

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._fd = stream.fileno()

    def write(self, text: str) -> int:
        data = memoryview(text.encode(self._stream.encoding or "utf-8", self._stream.errors or "strict"))
        while data:
            data = data[os.write(self._fd, data) :]
        return len(text)

    def flush(self) -> None:
        """Nothing is held back: every write went out whole."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _whole_writes(stream: TextIO) -> Any:
    """``stream`` as :class:`_WholeWrites` where it is a real file on POSIX; as it is otherwise (captured in-process)."""
    if os.name != "posix":  # text-mode newline translation is the stream's own there
        return stream
    try:
        stream.flush()
        stream.fileno()
    except (AttributeError, OSError, ValueError):
        return stream
    return _WholeWrites(stream)


@contextlib.contextmanager
def escaped_output() -> Iterator[None]:
    """While inside: ``sys.stdout`` and ``sys.stderr`` print control characters as escapes, stdout in whole writes."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Printable(_whole_writes(sys.stdout)), _Printable(sys.stderr)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved
