"""The golden tree and the session's output files as users run them: nothing lost, nothing false.

* one writer at a time on a golden tree (a second ``--update-golden`` run fails with one line);
* a golden or a harvest file that is a FIFO is refused, never read (which would block forever);
* report and harvest paths that cannot be written fail the run, naming the option;
* each session starts from an empty harvest folder and an empty folder of full diffs;
* failures name long key lists as batch-size ranges and a re-run command that works from the
  invocation directory;
* the report counts what was written.

Cases about the golden tree run in-process and under ``-n 2``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import FAKE_CONFTEST, REPO_ROOT, TEST_DECODE, isolated_checkout, run
from warm_python import warm_python

from pytest_graphcapture.golden.store import LOCK_NAME, GoldenLock

FOLDER = "cpu/test_model.py/test_decode"
OTHER = "cpu/test_model.py/test_other"
XDIST = pytest.param(("-n", "2"), id="xdist")
MODES = [pytest.param((), id="one-process"), XDIST]


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    isolated_checkout(monkeypatch)
    pytester.makeconftest(FAKE_CONFTEST)
    pytester.makepyfile(test_model=TEST_DECODE)
    return pytester


def pytest_run(project: pytest.Pytester, mode: tuple, *args: str, bounded: bool = False) -> pytest.RunResult:
    """In-process, or in a subprocess with ``-n 2``; ``bounded`` runs a subprocess either way, so a hang
    fails the test instead of hanging the suite."""
    if mode or bounded:
        return run(project, *mode, *args, subprocess=True, timeout=120, warm=True)
    return run(project, *args)


def goldens(project: pytest.Pytester) -> dict[str, bytes]:
    base = project.path / "goldens"
    return {p.relative_to(base).as_posix(): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


# --------------------------------------------------------------------------- one writer at a time


@pytest.mark.parametrize("mode", MODES)
def test_a_second_writer_of_the_golden_tree_is_refused_with_one_line(
    project: pytest.Pytester, mode: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, "--update-golden").assert_outcomes(passed=2)
    before = goldens(project)
    lock = GoldenLock(project.path / "goldens")  # another run writing this tree
    lock.acquire()
    try:
        result = pytest_run(project, mode, "--update-golden")
    finally:
        lock.release()
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(
        [f"*--update-golden: *goldens: another pytest run (pid {os.getpid()}) is writing goldens here*"]
    )
    assert "Traceback" not in result.stderr.str()
    assert goldens(project) == before
    # Once the other writer is done, the next run writes (its xdist workers are not locked out by their controller).
    monkeypatch.setenv("FAKE_HIDDEN", "64")
    result = pytest_run(project, mode, "--update-golden")
    result.assert_outcomes(passed=2)
    assert goldens(project) != before
    assert not (project.path / "goldens" / LOCK_NAME).exists()


def test_two_independent_update_runs_never_interleave(project: pytest.Pytester) -> None:
    """The first writer holds the tree for its whole session; the second exits at once, the tree is the first's."""
    project.makeconftest(
        FAKE_CONFTEST
        + """

def pytest_graphcapture_postprocess_summary(config, summary):
    import time
    release = os.environ.get("FAKE_RELEASE")  # the first writer holds on until the test lets it go
    deadline = time.monotonic() + 60
    while release and not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.02)
"""
    )
    release = project.path / "release"
    env = {**os.environ, "FAKE_RELEASE": str(release), "PYTHONPATH": str(REPO_ROOT)}
    args = [warm_python(), "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--update-golden"]
    first = subprocess.Popen(args, cwd=project.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while not (project.path / "goldens" / LOCK_NAME).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    second = subprocess.run(
        args, cwd=project.path, env={**env, "FAKE_RELEASE": "", "FAKE_HIDDEN": "64"}, capture_output=True, timeout=120
    )
    release.touch()  # only now may the first writer finish: the second ran while it held the tree
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0, out.decode()
    assert second.returncode == pytest.ExitCode.USAGE_ERROR, second.stdout.decode()
    assert b"is writing goldens here" in second.stderr
    data = [json.loads(v) for k, v in goldens(project).items() if k.endswith(".json")]
    assert len(data) == 6 and all(d["ops"][0]["input_dims"][0][1] == 256 for d in data)  # only the first run's


# --------------------------------------------------------------------------- FIFOs are refused


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("update", [(), ("--update-golden",)], ids=["check", "update"])
def test_a_golden_that_is_a_fifo_fails_its_key_instead_of_hanging(
    project: pytest.Pytester, mode: tuple, update: tuple
) -> None:
    """The check run is also the harvest of a folder holding a FIFO (``test_other``'s bs=1): it is replaced."""
    run(project, "--update-golden").assert_outcomes(passed=2)
    harvest = () if update else ("--golden-out=obtained",)
    if harvest:
        run(project, *harvest).assert_outcomes(passed=2)
        left = project.path / "obtained" / OTHER / "Fake_bs_1.json"
        left.unlink()
        os.mkfifo(left)
    fifo = project.path / "goldens" / FOLDER / "Fake_bs_2.json"
    fifo.unlink()
    os.mkfifo(fifo)
    result = pytest_run(project, mode, *update, *harvest, bounded=True)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"*goldens/{FOLDER}/Fake_bs_2.json: is a FIFO, not a regular file*"])
    assert fifo.is_fifo()  # neither read nor replaced
    if harvest:  # a FIFO left in our harvest folder does not block the harvest
        assert left.is_file() and not left.is_fifo()


