"""The harvest folder (``--golden-out``): emptied when a run starts, and only when it is one we wrote.

A harvest holds the summaries one run obtained, in the golden layout, for
``graphcapture accept``; what an earlier run left there would be accepted with
them.  So each run starts from an empty folder, and a folder is only emptied when
it is new, empty or marked as a harvest (:data:`HARVEST_MARK`): a mistyped path
never deletes a user's files.  The pytest gate and ``graphcapture check`` share this.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from ..errors import UsageError

#: The file that marks a --golden-out folder as a harvest this plugin wrote (and may empty).
HARVEST_MARK = ".graphcapture-harvest"
HARVEST_MARK_TEXT = "Obtained summaries written by pytest-graphcapture (--golden-out); emptied by each session.\n"


def reset_folder(folder: Path) -> None:
    """Make ``folder`` an empty folder (created when missing)."""
    if folder.is_dir() and not folder.is_symlink():
        for entry in folder.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    folder.mkdir(parents=True, exist_ok=True)


def reset_harvest(folder: Path, where: str) -> None:
    """Empty ``folder`` and mark it as a harvest; UsageError (``where`` names the option and path) when it is not ours."""
    try:
        entries = list(folder.iterdir()) if folder.is_dir() else []
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror or exc}") from None
    if entries and not (folder / HARVEST_MARK).is_file():
        raise UsageError(
            f"{where}: the folder holds files pytest-graphcapture did not write; "
            f"each session starts from an empty harvest folder: give a new or empty folder"
        )
    try:
        reset_folder(folder)
        (folder / HARVEST_MARK).write_text(HARVEST_MARK_TEXT, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{where}: cannot write: {exc.strerror or exc}") from None
