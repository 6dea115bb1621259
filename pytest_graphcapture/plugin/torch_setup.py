"""Importing torch early (so warnings as errors cannot break its import) and placing it on the right GPU."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import sys
import warnings
from typing import Optional

import pytest

from ..errors import UsageError

TORCH_WARNINGS = pytest.StashKey[list]()
_PYTESTER_FIXTURES = frozenset({"pytester", "testdir"})


def _warnings_are_errors(config: pytest.Config) -> bool:
    """Whether any warning filter of this run (``-W``, ``PYTHONWARNINGS``, ini) turns warnings into errors."""
    filters = list(sys.warnoptions)
    filters += list(getattr(config.known_args_namespace, "pythonwarnings", None) or [])
    try:
        filters += list(config.getini("filterwarnings") or [])
    except ValueError:  # the warnings plugin is disabled (-p no:warnings)
        pass
    return any(str(f).strip().startswith("error") for f in filters)


def import_torch_early(config: pytest.Config) -> None:
    """Import torch now, its import-time warnings recorded, where warnings are errors and torch is not yet imported."""
    if "torch" in sys.modules or not _warnings_are_errors(config) or importlib.util.find_spec("torch") is None:
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import torch  # noqa: F401
        except Exception as exc:  # torch's own failure: one line, not a traceback through torch's import
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise UsageError(f"graph-capture: importing torch failed: {type(exc).__name__}: {first}") from None
    messages: list[str] = []
    for item in caught:
        if issubclass(item.category, UserWarning) and str(item.message) not in messages:
            messages.append(str(item.message))
    config.stash[TORCH_WARNINGS] = messages


def torch_warning_lines(config: pytest.Config) -> list[str]:
    """Terminal lines for the warnings torch gave while :func:`import_torch_early` imported it."""
    return [
        f"graph-capture: torch warned while being imported (kept a warning so -W error cannot break torch): {m}"
        for m in config.stash.get(TORCH_WARNINGS, [])
    ]


def before_test(item: pytest.Item) -> None:
    """Before a test requesting ``pytester``: load torch's lazily imported profiler modules (docs/troubleshooting.md).

    pytester drops what an in-process run imported, and torch cannot register its operator libraries twice.
    """
    if _PYTESTER_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
        return
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return
    from ..engine.profiling import load_lazy_profiler_modules

    load_lazy_profiler_modules()


# The logger of torch's structured compile trace: machine records for tlparse, not log lines for people.
_TORCH_TRACE_LOGGER = "torch.__trace"
_PYTEST_LOG_HANDLERS = ("report_handler", "caplog_handler", "log_file_handler", "log_cli_handler")


def _not_torch_trace(record: logging.LogRecord) -> bool:
    return record.name != _TORCH_TRACE_LOGGER and not record.name.startswith(_TORCH_TRACE_LOGGER + ".")


def keep_torch_trace_out_of_logs(config: pytest.Config) -> None:
    """Keep torch's structured-trace records out of pytest's captured logs (hundreds of empty DEBUG lines).

    A filter on pytest's own handlers, not on torch's logger: a ``TORCH_TRACE`` file still gets every record.
    """
    plugin = config.pluginmanager.get_plugin("logging-plugin")
    for name in _PYTEST_LOG_HANDLERS:
        handler = getattr(plugin, name, None)
        if isinstance(handler, logging.Handler) and _not_torch_trace not in handler.filters:
            handler.addFilter(_not_torch_trace)


def gpu_missing_reason() -> Optional[str]:
    """Why a ``gpu``-marked test is skipped here, or None when torch sees a GPU."""
    import torch

    if torch.cuda.is_available():
        return None
    build = "ROCm" if getattr(torch.version, "hip", None) else ("CUDA" if torch.version.cuda else "CPU-only")
    return (
        f"needs a CUDA or ROCm GPU: torch.cuda.is_available() is False (torch {torch.__version__}, "
        f"{build} build); run on a GPU runner to include this test"
    )


def pin_worker_gpu(worker_id: str, environ: Optional[dict] = None) -> Optional[str]:
    """Pin xdist worker ``gwN`` to visible device ``N mod count``; returns what was done (None: no device).

    Narrows ``*_VISIBLE_DEVICES`` when set, else sets ``CUDA_VISIBLE_DEVICES`` (or the device once CUDA is up).
    """
    environ = os.environ if environ is None else environ
    match = re.fullmatch(r"gw(\d+)", worker_id or "")
    if match is None:
        return None
    n = int(match.group(1))
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        value = environ.get(var)
        if value is not None and value.strip():
            devices = [d.strip() for d in value.split(",") if d.strip()]
            chosen = devices[n % len(devices)]
            environ[var] = chosen
            return f"{var}={chosen}"
    import torch

    count_nvml = getattr(torch.cuda, "_device_count_amdsmi" if torch.version.hip else "_device_count_nvml", None)
    count = count_nvml() if callable(count_nvml) else -1
    via_runtime = count < 0
    if via_runtime:
        count = torch.cuda.device_count()
    if count <= 0:
        return None
    index = n % count
    if via_runtime or torch.cuda.is_initialized():
        # The CUDA runtime has read the environment already: select the device instead.
        torch.cuda.set_device(index)
        return f"torch.cuda.set_device({index})"
    environ["CUDA_VISIBLE_DEVICES"] = str(index)
    return f"CUDA_VISIBLE_DEVICES={index}"
