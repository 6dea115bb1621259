"""Fixtures of the end-to-end tests: the plugin's wheel, built once per test process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers import REPO_ROOT

#: What the wheel is built from: the files pyproject.toml and MANIFEST.in name, and the package.
WHEEL_SOURCES = ("pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "CHANGELOG.md")


@pytest.fixture(scope="session")
def plugin_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's wheel, built from a copy of the checkout (so no build output lands in the repository).

    Tests that take it share one xdist group, so one worker builds it once.
    """
    from scratch_env import build_wheel

    source = tmp_path_factory.mktemp("plugin-source")
    for name in WHEEL_SOURCES:
        shutil.copy2(REPO_ROOT / name, source / name)
    shutil.copytree(
        REPO_ROOT / "pytest_graphcapture", source / "pytest_graphcapture", ignore=shutil.ignore_patterns("__pycache__")
    )
    return build_wheel(source, tmp_path_factory.mktemp("plugin-wheel"))
