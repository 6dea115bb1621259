"""scripts/check_module_size.py, which .ci/run runs: a module past 800 lines fails CI, named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "check_module_size.py"


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def write_lines(path: Path, n: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"x{i} = {i}\n" for i in range(n)), encoding="utf-8")


def test_a_module_over_the_limit_fails_naming_it_and_only_it(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    write_lines(package / "small.py", 800)  # at the limit: fine
    write_lines(package / "sub" / "long.py", 801)
    write_lines(package / "longer.py", 900)
    write_lines(package / "__pycache__" / "cached.py", 1200)  # not a module of the package
    done = run(str(package))
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "pkg/longer.py: 900 lines, over the 800-line limit for one module: split it by idea",
        "pkg/sub/long.py: 801 lines, over the 800-line limit for one module: split it by idea",
    ]


def test_a_package_within_the_limit_passes(tmp_path: Path) -> None:
    write_lines(tmp_path / "pkg" / "a.py", 800)
    write_lines(tmp_path / "pkg" / "b" / "c.py", 10)
    done = run(str(tmp_path / "pkg"))
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr


def test_the_limit_is_an_option_and_a_missing_folder_is_bad_input(tmp_path: Path) -> None:
    write_lines(tmp_path / "pkg" / "a.py", 20)
    assert run(str(tmp_path / "pkg"), "--limit", "19").returncode == 1
    missing = run(str(tmp_path / "nope"))
    assert missing.returncode == 2 and "nope: no such folder" in missing.stderr


def test_by_default_it_reads_this_package() -> None:
    done = run("--limit", "1")  # every real module is longer than one line
    assert done.returncode == 1
    named = {line.split(":")[0] for line in done.stdout.splitlines()}
    assert "pytest_graphcapture/__init__.py" in named and all(n.startswith("pytest_graphcapture/") for n in named)


def test_ci_runs_the_check() -> None:
    lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert "python scripts/check_module_size.py" in lines
