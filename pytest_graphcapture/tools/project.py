"""Where a pytest run started here would put things, for commands run outside pytest.

``graphcapture accept`` writes into the golden tree the plugin reads.  Without
``--golden-dir`` it must find the same folder a ``pytest`` started in the same
directory would use: the ``golden_dir`` setting from the environment or from the
ini file pytest finds (``pytest.ini``, ``pyproject.toml``, ``tox.ini``,
``setup.cfg``), else ``goldens`` in the rootdir.  The ini file and the rootdir
come from pytest's own discovery, so the two can never disagree; relative paths
follow the plugin's one rule, :func:`naming.setting_path`.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any, Optional

from ..errors import UsageError
from ..naming import GOLDEN_DIR_DEFAULT, GOLDEN_DIR_ENV, GOLDEN_DIR_OPTION, setting_path

GOLDEN_DIR_INI = GOLDEN_DIR_OPTION.lstrip("-").replace("-", "_")


def pytest_setup(invocation_dir: Path) -> tuple[Path, Optional[Path], dict[str, Any]]:
    """``(rootdir, ini file or None, ini values)`` as pytest started in ``invocation_dir`` with no arguments finds them."""
    import pytest
    from _pytest.config import findpaths

    # The discovery function's keywords changed between pytest 7.4 and 9; pass those it takes.
    offered: dict[str, Any] = {
        "inifile": None,
        "override_ini": None,
        "args": [],
        "rootdir_cmd_arg": None,
        "invocation_dir": invocation_dir,
        "config": None,
    }
    accepted = inspect.signature(findpaths.determine_setup).parameters
    try:
        found = findpaths.determine_setup(**{k: v for k, v in offered.items() if k in accepted})
    except pytest.UsageError as exc:
        raise UsageError(f"cannot read the pytest configuration found from {invocation_dir}: {exc}") from None
    rootdir, inipath, inicfg = found[0], found[1], found[2]
    # pytest 9 wraps each ini value in an object with ``.value``.
    values = {key: getattr(value, "value", value) for key, value in (inicfg or {}).items()}
    return Path(rootdir), (Path(inipath) if inipath else None), values


def golden_dir(option: Optional[str], invocation_dir: Optional[Path] = None) -> Path:
    """The golden tree: ``--golden-dir`` > ``GRAPH_CAPTURE_GOLDEN_DIR`` > ini ``golden_dir`` > ``goldens`` in the rootdir.

    The same precedence and the same relative-path rule as the plugin's ``--golden-dir``.
    """
    here = Path(invocation_dir) if invocation_dir is not None else Path.cwd()
    if option:
        return _folder(setting_path(option, "option", invocation_dir=here, inipath=None, rootdir=here), "--golden-dir")
    env = os.environ.get(GOLDEN_DIR_ENV, "").strip()
    if env:
        where = f"environment variable {GOLDEN_DIR_ENV}"
        return _folder(setting_path(env, where, invocation_dir=here, inipath=None, rootdir=here), where)
    rootdir, inipath, values = pytest_setup(here)
    ini = values.get(GOLDEN_DIR_INI)
    if isinstance(ini, str) and ini.strip():
        where = f"ini key {GOLDEN_DIR_INI}"
        return _folder(setting_path(ini.strip(), where, invocation_dir=here, inipath=inipath, rootdir=rootdir), where)
    if ini not in (None, "", []):
        raise UsageError(f"{inipath}: ini key {GOLDEN_DIR_INI} must be one directory, not {ini!r}")
    path = setting_path(GOLDEN_DIR_DEFAULT, "default", invocation_dir=here, inipath=inipath, rootdir=rootdir)
    return _folder(path, "the default golden dir")


def _folder(path: Path, where: str) -> Path:
    """``path`` unless something other than a folder is there: goldens are files inside a folder, never one file."""
    if (path.exists() or path.is_symlink()) and not path.is_dir():
        kind = "a file" if path.is_file() else "not a folder (a special file or a broken link)"
        raise UsageError(f"{where} {path}: is {kind}; the golden tree must be a folder (name a folder, or a new path)")
    return path


def shown(path: Path, invocation_dir: Optional[Path] = None) -> Path:
    """``path`` relative to the invocation directory when it lies below it (shorter to read), else as is."""
    here = Path(invocation_dir) if invocation_dir is not None else Path.cwd()
    try:
        return path.relative_to(here)
    except ValueError:
        return path
