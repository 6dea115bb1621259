"""The torch matrix: scripts/compat.sh's plumbing, the table it writes, and the claims built on that table.

compat.sh itself installs torch builds of several GB, so its plumbing runs here against stand-in
venvs (a ``pip`` and a ``python`` that record what they are asked and answer like pytest); the
real runs are the rows of docs/compatibility.md.  The claims: pyproject's torch bound is the oldest
release whose main job passed, none the bound admits failed it, and the CI matrix runs the oldest
and the newest passing release.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT

yaml = pytest.importorskip("yaml", reason="pyyaml is in the test extras: pip install -e '.[test]'")

SCRIPT = REPO_ROOT / "scripts" / "compat.sh"
COMPAT_DOC = REPO_ROOT / "docs" / "compatibility.md"
WORKFLOW = REPO_ROOT / ".github" / "workflows" / "torch-matrix.yml"  # this repository's own, not a recipe to copy

FAKE_PIP = """#!/usr/bin/env bash
{ echo "constraint=$(cat "${PIP_CONSTRAINT:-/dev/null}" | tr '\\n' ' ')"; echo "args=$*"; } >>"$(dirname "$0")/../pip-calls"
"""
# Answers like pytest from the venv's suite.txt / main-job.txt (closing line, then exit code).
FAKE_PYTHON = """#!/usr/bin/env bash
here="$(dirname "$0")/.."
case "$1 $2" in *_KinetoEvent*) echo "activity_type False, metadata_json False"; exit 0 ;; -c*) echo '`X+cpu` (CPU build, Python 3.11.0)'; exit 0 ;; esac
case " $* " in *" examples "*) answer="$here/main-job.txt" ;; *) answer="$here/suite.txt" ;; esac
echo "cwd=$PWD args=$*" >>"$here/python-calls"
head -1 "$answer"; exit "$(tail -1 "$answer")"
"""


def fake_venv(root: Path, version: str, suite: str, main_job: str) -> Path:
    venv = root / f"torch-{version}"
    (venv / "bin").mkdir(parents=True)
    for name, text in (("pip", FAKE_PIP), ("python", FAKE_PYTHON)):
        path = venv / "bin" / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    (venv / "suite.txt").write_text(suite)
    (venv / "main-job.txt").write_text(main_job)
    return venv


def compat(*args: str, script: Path = SCRIPT) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_CONSTRAINT", "PYTHONPATH")}
    return subprocess.run(["bash", str(script), *args], env=env, capture_output=True, text=True, timeout=300)


def checkout(tmp_path: Path) -> tuple[Path, str]:
    """A git clone holding compat.sh and one commit (the suite itself may run from an export, without .git)."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(SCRIPT, repo / "scripts" / "compat.sh")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return repo / "scripts" / "compat.sh", commit


def test_each_release_is_pinned_run_recorded_as_a_table_row_and_its_venv_freed(tmp_path: Path) -> None:
    root = tmp_path / "compat"
    old = fake_venv(root, "9.9.0", "3 failed, 700 passed in 9.5s\n1\n", "10 passed in 1.5s\n0\n")
    new = fake_venv(root, "9.10.1", "731 passed, 1 skipped in 99.0s\n0\n", "10 passed in 2.0s\n0\n")
    calls = {venv: (venv / "pip-calls", venv / "python-calls") for venv in (old, new)}
    seen = {}
    script, commit = checkout(tmp_path)

    # The venvs are removed once recorded; keep what they were asked.
    done = compat(
        "--root",
        str(root),
        "--jobs",
        "2",
        "--index-url",
        "https://example.invalid/cpu",
        "--keep",
        "9.9.0",
        "9.10.1",
        script=script,
    )
    for venv, (pip_calls, python_calls) in calls.items():
        seen[venv.name] = (pip_calls.read_text(), python_calls.read_text())
    assert done.returncode == 1, done.stdout + done.stderr  # one release failed its suite

    pip_calls, python_calls = seen["torch-9.9.0"]
    torch_install, project_install = pip_calls.split("constraint=")[1:]
    # Every pip call is held to the tested release, so installing the project cannot swap torch.
    assert torch_install.startswith("torch==9.9.0 ") and project_install.startswith("torch==9.9.0 ")
    assert "--index-url https://example.invalid/cpu torch==9.9.0" in torch_install
    assert "--index-url" not in project_install and f"numpy -e {root}/src-{commit}[test]" in project_install
    # The main job first (its result comes early), then the suite with the jobs asked for; both in the export.
    main_job, suite = python_calls.splitlines()
    assert (
        f"cwd={root}/src-{commit} " in main_job and " examples --graph-capture-trace --graph-capture-dir=" in main_job
    )
    assert f"cwd={root}/src-{commit} " in suite and suite.endswith("-m pytest -q -p no:cacheprovider -n 2")

    assert (root / "results" / "9.9.0.txt").read_text() == (
        "version: 9.9.0\nbuild: `X+cpu` (CPU build, Python 3.11.0)\n"
        "tests: FAILED: 3 failed, 700 passed in 9.5s (exit 1)\nmain-job: 10 passed in 1.5s\n"
        f"commit: {commit}\ncaps: activity_type False, metadata_json False\n"
    )
    table = (root / "results" / "table.md").read_text().splitlines()
    assert table == [
        "| torch | build | test suite | main job | commit |",
        "|---|---|---|---|---|",
        f"| 9.10.1 | `X+cpu` (CPU build, Python 3.11.0) | 731 passed, 1 skipped in 99.0s | 10 passed in 2.0s | `{commit}` |",
        f"| 9.9.0 | `X+cpu` (CPU build, Python 3.11.0) | FAILED: 3 failed, 700 passed in 9.5s (exit 1) | 10 passed in 1.5s | `{commit}` |",
    ]
    assert old.exists() and new.exists()  # --keep

    # Without --keep the venv goes once its row is written; --table prints the rows so far.
    fake_venv(root / "again", "9.9.0", "700 passed in 9.0s\n0\n", "10 passed in 1.0s\n0\n")
    done = compat("--root", str(root / "again"), "9.9.0", script=script)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (root / "again" / "torch-9.9.0").exists()
    listed = compat("--root", str(root / "again"), "--table", script=script)
    assert (
        listed.returncode == 0
        and f"| 9.9.0 | `X+cpu` (CPU build, Python 3.11.0) | 700 passed in 9.0s | 10 passed in 1.0s | `{commit}` |"
        in listed.stdout
    )


