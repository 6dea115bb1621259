"""The GitHub Actions recipes in docs/ci/ (copied in examples/ci/): valid YAML, real options, working steps.

Every ``pytest`` option a workflow passes must exist (the plugin's settings, or pytest's and
installed plugins' options) with a valid value; every ``graphcapture`` command must parse
with the CLI's own parser; the report, traces and ``--golden-out`` files the gate writes must
be where the summary and upload steps look.  The CPU job's gate and summary steps are run
for real in a copy of ``examples/``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT

yaml = pytest.importorskip("yaml", reason="pyyaml is in the test extras: pip install -e '.[test]'")

from pytest_graphcapture.plugin.settings import SETTINGS
from pytest_graphcapture.tools.cli import build_parser

REPO = REPO_ROOT
RECIPES = {"cpu.yml": "ubuntu-latest", "nvidia.yml": "nvidia", "rocm.yml": "rocm"}


def load(name: str) -> dict:
    data = yaml.safe_load((REPO / "docs" / "ci" / name).read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"docs/ci/{name}: not a YAML mapping"
    return data


def the_job(data: dict) -> dict:
    jobs = data.get("jobs")
    assert isinstance(jobs, dict) and len(jobs) == 1, "one job per recipe"
    return next(iter(jobs.values()))


def steps(name: str) -> list[dict]:
    return the_job(load(name))["steps"]


def commands(script: str) -> list[list[str]]:
    """Shell words of each simple command in a ``run:`` script (lines, ``&&``, ``;`` split)."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        for part in re.split(r"&&|;|\|\|", line):
            words = shlex.split(part, comments=True)
            if words:
                out.append(words)
    return out


def gate_command(name: str) -> list[str]:
    for step in steps(name):
        for words in commands(step.get("run", "")):
            if words[:3] == ["python", "-m", "pytest"]:
                return words[3:]
    raise AssertionError(f"docs/ci/{name}: no 'python -m pytest' step")


def option_value(args: list[str], option: str) -> str:
    for i, arg in enumerate(args):
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
        if arg == option:
            return args[i + 1]
    raise AssertionError(f"{option} not passed")


@pytest.fixture(scope="module")
def pytest_options() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", done.stdout)) | {"-p", "-n", "-q", "-v", "-x"}


def test_examples_copies_are_identical() -> None:
    for name in RECIPES:
        assert (REPO / "examples" / "ci" / name).read_bytes() == (REPO / "docs" / "ci" / name).read_bytes(), (
            f"examples/ci/{name} differs from docs/ci/{name}: copy it again"
        )


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_shape(name: str) -> None:
    data = load(name)
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert triggers and "pull_request" in triggers, f"{name}: should run on pull requests"
    job = the_job(data)
    runs_on = job["runs-on"]
    if name == "cpu.yml":
        assert runs_on == "ubuntu-latest"
    else:
        assert isinstance(runs_on, list) and "self-hosted" in runs_on and RECIPES[name] in runs_on, runs_on
    uses = [s.get("uses", "") for s in job["steps"]]
    assert any(u.startswith("actions/checkout@") for u in uses)

    args = gate_command(name)
    trace_dir = option_value(args, "--graph-capture-dir")
    golden_out = option_value(args, "--golden-out")
    report = option_value(args, "--graph-capture-report")
    assert "--graph-capture-trace" in args
    device = option_value(args, "--graph-capture-device")
    assert device == ("cpu" if name == "cpu.yml" else "cuda"), "GPU jobs must not fall back to CPU goldens"
    assert "--update-golden" not in " ".join(args), "updating goldens is refused on CI"

    summary = [s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert len(summary) == 1 and summary[0].get("if") == "always()", "publish the report even when the gate fails"
    assert f'cat {report} >> "$GITHUB_STEP_SUMMARY"' in summary[0]["run"]

    upload = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert len(upload) == 1 and upload[0].get("if") == "always()", "upload the artifacts even when the gate fails"
    paths = [p.strip().rstrip("/") for p in upload[0]["with"]["path"].splitlines() if p.strip()]
    covered = lambda target: any(target == p or target.startswith(p + "/") for p in paths)  # noqa: E731
    for target in (trace_dir, golden_out, str(Path(report).with_suffix(".html"))):
        assert covered(target), f"{name}: {target} is written by the gate but not uploaded ({paths})"


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_option_and_command_exists(name: str, pytest_options: set[str]) -> None:
    ours = {s.option: s for s in SETTINGS.values()}
    parser = build_parser()
    seen_gate = False
    for step in steps(name):
        for words in commands(step.get("run", "")):
            if words[:3] == ["python", "-m", "pytest"]:
                seen_gate = True
                for arg in words[3:]:
                    if not arg.startswith("--"):
                        continue
                    option, _, value = arg.partition("=")
                    assert option in pytest_options, f"{name}: pytest has no option {option}"
                    setting = ours.get(option)
                    if setting is not None and setting.choices and value:
                        assert value in setting.choices, f"{name}: {arg}: not one of {setting.choices}"
            elif words[0] == "graphcapture":
                try:
                    parser.parse_args(words[1:])
                except SystemExit:
                    raise AssertionError(f"{name}: graphcapture does not accept {' '.join(words[1:])}") from None
    assert seen_gate


@pytest.mark.slow
def test_cpu_job_gate_and_summary_steps_run(tmp_path: Path) -> None:
    """Run the CPU recipe's gate and summary steps as the runner would (CI=true), in a copy of examples/."""
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__"))
    summary_file = tmp_path / "step_summary.md"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPH_CAPTURE_", "PYTEST_"))}
    env.update(
        CI="true",
        GITHUB_ACTIONS="true",
        GITHUB_STEP_SUMMARY=str(summary_file),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    for step in steps("cpu.yml"):
        script = step.get("run", "")
        if "pip install" in script or not script:
            continue  # the plugin is installed already; actions are GitHub's
        done = subprocess.run(
            ["bash", "-eo", "pipefail", "-c", script.replace("python -m", f"{sys.executable} -m")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"step {step.get('name')!r} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}"
    args = gate_command("cpu.yml")
    report = tmp_path / option_value(args, "--graph-capture-report")
    assert summary_file.read_text() == report.read_text() and "## Graph capture goldens" in report.read_text()
    assert "[report.html](<report.html>)" in report.read_text()
    assert report.with_suffix(".html").read_text().startswith("<!DOCTYPE html>")
    assert list((tmp_path / option_value(args, "--golden-out") / "cpu").rglob("*.json"))
    assert list((tmp_path / option_value(args, "--graph-capture-dir") / "graph_capture_profile").rglob("*.json.gz"))
