"""Every file name the plugin writes or reads back (traces, goldens, their folders): one owner, so writer and reader agree.

User-supplied parts go through :func:`keys.safe_name`; dot-files are writes in progress (:func:`is_hidden`).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Optional, Sequence, Union

from .errors import TraceFormatError
from .keys import UNKNOWN_BATCH_SIZE, CaptureKey, is_int, safe_name

PathLike = Union[str, "os.PathLike[str]"]

TRACE_SUBDIR = "graph_capture_profile"
_TRACE_SUFFIXES = (".json", ".json.gz")
GOLDEN_SUFFIX = ".json"
#: The full failure text a check writes beside the summaries it harvests with --golden-out.
HARVEST_DIFF_NAME = "diff.txt"
#: The kernel × batch-size picture, written into the harvest when the report cannot link a file beside it.
HARVEST_PICTURE_NAME = "picture.html"
#: The golden tree's setting, shared by the plugin's option and ``graphcapture accept``.
GOLDEN_DIR_OPTION = "--golden-dir"
GOLDEN_DIR_ENV = "GRAPH_CAPTURE_GOLDEN_DIR"
GOLDEN_DIR_DEFAULT = "goldens"


def is_merged_trace(path: PathLike) -> bool:
    """A merged multi-rank trace an older release wrote: readers of a folder skip it (it repeats its ranks' traces)."""
    return Path(path).name.endswith(tuple(f"{sep}merged{suffix}" for sep in "_-" for suffix in _TRACE_SUFFIXES))


def is_hidden(path: PathLike) -> bool:
    """Dot-files: temp files of atomic writes, never inputs."""
    return Path(path).name.startswith(".")


def setting_path(
    value: str, source: str, *, invocation_dir: PathLike, inipath: Optional[PathLike], rootdir: PathLike
) -> Path:
    """The absolute path a setting's ``value`` names, by pytest's rule for its ``source``: ``~`` expanded, and relative
    to the invocation directory (option, environment), the ini file's directory (``ini …``) or the rootdir (default)."""
    path = Path(os.path.expanduser(value))
    if not path.is_absolute():
        if source == "default":
            path = Path(rootdir) / path
        elif source.startswith("ini"):
            path = (Path(inipath).parent if inipath else Path(rootdir)) / path
        else:
            path = Path(invocation_dir) / path
    return Path(os.path.abspath(path))


# --------------------------------------------------------------------------- traces


def trace_dir(base_dir: PathLike, group: Optional[str] = None) -> Path:
    """``<graph-capture-dir>/graph_capture_profile/[<group>/]``: where every trace is written.

    Each ``/``-separated component of ``group`` is :func:`safe_name`'d, so it cannot leave the trace folder."""
    folder = Path(base_dir) / TRACE_SUBDIR
    if not group:
        return folder
    return folder.joinpath(*(safe_name(part) for part in str(group).split("/") if part))


def trace_group_for(nodeid: str, capture: int = 1) -> str:
    """The trace folder of test ``nodeid``, as its golden folder (unique per test); its ``capture``-th capture from 2 in
    ``<capture>/``, so no trace overwrites another."""
    parts = nodeid_components(nodeid) + ([str(capture)] if capture > 1 else [])
    return "/".join(parts)


def key_stem(key: CaptureKey) -> str:
    """File stem of a key without the rank: ``{runner}_bs_{bs}[_{variant}]``."""
    parts = [safe_name(key.runner), "bs", str(key.batch_size)]
    if key.variant is not None:
        parts.append(safe_name(key.variant_name))
    return "_".join(parts)


def trace_file_name(key: CaptureKey) -> str:
    """Per-bs trace file name: ``{runner}_bs_{bs}[_{variant}]_rank{rank}.json.gz``."""
    return f"{key_stem(key)}_rank{key.rank}.json.gz"


def per_bs_trace_path(base_dir: PathLike, key: CaptureKey, group: Optional[str] = None) -> Path:
    """:func:`trace_file_name` under :func:`trace_dir`."""
    return trace_dir(base_dir, group) / trace_file_name(key)


def _single_trace_name(runner: str, rank: int) -> str:
    """``cuda_graph_capture-{runner}-TP-{rank}.json.gz``: the one trace of a single-mode capture."""
    return f"cuda_graph_capture-{safe_name(runner)}-TP-{rank}.json.gz"


def single_trace_path(base_dir: PathLike, runner: str, rank: int, group: Optional[str] = None) -> Path:
    """:func:`_single_trace_name` under :func:`trace_dir`."""
    return trace_dir(base_dir, group) / _single_trace_name(runner, rank)


def is_trace_path(path: PathLike) -> bool:
    """Whether ``path`` is named like a trace file (``.json`` or ``.json.gz``)."""
    return Path(path).name.endswith(_TRACE_SUFFIXES)


def trace_stem(path: PathLike) -> str:
    """File name without ``.json.gz`` / ``.json`` / ``.gz``."""
    name = Path(path).name
    for suffix in (".json.gz", ".json", ".gz"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


#: The variant is all of sglang's tag after the size (``candidate_all_nolora_stream_1``): every part of it keys.
_KEY_NAME = re.compile(r"^(?:(?P<runner>.+?)_)?bs_(?P<bs>\d+)(?:_(?P<variant>.+?))?_rank(?P<rank>\d+)$")
#: The runner of a ``bs_{bs}_rank{r}`` trace (TraceLens's sglang 0.5.13 patch): the class that writes it.
UNNAMED_RUNNER = "CudaGraphRunner"
_BS_TOKEN = re.compile(r"(?:^|[^A-Za-z0-9])bs[_=](\d+)(?![0-9])")
_BS_ANNOTATION = re.compile(r"(?:^|[^A-Za-z0-9])bs\s*[=_:]\s*(\d+)(?![0-9])|^capture_(\d+)(?:_|$)")
#: A longer number in an annotation is no batch size (and may hold more digits than ``int()`` reads).
_MAX_BS_DIGITS = 18
_RANK_TOKEN = re.compile(r"(?:^|[^A-Za-z0-9])rank_?(\d+)(?![0-9])")


def key_from_trace_name(
    path: PathLike,
    annotations: Sequence[str] = (),
    trace: Optional[dict] = None,
    *,
    batch_size: Optional[int] = None,
    unknown_ok: bool = False,
) -> CaptureKey:
    """Capture key from a trace file name (``[{runner}_]bs_{bs}[_{variant}]_rank{r}.json.gz``), else from its parts.

    Other names: runner = stem; batch size from a ``bs_N`` token, else annotations (``bs=32``, ``capture_32_DECODE``);
    rank from ``rankN`` or ``distributedInfo``. ``batch_size`` overrides; ``unknown_ok``: ``bs=?`` instead of an error."""
    if batch_size is not None:
        found = key_from_trace_name(path, annotations, trace, unknown_ok=True)
        return CaptureKey(found.runner, batch_size, found.variant, found.rank)
    stem = trace_stem(path)
    match = _KEY_NAME.match(stem)
    if match:
        runner = match.group("runner") or UNNAMED_RUNNER
        return CaptureKey(runner, int(match.group("bs")), match.group("variant"), int(match.group("rank")))
    token = _BS_TOKEN.search(stem)
    batch: Optional[int] = int(token.group(1)) if token else None
    if batch is None:
        found = set()
        for name in annotations:
            for m in _BS_ANNOTATION.finditer(name):
                digits = m.group(1) or m.group(2)
                if len(digits) <= _MAX_BS_DIGITS:
                    found.add(int(digits))
        if len(found) > 1 and not unknown_ok:
            raise TraceFormatError(
                path, f"annotations name several batch sizes {sorted(found)}; pass the key explicitly"
            )
        batch = found.pop() if len(found) == 1 else None
    if (batch is None or batch < 1) and unknown_ok:
        batch = UNKNOWN_BATCH_SIZE
    elif batch is None or batch < 1:
        raise TraceFormatError(
            path,
            "cannot tell the batch size: name the file {runner}_bs_{bs}_rank{r}.json.gz "
            "or record an annotation like 'bs=32' (graphcapture: --batch-size N)",
        )
    rank_match = _RANK_TOKEN.search(stem)
    rank = int(rank_match.group(1)) if rank_match else None
    if rank is None and trace is not None and isinstance(trace.get("distributedInfo"), dict):
        dist_rank = trace["distributedInfo"].get("rank")
        rank = dist_rank if is_int(dist_rank) and dist_rank >= 0 else None
    return CaptureKey(stem, batch, None, rank or 0)


# --------------------------------------------------------------------------- goldens


def golden_file_name(key: CaptureKey, *, explicit_rank: bool = False) -> str:
    """``<runner>_bs_<bs>[_<variant>].json``, with ``_rank<r>`` when rank != 0 or ``explicit_rank``."""
    rank = f"_rank{key.rank}" if key.rank or explicit_rank else ""
    return f"{key_stem(key)}{rank}{GOLDEN_SUFFIX}"


def nodeid_components(nodeid: str) -> list[str]:
    """Path components of a test ``nodeid`` below the platform folder, each :func:`safe_name`'d (nothing escapes).

    ``tests/test_x.py::TestA::test_b[ü/1]`` → ``["tests", "test_x.py", "TestA", "test_b_u_1-<hash>"]``."""
    module, sep, rest = str(nodeid).partition("::")
    # A module part with no usable component (only separators or dots) still gets a folder of its own.
    parts = [safe_name(p) for p in module.replace("\\", "/").split("/") if p not in ("", ".")] or [safe_name(module)]
    if sep:
        head, bracket, params = rest.partition("[")
        names = [n for n in head.split("::") if n]
        if not names:
            names = [""]
        names[-1] = names[-1] + bracket + params
        parts.extend(safe_name(n) for n in names)
    return parts