def test_writing_over_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    code = (
        "import sys; from pytest_graphcapture.golden.store import write_golden\n"
        "try:\n    write_golden(sys.argv[1], {'schema_version': 1})\n"
        "except Exception as exc:\n    print(exc)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}  # in a process of its own: a blocked read ends in a timeout
    done = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, env=env, timeout=60)
    assert done.stdout.strip() == f"{fifo}: is a FIFO, not a regular file"


# --------------------------------------------------------------------------- output paths say what was written


@pytest.mark.parametrize(
    "args, message",
    [
        (["--golden-out=afile"], "*--golden-out afile: is a file, expected a folder for the summaries*"),
        (["--graph-capture-report=adir"], "*--graph-capture-report adir: is a folder, expected a file name*"),
        (["--graph-capture-json=adir"], "*--graph-capture-json adir: is a folder, expected a file name*"),
        (["--golden-out=."], "*--golden-out .: holds the golden dir goldens; the harvest goes to a folder*"),
    ],
)
def test_output_paths_that_cannot_be_written_are_usage_errors(
    project: pytest.Pytester, args: list, message: str
) -> None:
    (project.path / "afile").write_text("x")
    (project.path / "adir").mkdir()
    result = run(project, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "written" not in result.stdout.str()


def test_an_unwritable_report_fails_the_run_and_is_not_announced(project: pytest.Pytester) -> None:
    run(project, "--update-golden").assert_outcomes(passed=2)
    (project.path / "afile").write_text("x")
    result = run(project, "--graph-capture-json=afile/report.json", "--graph-capture-report=report.md")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["error: --graph-capture-json afile/report.json: not written: *"])
    assert "report written to afile/report.json" not in result.stdout.str()
    result.stdout.fnmatch_lines(["report written to report.md"])


def test_harvest_files_that_cannot_be_written_fail_the_run(project: pytest.Pytester) -> None:
    run(project, "--update-golden").assert_outcomes(passed=2)
    project.makeconftest(
        FAKE_CONFTEST
        + """

@pytest.fixture(autouse=True)
def block_the_harvest():
    folder = os.path.join("obtained", "cpu", "test_model.py")
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, "test_decode"), "w").close()  # a file where the test's folder goes
"""
    )
    result = run(project, "--golden-out=obtained")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["error: --golden-out: *"])
    assert "obtained summaries written under" not in result.stdout.str()


# --------------------------------------------------------------------------- each session starts afresh


