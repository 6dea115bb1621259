"""One writer at a time on a golden tree: an exclusive, non-blocking lock held for a whole session.

Two ``--update-golden`` runs on one tree would interleave their writes and
deletions and leave goldens from both; so the session that writes takes
:class:`GoldenLock` first and a second one fails at once with a line naming the
holder's pid (waiting could hang behind a run that never ends).  Under
pytest-xdist only the controller takes it: its workers write on its behalf.

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
    """The write lock of the golden tree at ``golden_dir``; :meth:`acquire` raises GoldenError when held."""

    def __init__(self, golden_dir: Path) -> None:
        self.golden_dir = Path(golden_dir)
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
                holder = _read_pid(fd)
                os.close(fd)
                who = f"pytest run (pid {holder})" if holder else "pytest run"
                raise GoldenError(
                    self.golden_dir,
                    f"another {who} is writing goldens here (--update-golden); one writer at a time: "
                    f"run again when it has finished",
                )
            # The holder before us may have removed the file between our open and our lock: lock the live one.
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
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


def _read_pid(fd: int) -> Optional[int]:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip() if hasattr(os, "pread") else ""
    except OSError:
        return None
    return int(text) if text.isdigit() else None
