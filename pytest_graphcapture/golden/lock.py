"""One writer at a time on a golden tree: an exclusive, non-blocking lock held for a whole session.

Two ``--update-golden`` runs on one tree would interleave their writes and
deletions and leave goldens from both; so the session that writes takes
:class:`GoldenLock` first and a second one fails at once with a line naming the
holder's pid (waiting could hang behind a run that never ends).  Under
pytest-xdist only the controller takes it: its workers write on its behalf.
``graphcapture accept`` takes the same lock; the lock file names which kind of
writer holds it, so the message says who to wait for.

The lock is ``fcntl.flock`` (``msvcrt.locking`` on Windows) on a dot-file in the
golden dir, which readers skip and which is removed on release.  The operating
system drops the lock when its holder dies, so a killed run never blocks the
next one.  No third-party lock package: the pid in the message and the removal
on release need the file descriptor in hand, which is ten lines either way.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Optional

from ..errors import GoldenError

LOCK_NAME = ".graphcapture-write.lock"
#: What the refusal says about each kind of writer (the second line of the lock file); ``{pid}`` is `` (pid N)``.
WRITERS = {
    "pytest": "another pytest run{pid} is writing goldens here (--update-golden)",
    "accept": "a graphcapture accept{pid} is writing goldens here",
    "check": "a graphcapture check --update{pid} is writing goldens here",
}


def _try_lock(fd: int) -> bool:
    if os.name == "nt":  # pragma: no cover - exercised on Windows only
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


class GoldenLock:
    """The write lock of the golden tree at ``golden_dir``; :meth:`acquire` raises GoldenError when held.

    ``writer`` is the kind of writer taking it (a key of :data:`WRITERS`), named to the one refused.
    """

    def __init__(self, golden_dir: Path, writer: str = "pytest") -> None:
        if writer not in WRITERS:
            raise ValueError(f"unknown golden writer {writer!r}; one of {', '.join(WRITERS)}")
        self.golden_dir = Path(golden_dir)
        self.writer = writer
        self.path = self.golden_dir / LOCK_NAME
        self._fd: Optional[int] = None
        self._created_dir = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock, or raise GoldenError naming the run that holds it."""
        if self._fd is not None:
            return
        self._created_dir = not self.golden_dir.exists()
        try:
            self.golden_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise GoldenError(self.golden_dir, f"cannot create the golden dir: {exc.strerror or exc}") from None
        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise GoldenError(self.path, f"cannot create the write lock: {exc.strerror or exc}") from None
            if not _try_lock(fd):
                pid, writer = _read_holder(fd)
                os.close(fd)
                who = WRITERS.get(writer, WRITERS["pytest"]).format(pid=f" (pid {pid})" if pid else "")
                raise GoldenError(self.golden_dir, f"{who}; one writer at a time: run again when it has finished")
            # The holder before us may have removed the file between our open and our lock: lock the live one.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n{self.writer}\n".encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock and remove its file, and the golden dir when the lock made it and nothing was written."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if os.name != "nt":  # an open file cannot be removed on Windows; it stays, empty of meaning
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        os.close(fd)
        if self._created_dir:
            with contextlib.suppress(OSError):
                self.golden_dir.rmdir()  # only when empty


def _read_holder(fd: int) -> tuple[Optional[int], str]:
    """The holder's pid (None when unknown) and kind of writer (a lock file with only a pid: pytest)."""
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace") if hasattr(os, "pread") else ""
    except OSError:
        return None, "pytest"
    lines = text.split()
    pid = int(lines[0]) if lines and lines[0].isdigit() else None
    return pid, lines[1] if len(lines) > 1 and lines[1] in WRITERS else "pytest"


# --------------------------------------------------------------------------- updating on CI

#: Environment variables by which CI services announce themselves (the tests' isolation uses this list too).
CI_VARIABLES = (
    "CI",
    "GITHUB_ACTIONS",
    "GITLAB_CI",
    "BUILDKITE",
    "JENKINS_URL",
    "TF_BUILD",
    "CIRCLECI",
    "TRAVIS",
    "TEAMCITY_VERSION",
    "BITBUCKET_BUILD_NUMBER",
    "DRONE",
)


#: Values of a CI variable that mean "not on CI" (compared lowercased; an empty value too).
CI_OFF_VALUES = ("0", "false", "no")


def ci_environment(environ: Optional[dict] = None) -> Optional[str]:
    """Name of the CI environment variable that is set, or None when not on CI."""
    environ = os.environ if environ is None else environ
    for name in CI_VARIABLES:
        value = environ.get(name, "")
        if value and value.lower() not in CI_OFF_VALUES:
            return name
    return None
