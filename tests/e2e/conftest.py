"""Fixtures of the end-to-end tests: the plugin's wheel and the gpu_check dry run, each made once per test process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


@pytest.fixture(scope="session")
def gpu_check_dry_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    """``scripts/gpu_check.sh --dry-run`` run once: its completed process and its output folder.

    Its examples step is the README's examples job under ``-W error``, in a fresh interpreter (torch's
    import-time warnings included), which tests/e2e/test_examples.py checks; every other step runs in a
    Python forked warm (tests/warm_python.py). Tests that take it share the xdist group
    ``gpu_check_dry_run``, so one worker runs it once.
    """
    from warm_python import warm_python

    tmp = tmp_path_factory.mktemp("gpu-check")
    out = tmp / "check"
    env = dict(os.environ, PYTHON=warm_python())
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "gpu_check.sh"), "--dry-run", "--out", str(out)]
        + ["--examples-python", sys.executable, "--examples-opt", "-Werror"],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,  # twelve steps of at most 420 s each on a loaded CPU machine
    )
    return done, out
