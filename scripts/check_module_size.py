"""Fail when a module of the package passes the line limit, naming each file that does.

A module holds one idea; past 800 lines it almost always holds two, and the next contributor
cannot see which part is theirs to change. Split such a file by idea (CONTRIBUTING.md), not by
moving lines around until the count fits.

Run ``python scripts/check_module_size.py`` from anywhere (``.ci/run`` does): it reads every
``*.py`` under ``pytest_graphcapture/`` and exits 0 when none passes the limit, 1 when one does
(one line per file, longest first), 2 when the folder is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LIMIT = 800


def oversized(package: Path, limit: int = LIMIT) -> list[tuple[Path, int]]:
    """Every ``*.py`` under ``package`` with more than ``limit`` lines, longest first."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append((path, lines))
    return sorted(found, key=lambda item: -item[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("package", nargs="?", type=Path, default=REPO / "pytest_graphcapture")
    parser.add_argument("--limit", type=int, default=LIMIT, help=f"most lines one module may have ({LIMIT})")
    args = parser.parse_args(argv)
    if not args.package.is_dir():
        print(f"check_module_size: {args.package}: no such folder", file=sys.stderr)
        return 2
    base = args.package.resolve().parent
    found = oversized(args.package, args.limit)
    for path, lines in found:
        shown = path.resolve().relative_to(base)
        print(f"{shown}: {lines} lines, over the {args.limit}-line limit for one module: split it by idea")
    if found:
        print(f"{len(found)} module(s) over {args.limit} lines", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
