"""Setup shared by the project's own tests (everything under ``tests/``)."""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path

import pytest

# Shared, non-test modules (helpers.py, rank_targets.py) live here; test modules in the
# tests/<area>/ folders and the rank processes they spawn import them by name.
TESTS_DIR = str(Path(__file__).resolve().parent)
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)


def _cache_child_bytecode() -> None:
    """The Pythons the tests start compile each module once, not once per process.

    The suite starts a few hundred Pythons (pytester runs, xdist workers inside them, ranks, doc
    commands).  Where PYTHONDONTWRITEBYTECODE is set, as on some CI images, each of them compiled
    and assertion-rewrote every module it imported from source: about a second apiece.  They write
    bytecode where Python does by default, beside each module (``__pycache__``, ignored by git); no
    prefix folder, which would hide the bytecode pip wrote at install (torch's: 8 s of CPU to
    compile again).  A prefix already chosen by the user is kept.
    """
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


_cache_child_bytecode()

# torch's OpenMP threads wait for each other by spinning.  The suite runs a worker per core and
# each starts Pythons of its own, so a waiting thread spins on a core another process needs: a
# capture run took two to three times the CPU it takes on an idle machine.  Waiting threads sleep
# instead (set before any process of the suite imports torch, which reads it when its OpenMP
# runtime loads).  What the tests check does not depend on it; a value already set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# torch.compile tests compile their C++ kernels in the test's own process: with an empty inductor cache
# (a fresh machine) inductor otherwise starts a pool of Pythons that each import torch, to compile a few kernels.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
# Before its first kernel on a machine with an empty cache, inductor compiles and loads a test program for each
# vector instruction set the CPU reports (about 10 s of CPU); the suite takes the CPU's word for them.  The
# kernels, and the graphs the tests check, are the same.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")

GRAPH_CAPTURE_VARIABLES = tuple(
    name for name in os.environ if name.startswith("GRAPH_CAPTURE_") and name != "GRAPH_CAPTURE_REAL_TRACES"
)
#: The options of every pytest a test starts in a process of its own (the examples, a doc's command,
#: a gpu_check step), through PYTEST_ADDOPTS: hypothesis's pytest plugin costs about 2 s of CPU in each
#: of them (it imports all of hypothesis) and none of those runs uses it.  The outer shell's
#: PYTEST_ADDOPTS is not passed on either.
CHILD_PYTEST_ADDOPTS = "-p no:hypothesispytest"
#: What pytest-xdist sets in the worker running a test: pytest sessions a test starts are not its workers.
XDIST_VARIABLES = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts outside CI and without GRAPH_CAPTURE_* settings from the outer shell.

    CI sets CI=true; tests that run pytest inside pytest must not inherit it unless they mean to,
    nor the variables of the pytest-xdist worker the test itself runs in (the suite runs with -n).
    The package is imported here, not at the top: a conftest importing it before pytest's
    assertion rewriting would make inner ``-W error`` runs fail ("already imported").
    """
    from pytest_graphcapture.golden.store import CI_VARIABLES

    for name in CI_VARIABLES + GRAPH_CAPTURE_VARIABLES + XDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PYTEST_ADDOPTS", CHILD_PYTEST_ADDOPTS)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first: ``--dist loadgroup`` hands tests out in this order, one at a time,
    so a long test started last would keep one worker busy while the others have finished.

    In an xdist worker under ``--dist loadgroup``, a test marked ``xdist_group(NAME)`` gets ``@NAME``
    after its id, which is what sends a group to one worker: pytest-xdist 3.8 does that by setting
    ``item._nodeid``, which pytest 9 no longer reads (the id is ``item._id``), so without this every
    group was spread over the workers and each ran the group's session fixtures again."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # stable: otherwise collection order
    if not (hasattr(config, "workerinput") and config.getvalue("loadgroup")):
        return
    for item in items:
        marks = item.iter_markers("xdist_group")
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in marks})
        if names and not item.nodeid.endswith(f"@{'_'.join(names)}") and hasattr(item, "_id"):
            from _pytest.nodes import coerce_node_id  # pytest 9: where the structured id lives

            item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


def pytest_collection_finish(session: pytest.Session) -> None:
    """The garbage collector stops rescanning what the session imported and collected, and runs less often.

    torch and the collected tests are about a million objects that live as long as the process, and
    reading a large trace allocates millions of small ones: the collector's passes cost about a tenth
    of the CPU of the tests that read traces.  Nothing a test checks depends on when it runs.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
