"""Goldens that belong to no collected test: those of deleted or renamed tests.

The golden tree mirrors test node ids (:func:`~pytest_graphcapture.naming.nodeid_components`),
so after a run that collected the whole suite, a folder of goldens whose
components match no collected test — and no named check of one — is left over
from a test that no longer exists.  Only the plugin knows whether the whole
suite was collected; this module only maps folders to tests.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from ..naming import is_hidden, nodeid_components
from . import store


def orphaned_goldens(
    golden_dir: Path, collected: Iterable[str], protected: Iterable[str] = ()
) -> list[tuple[str, Path]]:
    """``(platform, path)`` of every golden file whose folder belongs to no test in ``collected``.

    A folder belongs to a test when its path below the platform folder is the
    test's node id components, or those plus one (a named check's sub-folder).
    ``protected`` holds node ids of collectors that were skipped or failed to
    collect (a module-level skip, an import error): goldens below them are kept,
    since their tests were not collected but may well exist.
    """
    root = Path(golden_dir)
    if not root.is_dir():
        return []
    known = {tuple(nodeid_components(nodeid)) for nodeid in collected}
    shielded = [tuple(nodeid_components(nodeid)) for nodeid in protected if nodeid]
    found: list[tuple[str, Path]] = []
    for platform_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and not is_hidden(p)):
        for folder, dirs, _files in os.walk(platform_dir):  # links are not followed: a loop cannot hang the scan
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            parts = Path(folder).relative_to(platform_dir).parts
            if parts in known or parts[:-1] in known or any(parts[: len(s)] == s for s in shielded):
                continue
            found.extend((platform_dir.name, path) for path in store.golden_files(Path(folder)))
    return found
