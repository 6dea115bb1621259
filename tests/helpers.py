"""Small helpers shared by the project's tests (import as ``from helpers import ...``)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def load_trace(path: Path) -> dict:
    """Read a (gzipped) Chrome trace the plugin wrote."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def cpu_op_names(trace: dict) -> list[str]:
    return [e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]


def real_traces_dir() -> Path:
    return Path(os.environ.get("GRAPH_CAPTURE_REAL_TRACES", REPO_ROOT.parent / "shared" / "testdata" / "real_traces"))
