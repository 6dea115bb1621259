"""Imported first by the fork server that ranks are forked from: the server dies with its parent.

:mod:`.start` preloads this module in :mod:`multiprocessing`'s fork server.  There
it asks the kernel (Linux ``prctl(PR_SET_PDEATHSIG)``) to kill the server the moment
the process that started it dies, so the ranks forked from it, which die with the
server in turn, go at once too; without it the server would first notice its lost
parent and shut its interpreter down, which takes seconds with torch loaded.
Imported anywhere else (it is only imported by name, in the server), it does nothing.
"""

from __future__ import annotations

import sys

from .rank_process import die_with_parent

if any(arg.startswith("from multiprocessing.forkserver import main") for arg in getattr(sys, "orig_argv", ())):
    die_with_parent()
