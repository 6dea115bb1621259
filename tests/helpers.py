"""Helpers shared by the project's tests (import as ``from helpers import ...``).

This module lives in ``tests/``; the repository's top-level ``conftest.py`` puts that
folder on ``sys.path`` so test modules in any ``tests/<area>/`` folder (and the rank
processes the multi-rank tests spawn) can import it and ``rank_targets``.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent

# hypothesis's own plugin adds ~1 s per inner run (and per xdist worker) and is irrelevant there;
# pytest-randomly would reorder the inner tests.
QUIET = ("-p", "no:randomly", "-p", "no:hypothesispytest")
PLUGIN: tuple[str, ...] = ()  # the installed plugin (entry point) is what users run


def load_trace(path: Path) -> dict:
    """Read a (gzipped) Chrome trace the plugin wrote."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return json.load(handle)


def summary_dict(kernels: list[str], *, batch_size: int = 1, runner: str = "R") -> dict:
    """A valid summary JSON dict (platform cpu, level name) with one launch of each kernel."""
    return {
        "schema_version": 1,
        "key": {"runner": runner, "batch_size": batch_size, "variant": None, "rank": 0},
        "platform": "cpu",
        "level": "name",
        "kernels": [{"name": name, "kind": "kernel", "count": 1} for name in kernels],
        "ops": [],
        "launches": {"total": len(kernels), "by_api": {}},
        "complete": True,
        "incomplete_reason": None,
        "environment": {},
    }


def cpu_op_names(trace: dict) -> list[str]:
    return [e["name"] for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]


def real_traces_dir() -> Path:
    return Path(os.environ.get("GRAPH_CAPTURE_REAL_TRACES", REPO_ROOT.parent / "shared" / "testdata" / "real_traces"))


@functools.cache
def real_trace(path: Path) -> dict:
    """:func:`load_trace` of a shared real trace, read once per process: callers must not change what it returns."""
    return load_trace(path)


def assert_gone(pids: list[int]) -> None:
    """Every pid is gone (not even a zombie left for us to reap)."""
    assert pids
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    assert not alive, f"rank processes left behind: {alive}"


# --------------------------------------------------------------------------- pytester projects


def run(
    pytester: pytest.Pytester, *args: str, subprocess: bool = False, timeout: float | None = None, warm: bool = False
) -> pytest.RunResult:
    """Run pytest in a pytester project: in-process, or in a subprocess (for ``-n``), without the cache.

    ``warm``: the subprocess, and the pytest-xdist workers the run starts, are forked from a
    Python that imported torch already (tests/warm_python.py) — for runs that check nothing of how
    torch is imported or of how their processes start and end.
    """
    if warm:
        from warm_python import XDIST_WORKERS, warm_python, warm_xdist_workers

        if not subprocess:
            with warm_xdist_workers():
                return pytester.runpytest(*PLUGIN, *QUIET, "-p", "no:cacheprovider", *args)
        python = warm_python()
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(pytester, "_getpytestargs", lambda: (python, "-mpytest"))
            patch.setenv(XDIST_WORKERS, "1")
            return pytester.runpytest_subprocess(*PLUGIN, *QUIET, "-p", "no:cacheprovider", *args, timeout=timeout)
    if subprocess:
        return pytester.runpytest_subprocess(*PLUGIN, *QUIET, "-p", "no:cacheprovider", *args, timeout=timeout)
    return pytester.runpytest(*PLUGIN, *QUIET, "-p", "no:cacheprovider", *args)


def isolated_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """No plugin setting, fake-capture switch, xdist or CI variable leaks in; subprocesses use this checkout."""
    for name in list(os.environ):
        if name.startswith(("GRAPH_CAPTURE_", "FAKE_", "PYTEST_XDIST")) or name == "CI":
            monkeypatch.delenv(name, raising=False)
    use_this_checkout(monkeypatch)


def fake_project(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    tests: str | None = None,
    *,
    conftest: str | None = None,
    extra: str = "",
) -> pytest.Pytester:
    """A pytester project: ``conftest`` (default :data:`FAKE_CONFTEST`) plus ``extra``, and ``test_model.py``.

    ``tests`` is the test module (default :data:`TEST_DECODE`); the environment is :func:`isolated_checkout`'s.
    """
    isolated_checkout(monkeypatch)
    pytester.makeconftest((FAKE_CONFTEST if conftest is None else conftest) + extra)
    pytester.makepyfile(test_model=TEST_DECODE if tests is None else tests)
    return pytester


def use_this_checkout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Subprocesses (xdist workers, ``runpytest_subprocess``) import the package from this checkout."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])))


