"""The checks an event's fields get before a summary keeps them, and how messages name the event.

A summary writes kernel names, op names and input types into goldens, so each must
be Unicode text, and ``Input Dims``/``Input type`` must be what a profiler writes;
anything else is refused with a one-line :class:`~..errors.TraceEventError` that
names the event, rather than dropped or copied into a golden.
"""

from __future__ import annotations

import json
from typing import Any

from .._io import is_text
from ..errors import TraceEventError

_NUMBER_TYPES = (int, float)

#: ``args`` field absent (a JSON ``null`` is kept apart: it groups differently).
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()


def _parsed(value: Any) -> Any:
    """An args value as the stdlib parses it (the fast reader hands some over as JSON text)."""
    return json.loads(value) if value.__class__ is bytes else value


def _event(kind: str, name: Any, ts: Any) -> str:
    """How a message names an event: its kind, name and time, escaped to plain ASCII."""
    label = json.dumps(name) if name.__class__ is str else "?"
    if len(label) > 80:
        label = label[:77] + '..."'
    return f"{kind} event {label}" + (f" at ts {_short(ts)}" if ts.__class__ in _NUMBER_TYPES else "")


def _require_text(text: str, kind: str, name: Any, ts: Any, field: str) -> None:
    """A string a summary writes must be Unicode text: a lone surrogate escape (``\\ud800``) cannot be written."""
    if not is_text(text):
        raise TraceEventError(
            f"{_event(kind, name, ts)}: {field} holds a lone surrogate escape, which is not text "
            "(no profiler writes one) and no summary can hold"
        )


def _is_shape(value: Any) -> bool:
    """A list of integers, or of such lists (a tensor list): what Kineto records for one input."""
    if value.__class__ is not list:
        return False
    for item in value:
        if item.__class__ is not int and not _is_shape(item):
            return False
    return True


def _check_signature(name: str, ts: Any, dims: Any, types: Any) -> None:
    """Refuse ``Input Dims``/``Input type`` values no profiler writes, naming the event.

    Absent or null means "not recorded" and is kept; otherwise ``Input Dims`` is a list
    with one shape per input and ``Input type`` a list of strings.  Anything else (a
    string, a number, a float dimension) is refused rather than dropped or copied into
    a golden, where it would compare as a real shape.
    """
    try:
        dims, types = _parsed(dims), _parsed(types)
    except ValueError as exc:  # an integer with more digits than int() reads
        raise TraceEventError(f"{_event('cpu_op', name, ts)}: Input Dims or Input type does not parse: {exc}") from None
    if dims is not MISSING and dims is not None:
        if dims.__class__ is not list or not all(_is_shape(shape) for shape in dims):
            raise TraceEventError(
                f"{_event('cpu_op', name, ts)}: Input Dims is {_short(dims)}, expected a list with one shape "
                "(a list of integers, or of such lists) per input"
            )
    if types is not MISSING and types is not None:
        if types.__class__ is not list or not all(item.__class__ is str for item in types):
            raise TraceEventError(
                f"{_event('cpu_op', name, ts)}: Input type is {_short(types)}, expected a list of type names (strings)"
            )
        for item in types:
            _require_text(item, "cpu_op", name, ts, "Input type")


def _short(value: Any) -> str:
    """A value as JSON for a message, cut to a readable length."""
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."
