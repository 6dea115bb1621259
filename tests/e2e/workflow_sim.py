"""Run a GitHub Actions workflow's shell steps the way the runner does, for the CI recipe tests.

Only what the recipes use is simulated, and anything else is refused (so a recipe cannot rely on
something this stand-in gets wrong): ``run:`` steps in bash with ``-eo pipefail``; environment from
the workflow's, the job's and the step's ``env:``; ``if: always()`` (a step without ``if:`` runs only
while every earlier step passed); ``$GITHUB_STEP_SUMMARY`` and ``$GITHUB_PATH``; the expressions
the recipes use outside ``run:`` (an upload step's ``artifact-url``, ``env.NAME``). ``uses:`` steps are not run:
checkout and setup-python are what the caller's folder and PATH already are, and an upload step
is checked to find the paths it names and given an artifact URL.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
ARTIFACT_URL = "https://github.com/owner/engine/actions/runs/1/artifacts/{n}"


@dataclass
class StepResult:
    name: str
    returncode: int | None  # None: skipped
    output: str = ""
    seconds: float = 0.0


@dataclass
class WorkflowRun:
    steps: list[StepResult] = field(default_factory=list)
    summary: str = ""
    uploaded: dict[str, list[Path]] = field(default_factory=dict)  # artifact name -> paths found

    def step(self, name: str) -> StepResult:
        return next(s for s in self.steps if s.name == name)

    @property
    def passed(self) -> bool:
        """Every step ran and passed."""
        return all(s.returncode == 0 for s in self.steps)


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path}: not a YAML mapping"
    return data


def the_job(workflow: dict) -> dict:
    jobs = workflow.get("jobs")
    assert isinstance(jobs, dict) and len(jobs) == 1, "one job per recipe"
    return next(iter(jobs.values()))


def step_name(step: dict) -> str:
    return step.get("name") or step.get("uses", "").split("@")[0]


def run_workflow(
    path: Path,
    cwd: Path,
    *,
    env: dict[str, str],
    settings: dict[str, str] | None = None,
    stop_after: int | None = None,
    already_done: tuple[str, ...] = (),
    timeout: float = 600,
) -> WorkflowRun:
    """Run ``path``'s job in ``cwd`` with the base ``env``; ``settings`` edit the workflow's ``env:`` block.

    ``stop_after``: the index of the last step to run. ``already_done``: names of steps whose effect the
    environment already holds (an install on a runner that keeps its packages), counted as passed.
    """
    workflow = load(path)
    job = the_job(workflow)
    declared = {k: str(v) for k, v in (workflow.get("env") or {}).items()}
    unknown = set(settings or {}) - set(declared)
    assert not unknown, f"{path.name} has no setting {sorted(unknown)} in its env block"
    declared.update(settings or {})
    summary_file = cwd.parent / f"{cwd.name}-step-summary.md"
    path_file = cwd.parent / f"{cwd.name}-github-path"
    summary_file.write_text("")
    path_file.write_text("")
    outputs: dict[str, dict[str, str]] = {}
    result = WorkflowRun()
    failed = False
    for index, step in enumerate(job["steps"]):
        if stop_after is not None and index > stop_after:
            break
        name = step_name(step)
        if name in already_done:
            result.steps.append(StepResult(name, 0, "(already done)"))
            continue
        condition = step.get("if")
        assert condition in (None, "always()"), f"{path.name}: step {name!r}: `if: {condition}` is not simulated"
        if failed and condition != "always()":
            result.steps.append(StepResult(name, None))
            continue
        if "uses" in step:
            outcome = _uses(step, cwd, lambda text: _expression(text, outputs, declared, path.name), outputs, result)
            result.steps.append(outcome)
            failed = failed or outcome.returncode != 0
            continue
        extra_path = [line for line in path_file.read_text().splitlines() if line]
        step_env = {**env, **declared, **{k: str(v) for k, v in (job.get("env") or {}).items()}}
        for key, value in (step.get("env") or {}).items():
            step_env[key] = EXPRESSION.sub(lambda m: _expression(m.group(1), outputs, declared, path.name), str(value))
        step_env.update(
            CI="true",
            GITHUB_ACTIONS="true",
            GITHUB_STEP_SUMMARY=str(summary_file),
            GITHUB_PATH=str(path_file),
            PATH=os.pathsep.join([*reversed(extra_path), env["PATH"]]),
        )
        assert "${{" not in step["run"], f"{path.name}: step {name!r}: an expression inside run: (use env:)"
        start = time.monotonic()
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
            cwd=cwd,
            env=step_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
        result.steps.append(StepResult(name, done.returncode, done.stdout, time.monotonic() - start))
        failed = failed or done.returncode != 0
    result.summary = summary_file.read_text()
    return result


def _uses(step: dict, cwd: Path, evaluate, outputs: dict[str, dict[str, str]], result: WorkflowRun) -> StepResult:
    action = step["uses"].split("@")[0]
    if action in ("actions/checkout", "actions/setup-python"):
        return StepResult(action, 0)
    assert action == "actions/upload-artifact", f"{action}: not simulated"
    inputs = step.get("with") or {}
    text = EXPRESSION.sub(lambda m: evaluate(m.group(1)), str(inputs.get("path", "")))
    paths = [p.strip() for p in text.splitlines() if p.strip()]
    found = [cwd / p for p in paths if (cwd / p).exists()]
    if not found and inputs.get("if-no-files-found") != "ignore":
        return StepResult(step_name(step), 1, f"no files found under {paths}")
    result.uploaded[str(inputs.get("name"))] = found
    if step.get("id") and found:
        outputs[step["id"]] = {"artifact-url": ARTIFACT_URL.format(n=len(result.uploaded))}
    return StepResult(step_name(step), 0)


def _expression(text: str, outputs: dict[str, dict[str, str]], declared: dict[str, str], recipe: str) -> str:
    if re.fullmatch(r"env\.\w+", text):
        return declared[text[4:]]
    match = re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", text)
    assert match, f"{recipe}: expression {text!r} in an env value is not simulated"
    return outputs.get(match.group(1), {}).get(match.group(2), "")
