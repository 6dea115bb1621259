"""Exceptions raised by pytest-graphcapture.

Every error a user can cause (bad trace, bad golden, bad option) derives from
``GraphCaptureError`` so the pytest plugin and the CLI can print a one-line
message instead of a traceback from our internals.
"""

from __future__ import annotations


class GraphCaptureError(Exception):
    """Base class of all errors pytest-graphcapture raises on purpose."""


class UsageError(GraphCaptureError):
    """An option, ini key or environment variable has a value we cannot use."""


class FileError(GraphCaptureError):
    """A file cannot be read or written; ``path`` names it and ``problem`` says what is wrong."""

    def __init__(self, path: object, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class TraceFormatError(FileError):
    """A trace file cannot be read as a Kineto/Chrome trace."""


class TraceEventError(GraphCaptureError):
    """An event holds a value no profiler writes (a malformed shape, a name that is not text).

    The message names the event and the field; a reader that knows the file wraps it in
    :class:`TraceFormatError`.  Such a value is refused rather than summarized, so it
    never reaches a golden.
    """


class GoldenError(FileError):
    """A golden file cannot be read or written."""


class CaptureError(GraphCaptureError):
    """Capturing one key failed; the keys captured before it keep their results.

    ``key`` is the failing :class:`~pytest_graphcapture.keys.CaptureKey`, ``stage``
    where it failed (``warmup 1``, ``warmup 2``, ``capture``, ``trace export``,
    ``replay``) and ``partial`` the :class:`~pytest_graphcapture.result.CaptureResult`
    of the keys that completed.
    """

    def __init__(self, key: object, stage: str, cause: BaseException, partial: object = None) -> None:
        self.key = key
        self.stage = stage
        self.cause = cause
        self.partial = partial
        super().__init__(f"capturing {key} failed during {stage}: {type(cause).__name__}: {cause}")
