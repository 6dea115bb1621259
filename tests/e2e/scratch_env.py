"""A fresh Python environment that already has torch, as a user's CI machine does, without a download.

:func:`existing_torch` links torch and what the plugin's wheel needs (with their requirements, pip
and setuptools) from this test environment into one folder; :func:`fresh_venv` makes a venv that
sees that folder through a ``.pth`` file. pip in that venv counts them as installed, so installing
the wheel there shows whether it keeps the torch it finds — and ``PIP_NO_INDEX`` makes any attempt
to fetch another torch fail instead of downloading one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

PIP_ENV = {
    "PIP_NO_INDEX": "1",  # nothing from an index: what is not linked in is an error, not a download
    "PIP_CONFIG_FILE": os.devnull,  # this machine's pip settings (find-links, constraints) stay out
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_BUILD_ISOLATION": "0",  # pip reads this as --no-build-isolation: build with the linked setuptools
    "PIP_NO_WARN_SCRIPT_LOCATION": "1",
}


def wheel_requirements(wheel: Path) -> list[str]:
    """The names a wheel requires outside its extras (from its METADATA)."""
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(name).decode("utf-8")
    wanted = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist: "):
            requirement = Requirement(line.split(": ", 1)[1])
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                wanted.append(requirement.name)
    return wanted


def _closure(names: list[str]) -> list[metadata.Distribution]:
    seen: dict[str, metadata.Distribution] = {}
    todo = list(names)
    while todo:
        key = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if key in seen:
            continue
        dist = metadata.distribution(key)
        seen[key] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(seen.values())


def existing_torch(target: Path, wheel: Path) -> Path:
    """``target`` filled with links to torch, the wheel's other requirements, numpy, pip and setuptools."""
    target.mkdir(parents=True, exist_ok=True)
    for dist in _closure([*wheel_requirements(wheel), "numpy", "pip", "setuptools"]):
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            link = target / top
            if not link.exists() and (base / top).exists():
                link.symlink_to(base / top)
    return target


def fresh_venv(root: Path, existing: Path) -> Path:
    """A venv (no packages of its own) that sees ``existing``; returns its ``bin`` folder."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, timeout=120)
    purelib = sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)})
    Path(purelib, "_existing_torch.pth").write_text(f"{existing}\n", encoding="utf-8")
    return root / "bin"


def build_wheel(source: Path, out: Path) -> Path:
    """Build the plugin's wheel from a copy of its sources, offline (this environment's setuptools)."""
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
        + ["-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("pytest_graphcapture-*.whl")
    return wheel
