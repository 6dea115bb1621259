"""Importing torch where users' test setups would otherwise break it.

* Warnings as errors (``-W error``, ``filterwarnings = error``): torch warns while it
  is being imported (for one, "Failed to initialize NumPy" where numpy is missing).
  Raised as an error, that warning aborts torch's import half-way; the next module
  importing torch then sees a half-initialized torch (circular-import errors) and the
  process can die with a segmentation fault.  :func:`import_torch_early` imports torch
  before any conftest or test module does, with its warnings recorded instead of
  raised; they are shown in the terminal summary.  A torch that still fails to import
  is one line naming the cause.
* ``pytester`` in-process runs drop the modules imported during the run, among them
  those torch imports at the first profiler start; :func:`before_test` loads them
  before a test that requests ``pytester`` (see
  :func:`~pytest_graphcapture.engine.profiling.load_lazy_profiler_modules`).
* pytest attaches its log capture to every logger that does not propagate, among
  them ``torch.__trace``: torch's structured compile trace (the ``TORCH_TRACE`` files
  tlparse reads), always at DEBUG.  A failing test of a runner under ``torch.compile``
  then shows hundreds of empty ``DEBUG torch.__trace`` lines as its captured log.
  :func:`keep_torch_trace_out_of_logs` filters those records out of pytest's handlers
  only, so ``TORCH_TRACE`` files are written as before.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import warnings

import pytest

from ..errors import UsageError

TORCH_WARNINGS = pytest.StashKey[list]()
_PYTESTER_FIXTURES = frozenset({"pytester", "testdir"})


def warnings_are_errors(config: pytest.Config) -> bool:
    """Whether any warning filter of this run (``-W``, ``PYTHONWARNINGS``, ini) turns warnings into errors."""
    filters = list(sys.warnoptions)
    filters += list(getattr(config.known_args_namespace, "pythonwarnings", None) or [])
    try:
        filters += list(config.getini("filterwarnings") or [])
    except ValueError:  # the warnings plugin is disabled (-p no:warnings)
        pass
    return any(str(f).strip().startswith("error") for f in filters)


def import_torch_early(config: pytest.Config) -> None:
    """Import torch now, its import-time warnings recorded (see the module docstring).

    Only where warnings are errors and torch is installed but not yet imported.
    """
    if "torch" in sys.modules or not warnings_are_errors(config) or importlib.util.find_spec("torch") is None:
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
    """Before a test requesting ``pytester``: load torch's lazily imported profiler modules (if torch is there)."""
    if _PYTESTER_FIXTURES.isdisjoint(getattr(item, "fixturenames", ())):
        return
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return
    from ..engine.profiling import load_lazy_profiler_modules

    load_lazy_profiler_modules()


#: The logger of torch's structured compile trace: machine records for tlparse, not log lines for people.
TORCH_TRACE_LOGGER = "torch.__trace"
#: pytest's log handlers (captured-log report sections, ``caplog``, ``--log-file``, live logs).
_PYTEST_LOG_HANDLERS = ("report_handler", "caplog_handler", "log_file_handler", "log_cli_handler")


def _not_torch_trace(record: logging.LogRecord) -> bool:
    return record.name != TORCH_TRACE_LOGGER and not record.name.startswith(TORCH_TRACE_LOGGER + ".")


def keep_torch_trace_out_of_logs(config: pytest.Config) -> None:
    """Keep torch's structured-trace records out of what pytest's logging plugin reports (see the module docstring).

    A filter on pytest's own handlers, not on torch's logger: a ``TORCH_TRACE`` file still gets every record.
    """
    plugin = config.pluginmanager.get_plugin("logging-plugin")
    for name in _PYTEST_LOG_HANDLERS:
        handler = getattr(plugin, name, None)
        if isinstance(handler, logging.Handler) and _not_torch_trace not in handler.filters:
            handler.addFilter(_not_torch_trace)