def test_each_session_starts_from_an_empty_harvest_folder(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2,4,8")
    run(project, "--golden-out=obtained").assert_outcomes(failed=2)
    assert (project.path / "obtained" / FOLDER / "Fake_bs_8.json").is_file()
    monkeypatch.setenv("FAKE_BATCH_SIZES", "1,2")
    run(project, "--golden-out=obtained", "-k", "test_decode").assert_outcomes(failed=1)
    harvested = sorted(
        p.relative_to(project.path / "obtained").as_posix() for p in project.path.rglob("obtained/**/*.json")
    )
    assert harvested == [f"{FOLDER}/Fake_bs_1.json", f"{FOLDER}/Fake_bs_2.json"]


def test_a_harvest_folder_with_foreign_files_is_refused_not_emptied(project: pytest.Pytester) -> None:
    (project.path / "mine").mkdir()
    (project.path / "mine" / "notes.txt").write_text("keep me")
    result = run(project, "--golden-out=mine")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--golden-out mine: the folder holds files pytest-graphcapture did not write*"])
    assert (project.path / "mine" / "notes.txt").read_text() == "keep me"


# --------------------------------------------------------------------------- long failures stay readable


def test_many_failing_sizes_are_named_as_a_range_and_full_diffs_go_to_one_reset_folder(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_BATCH_SIZES", ",".join(str(bs) for bs in range(1, 257)))
    run(project, "--update-golden", "-k", "test_decode").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_HIDDEN", "64")
    result = run(project, "-k", "test_decode")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "graph capture of Fake does not match its goldens for bs=1…256 (256 sizes) "
            "(platform cpu, level name, 256 of 256 keys)",
            "failed: test_model.py::test_decode (bs=1…256 (256 sizes))",
        ]
    )
    assert max(len(line) for line in result.outlines) < 300
    full = [line for line in result.outlines if "diff in " in line]
    assert full, result.stdout.str()
    diff_file = project.path / full[0].split("diff in ", 1)[1].strip()
    folder = diff_file.parent
    assert diff_file.is_file()
    (folder / "stale-from-an-earlier-session.txt").write_text("old")
    monkeypatch.delenv("FAKE_HIDDEN")
    run(project, "-k", "test_decode").assert_outcomes(passed=1)
    assert list(folder.iterdir()) == []  # the same folder, emptied by the next session


# --------------------------------------------------------------------------- commands that work where the user is


def test_the_accept_command_works_from_the_invocation_directory(project: pytest.Pytester) -> None:
    sub = project.path / "examples"
    sub.mkdir()
    (project.path / "test_model.py").rename(sub / "test_model.py")
    (project.path / "conftest.py").rename(sub / "conftest.py")
    (sub / "pytest.ini").write_text("[pytest]\n")  # the rootdir is examples/, pytest runs from its parent
    result = run(project, "examples/test_model.py")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["create them with: pytest examples/test_model.py::test_decode --update-golden"])
    accept = run(project, "examples/test_model.py::test_decode", "--update-golden")
    accept.assert_outcomes(passed=1)


# --------------------------------------------------------------------------- the report counts what was written

BUDGET_CONFTEST = (
    FAKE_CONFTEST
    + """

def make_summary(bs, runner, platform):
    total = 100 + bs + int(os.environ.get("FAKE_EXTRA_LAUNCHES", "0"))
    return Summary(key=CaptureKey(runner, bs), platform=platform,
                   kernels=[{"name": "gemm_kernel", "kind": "kernel", "count": total}], ops=[],
                   launches={"total": total, "by_api": {"cudaLaunchKernel": total}})
"""
)


def test_a_rewritten_key_over_its_budget_counts_as_updated(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makeconftest(BUDGET_CONFTEST)
    run(project, "--update-golden", "-k", "test_decode").assert_outcomes(passed=1)
    path = project.path / "goldens" / FOLDER / "Fake_bs_4.json"
    data = json.loads(path.read_text())
    data["launch_budget"] = 105
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    before = goldens(project)
    monkeypatch.setenv("FAKE_EXTRA_LAUNCHES", "2")  # every key changes; bs=4 (106 launches) is over its budget
    result = run(project, "--update-golden", "-k", "test_decode", "--graph-capture-json=report.json")
    result.assert_outcomes(failed=1)
    changed = [k for k, v in goldens(project).items() if before.get(k) != v]
    assert len(changed) == 3
    totals = json.loads((project.path / "report.json").read_text())["totals"]
    assert totals["updated"] == 3 and totals["failed"] == 0
