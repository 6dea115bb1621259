"""Summaries of files on disk: capture traces (with an optional replay trace), graph dumps and summary JSON files."""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import Optional, Union

from .._io import JSONProblem, gc_paused, loads_strict, require_regular
from ..errors import TraceEventError, TraceFormatError
from ..keys import CaptureKey
from ..naming import key_from_trace_name
from .dot import is_dump_name
from .model import Summary
from .normalize import DEFAULT_LEVEL, check_level
from .platform import environment_from_trace, platform_from_trace
from .replay import with_replay
from .scan import _build, _Scan, _scan
from .stream import Unusual, stream_trace
from .tracefile import load_trace
from .validate import summary_from_dict

#: The top-level field of a merged multi-rank trace (``graphcapture merge``) that describes the merge.
MERGED_FIELD = "graphcapture_merged"

#: The field of :data:`MERGED_FIELD` that says the ranks' correlation ids were made rank-unique.
MERGED_CORRELATION = "correlation"


#: How a graph dump starts (after a byte-order mark, white space and comments): Graphviz's graph header.
_DOT_START = re.compile(rb"(?:\xef\xbb\xbf)?(?:\s+|//[^\n]*|/\*.*?\*/|#[^\n]*)*(?:strict\s+)?(?:di)?graph\b", re.DOTALL)


def is_graph_dump(path: Union[str, Path]) -> bool:
    """Whether ``path`` is a graph dump (DOT): named ``.dot``/``.gv`` (maybe ``.gz``), or a file that starts like one.

    A trace is JSON and a summary is JSON; a DOT file starts with ``digraph``, so
    whatever its name, it is read as the graph dump it is.  A file that cannot be
    read here is left to the reader that names the problem.
    """
    if is_dump_name(path):
        return True
    if not Path(path).is_file():  # a FIFO or a device would block the read: the reader refuses them
        return False
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
        if head[:2] == b"\x1f\x8b":
            with gzip.open(path, "rb") as handle:
                head = handle.read(4096)
    except (OSError, EOFError, zlib.error):
        return False
    return _DOT_START.match(head) is not None


def collect_trace_file(path: Union[str, Path], *, max_bytes: Optional[int] = None) -> tuple[_Scan, dict]:
    """The collected events of a trace file and its top-level fields, read in slices (bounded memory).

    A file the slice reader cannot take as it is (see :mod:`.stream`) is read whole,
    which gives the same events, or the one-line error naming what is wrong with it
    (an event the collector refuses included: the slice reader leaves those to it).
    """
    scan = _Scan()
    try:
        top = stream_trace(path, scan, max_bytes=max_bytes)
    except Unusual:
        trace = load_trace(path, max_bytes=max_bytes)
        _refuse_colliding_ranks(path, trace)
        try:
            return _scan(trace["traceEvents"]), trace
        except TraceEventError as exc:
            raise TraceFormatError(path, str(exc)) from None
    _refuse_colliding_ranks(path, top)
    return scan, top


def _refuse_colliding_ranks(path: Union[str, Path], top: dict) -> None:
    """Refuse a merged trace whose ranks share correlation ids: kernels would join another rank's launches."""
    merged = top.get(MERGED_FIELD)
    if isinstance(merged, dict) and MERGED_CORRELATION not in merged:
        raise TraceFormatError(
            path,
            "merged by an older graphcapture merge, which kept each rank's own correlation ids, so a kernel "
            "cannot be told from another rank's; merge the rank traces again (graphcapture merge DIR)",
        )


def summarize_trace_file(
    path: Union[str, Path],
    *,
    key: Optional[CaptureKey] = None,
    level: str = DEFAULT_LEVEL,
    replay_path: Union[str, Path, None] = None,
    max_bytes: Optional[int] = None,
    batch_size: Optional[int] = None,
    unknown_batch_size_ok: bool = False,
) -> Summary:
    """Summarize a ``.json``/``.json.gz`` trace file, optionally with the graph's replay trace.

    Without ``key`` the key comes from the file name and the trace
    (:func:`~pytest_graphcapture.naming.key_from_trace_name`, given ``batch_size`` and
    ``unknown_batch_size_ok``).
    """
    check_level(level)
    with gc_paused():
        scan, trace = collect_trace_file(path, max_bytes=max_bytes)
        if key is None:
            key = key_from_trace_name(
                path, scan.annotations, trace, batch_size=batch_size, unknown_ok=unknown_batch_size_ok
            )
        summary = _build(scan, key, platform_from_trace(trace), level, environment_from_trace(trace))
        del trace, scan
        replay = None
        if replay_path is not None:
            replay = collect_trace_file(replay_path, max_bytes=max_bytes)[0].replay_kernels()
    if replay is not None:
        summary = with_replay(summary, replay)
    return summary


def load_summary_file(path: Union[str, Path]) -> Summary:
    """Read a summary JSON file written by :meth:`Summary.to_json`."""
    require_regular(path, error=TraceFormatError)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFormatError(path, f"cannot read summary: {exc}") from None
    try:
        data = loads_strict(text)
    except JSONProblem as exc:
        raise TraceFormatError(path, str(exc)) from None
    return summary_from_dict(data, str(path))
