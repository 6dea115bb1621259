"""Exceptions: every error a user can cause derives from GraphCaptureError, so plugin and CLI print one line, not a traceback."""

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
    """An event holds a value no profiler writes (a malformed shape, a name that is not text): refused, never summarized.

    The message names the event and field; a reader that knows the file wraps it in :class:`TraceFormatError`."""


class GoldenError(FileError):
    """A golden file cannot be read or written."""


class CaptureError(GraphCaptureError):
    """Capturing ``key`` failed at ``stage`` (``warmup 1``, ``capture``, ``trace export``, ``replay``, …).

    ``partial`` is the CaptureResult of the keys captured before it, which keep their results."""

    def __init__(self, key: object, stage: str, cause: BaseException, partial: object = None) -> None:
        self.key = key
        self.stage = stage
        self.cause = cause
        self.partial = partial
        super().__init__(f"capturing {key} failed during {stage}: {type(cause).__name__}: {cause}")
