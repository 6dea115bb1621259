"""The arguments of a ``graph_capture()`` call and of its markers, checked like options.

``graph_capture(ranks=..., timeout=...)``, ``@pytest.mark.graph_capture_ranks(n, timeout=...)``
and ``@pytest.mark.graph_capture_isolated(timeout=...)`` decide where a capture runs; a
value that does not fit is a :class:`~pytest_graphcapture.errors.UsageError` naming the
argument or the marker.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from ..errors import UsageError
from . import settings

RANKS = "graph_capture_ranks"
ISOLATED = "graph_capture_isolated"


def _marker_arguments(marker: Any, positional: Sequence[str]) -> dict[str, Any]:
    """A marker's arguments by name (``positional`` names its positional ones); UsageError naming what is not its own."""
    where = f"@pytest.mark.{marker.name}"
    if len(marker.args) > len(positional):
        takes = f"takes {', '.join(positional)} and timeout=" if positional else "takes only timeout="
        given = f"{len(marker.args)} positional argument{'s' if len(marker.args) > 1 else ''}"
        raise UsageError(f"{where}: {given} given; it {takes}")
    values = dict(zip(positional, marker.args))
    for name, value in marker.kwargs.items():
        if name not in (*positional, "timeout"):
            known = ", ".join(f"{p}=" for p in (*positional, "timeout"))
            raise UsageError(f"{where}: unknown argument {name}={value!r}; it takes {known}")
        if name in values:
            raise UsageError(f"{where}: {name} given twice")
        values[name] = value
    if values.get("timeout") is not None:
        values["timeout"] = settings.parse_seconds(values["timeout"], f"{where}(timeout=...)")
    return values


def _rank_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: the number of ranks must be a positive integer, got {value!r}")
    return value


def capture_arguments(
    ranks: Any, timeout: Any, ranks_marker: Any, isolated_marker: Any
) -> tuple[Optional[int], Optional[float], bool]:
    """``(ranks, timeout, isolated)`` of a ``graph_capture()`` call: its arguments, else the test's markers.

    Every argument is checked like an option (UsageError naming the argument or
    the marker), markers whether or not they decide anything here.
    """
    if ranks is not None:
        ranks = _rank_count(ranks, "graph_capture(ranks=...)")
    if timeout is not None:
        timeout = settings.parse_seconds(timeout, "graph_capture(timeout=...)")
    isolated = _marker_arguments(isolated_marker, ()) if isolated_marker is not None else None
    if ranks_marker is not None:
        values = _marker_arguments(ranks_marker, ("n",))
        if values.get("n") is None:
            raise UsageError(
                "@pytest.mark.graph_capture_ranks needs the number of ranks, e.g. @pytest.mark.graph_capture_ranks(2)"
            )
        count = _rank_count(values["n"], "@pytest.mark.graph_capture_ranks")
        if ranks is None:
            ranks = count
            timeout = timeout if timeout is not None else values.get("timeout")
    if ranks is None and isolated is not None and timeout is None:
        timeout = isolated.get("timeout")
    return ranks, timeout, isolated is not None