def rows() -> list[dict]:
    """The measured rows of docs/compatibility.md's table (torch release, suite, main job)."""
    out = []
    for line in COMPAT_DOC.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 5 and re.fullmatch(r"\d+\.\d+\.\d+", cells[0]):
            out.append({"torch": cells[0], "suite": cells[2], "main_job": cells[3]})
    assert out, "docs/compatibility.md: no table rows"
    return out


def ran(row: dict) -> bool:
    """Whether the row's main job ran (rows not run are listed with the reason, never guessed)."""
    return not row["main_job"].startswith("not run")


def passed(row: dict) -> bool:
    """Whether the row's main job checked the goldens and passed (the suite's failures are explained in the text)."""
    return bool(re.match(r"\d+ passed", row["main_job"])) and "failed" not in row["main_job"]


def release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def test_the_torch_bound_is_the_oldest_release_whose_main_job_passed() -> None:
    pyproject = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    bound = re.search(r'"torch>=([0-9.]+)"', pyproject)
    assert bound, "pyproject.toml: no torch>= bound"
    oldest = min((row for row in rows() if passed(row)), key=lambda row: release(row["torch"]))
    assert release(oldest["torch"])[:2] == release(bound.group(1))[:2], (
        f"pyproject says torch>={bound.group(1)}, the oldest passing row of docs/compatibility.md is {oldest['torch']}"
    )
    for row in rows():  # no release the bound admits failed its main job
        assert not ran(row) or passed(row) or release(row["torch"]) < release(oldest["torch"]), f"failed: {row}"
    assert f"torch>={bound.group(1)}" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def test_the_ci_matrix_runs_the_oldest_and_newest_supported_release() -> None:
    data = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert "pull_request" in triggers
    (job,) = data["jobs"].values()
    good = sorted((row["torch"] for row in rows() if passed(row)), key=release)
    assert job["strategy"]["matrix"]["torch"] == [good[0], good[-1]]
    assert job["strategy"].get("fail-fast") is False, "one end failing must not cancel the other"
    runs = [step for step in job["steps"] if "scripts/compat.sh" in step.get("run", "")]
    assert len(runs) == 1 and runs[0]["run"].rstrip().endswith('"$TORCH_RELEASE"')
    assert runs[0]["env"]["TORCH_RELEASE"] == "${{ matrix.torch }}", "the release comes from the matrix"
    usage = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True).stdout
    for option in re.findall(r"(?<![\w-])--[a-z-]+", runs[0]["run"]):
        assert f"[{option}" in usage, f"{WORKFLOW.name}: compat.sh has no option {option}"


def test_every_torch_capability_the_plugin_consults_is_documented_and_probed() -> None:
    from pytest_graphcapture.summary.platform import CAPABILITIES, EventCaps

    doc = COMPAT_DOC.read_text(encoding="utf-8")
    for capability in CAPABILITIES:
        assert f"`{capability.probe}`" in doc, f"docs/compatibility.md does not list {capability.probe}"
    event_probes = {c.probe.split(".", 1)[1] for c in CAPABILITIES if c.probe.startswith("_KinetoEvent.")}
    assert event_probes == set(EventCaps.__dataclass_fields__), (
        "CAPABILITIES and EventCaps list different event methods"
    )