# The fake capture of the pytester projects: ``fake_capture()`` returns a CaptureResult whose
# summaries come from ``make_summary``, for FAKE_BATCH_SIZES (default BATCH_SIZES) on
# FAKE_PLATFORM (default PLATFORM).  The default model is steered by env vars:
# FAKE_HIDDEN (op shapes), FAKE_EXTRA_OP (one more op and kernel launches), FAKE_MANY_OPS
# (a long diff), FAKE_INCOMPLETE, FAKE_NO_SUMMARY and FAKE_TORCH (environment).
# A test module needing another model appends its own ``make_summary`` (and PLATFORM,
# BATCH_SIZES) to this text: the later definitions win.
FAKE_CONFTEST = """
import os
import pytest
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.result import CaptureResult, KeyResult
from pytest_graphcapture.summary import Summary

PLATFORM = "cpu"
BATCH_SIZES = "1,2,4"


def pytest_addhooks(pluginmanager):
    caller = getattr(pluginmanager.hook, "pytest_graphcapture_postprocess_summary", None)
    if caller is None or caller.spec is None:
        from pytest_graphcapture.plugin import hookspecs
        pluginmanager.add_hookspecs(hookspecs)


def make_summary(bs, runner, platform):
    hidden = int(os.environ.get("FAKE_HIDDEN", "256"))
    extra = os.environ.get("FAKE_EXTRA_OP") == "1"
    kernels = [{"name": "gemv_kernel" if bs < 4 else "gemm_kernel", "kind": "kernel", "count": 2},
               {"name": "elementwise_kernel", "kind": "kernel", "count": 5 if extra else 3}]
    ops = [{"name": "aten::mm", "input_dims": [[bs, hidden], [hidden, 256]], "input_types": ["float", "float"],
            "count": 2},
           {"name": "aten::add", "input_dims": [[bs, 256], [bs, 256]], "input_types": ["float", "float"], "count": 3}]
    if extra:
        ops.append({"name": "aten::relu", "input_dims": [[bs, 256]], "input_types": ["float"], "count": 2})
    for i in range(int(os.environ.get("FAKE_MANY_OPS", "0"))):
        ops.append({"name": f"aten::op{i:03d}", "input_dims": [[bs, i + 1]], "input_types": ["float"], "count": 1})
    total = sum(k["count"] for k in kernels)
    incomplete = os.environ.get("FAKE_INCOMPLETE")
    if incomplete:
        kernels = kernels[:1]
    return Summary(key=CaptureKey(runner, bs), platform=platform, kernels=kernels, ops=ops,
                   launches={"total": total, "by_api": {"cudaLaunchKernel": total}},
                   complete=not incomplete, incomplete_reason=incomplete or None,
                   environment={"torch": os.environ.get("FAKE_TORCH", "2.4.0"), "device": "FakeDevice"})


@pytest.fixture
def fake_capture():
    def capture(runner="Fake", platform=None):
        platform = platform or os.environ.get("FAKE_PLATFORM", PLATFORM)
        sizes = [int(s) for s in os.environ.get("FAKE_BATCH_SIZES", BATCH_SIZES).split(",")]
        result = CaptureResult(runner_name=runner, platform=platform)
        for bs in sorted(sizes, reverse=True):
            key = CaptureKey(runner, bs)
            summary = None if os.environ.get("FAKE_NO_SUMMARY") else make_summary(bs, runner, platform)
            result.keys[key] = KeyResult(key=key, summary=summary)
        return result
    return capture
"""

TEST_DECODE = """
def test_decode(fake_capture, golden):
    golden.check(fake_capture())


def test_other(fake_capture, golden):
    golden.check(fake_capture())
"""

#: One test with one check: a project whose goldens are those of ``test_decode`` alone.
ONE_CHECK = """
def test_decode(fake_capture, golden):
    golden.check(fake_capture())
"""


def running(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (exited, waiting for a parent to reap it) does not."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel (a zombie counts as running there)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def wait_gone(pids: list[int], within: float) -> list[int]:
    """Wait up to ``within`` seconds for every pid to stop running; return those still running."""
    import time

    deadline = time.monotonic() + within
    while True:
        alive = [pid for pid in pids if running(pid)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


@functools.cache
def engine_traces():
    """``examples/engine_traces/make_traces.py`` (builds sglang and vLLM layouts from the real sglang capture).

    Skips, saying where to put the shared real traces, when they are not found.
    """
    import importlib.util

    source = real_traces_dir() / "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
    if not source.is_file():
        pytest.skip(
            f"real trace {source.name} not found in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES to the "
            "folder holding the shared real_traces (see tests/helpers.py)"
        )
    path = REPO_ROOT / "examples" / "engine_traces" / "make_traces.py"
    spec = importlib.util.spec_from_file_location("make_traces", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.SOURCE = source
    return module


@functools.cache
def engine_capture():
    """The real capture window (``make_traces.Capture``), read once per process, less 33 of its 36 decoder layers.

    What is left (the embedding, two layers, the last one, the final norm and the logits) holds every op, kernel
    and runtime call of the window in a tenth of its events, so the many traces tests build from it read quickly.
    """
    make = engine_traces()
    capture = make.Capture(make.SOURCE)
    layer_norm = "sglang_profiler::rmsnorm_rmsnorm2d_fwd_with_add_110"  # two a layer
    norms = [i for i, event in enumerate(capture.events) if event["name"] == layer_norm]
    capture.events = capture.events[: norms[3]] + capture.events[norms[3 + 2 * 33] :]  # the same norm, 33 layers on
    return capture


_ENGINE_TRACES: dict = {}


def built_engine_traces(tmp_path_factory: pytest.TempPathFactory, layout: str, **changes) -> Path:
    """The folder of ``make_traces.build(layout, **changes)``: each distinct trace set built once per process.

    Requests that differ only by spelling out a default (``piecewise=(4, 3)``) share one folder.
    """
    import inspect

    make = engine_traces()
    options = inspect.signature(make.build).parameters
    given = {name: options[name].default for name in ("sizes", "piecewise", "drop")} | changes
    key = (layout, tuple(sorted(given.items())))
    if key not in _ENGINE_TRACES:
        folder = tmp_path_factory.mktemp(layout)
        make.build(layout, folder, capture=engine_capture(), **changes)
        _ENGINE_TRACES[key] = folder
    return _ENGINE_TRACES[key]


def check_cli(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str, str]:
    """``graphcapture check ARGS`` in this process: exit code, stdout, stderr."""
    from pytest_graphcapture.tools.cli import main

    code = main(["check", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err
