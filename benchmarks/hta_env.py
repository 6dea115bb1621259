"""The separate virtual environment for Holistic Trace Analysis (B3).

HTA pulls pandas, jupyterlab, plotly and more, so it never goes into our
dependencies or into the Python that runs our tests: the benchmark makes its
own venv (default ``bench_out/hta-venv``) and runs HTA there in subprocesses.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Optional

HTA_PACKAGE = "HolisticTraceAnalysis"
HTA_VERSION = "0.5.0"


def venv_python(venv: Path) -> Path:
    """The interpreter of ``venv`` (POSIX or Windows layout)."""
    posix = venv / "bin" / "python"
    return posix if posix.exists() or sys.platform != "win32" else venv / "Scripts" / "python.exe"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip() and "is ignored" not in line]
    return lines[-1].strip() if lines else "no output"


def hta_version(python: Path) -> Optional[str]:
    """HTA's installed version in that interpreter, or None when it cannot be imported."""
    try:
        done = subprocess.run(
            [str(python), "-c", "import hta, importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_hta(venv: Path, *, version: str = HTA_VERSION, log=print) -> tuple[Optional[Path], str]:
    """``(python, description)`` of a venv with HTA, creating it when needed; ``(None, reason)`` on failure."""
    python = venv_python(venv)
    if python.exists():
        found = hta_version(python)
        if found:
            return python, f"{HTA_PACKAGE} {found} in {venv}"
    log(f"B3: creating {venv} and installing {HTA_PACKAGE}=={version} there (pandas and more; a few minutes)")
    try:
        if not python.exists():
            done = subprocess.run(
                [sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300
            )
            if done.returncode != 0:
                return None, f"cannot create the venv {venv}: {_last_line(done.stderr)}"
        done = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", f"{HTA_PACKAGE}=={version}"],
            capture_output=True,
            text=True,
            timeout=1800,
        )
    except subprocess.TimeoutExpired:
        return None, f"installing {HTA_PACKAGE} into {venv} timed out"
    except OSError as exc:
        return None, f"cannot run the installer for {venv}: {exc}"
    if done.returncode != 0:
        return None, f"pip install {HTA_PACKAGE}=={version} failed: {_last_line(done.stderr or done.stdout)}"
    found = hta_version(python)
    if not found:
        return None, f"{HTA_PACKAGE} installed into {venv} but does not import"
    return python, f"{HTA_PACKAGE} {found} in {venv}"
