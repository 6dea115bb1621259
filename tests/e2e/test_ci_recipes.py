"""The GitHub Actions recipes in docs/ci/ (copied in examples/ci/): their shape, real options, safety and lint.

Every ``pytest`` option a recipe passes must exist (the plugin's settings, or pytest's and installed
plugins' options) with a valid value; every ``graphcapture`` command must parse with the CLI's own
parser; the report and harvest each gate writes must be what the upload and summary steps take.
Safe by default: read-only token, no persisted credentials, actions pinned to commits, one run per
pull request, GPU jobs closed to fork pull requests, zizmor clean, valid against GitHub's schema.
The recipes' steps are run in tests/e2e/test_ci_recipes_run.py.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from workflow_sim import load, the_job

pytest.importorskip("yaml", reason="pyyaml is in the test extras: pip install -e '.[test]'")

from pytest_graphcapture.plugin.settings import SETTINGS
from pytest_graphcapture.tools.cli import build_parser

REPO = REPO_ROOT
#: The recipes users copy: {file: the runner label}; the pytest gates, then the engine-trace gate.
PYTEST_GATES = {"cpu.yml": "ubuntu-latest", "nvidia.yml": "nvidia", "rocm.yml": "rocm"}
TRACE_GATES = {"engine-traces.yml": "nvidia"}
RECIPES = {**PYTEST_GATES, **TRACE_GATES}
#: This repository's own workflows: held to the same safety rules, never offered for copying.
OWN_WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
ALL_WORKFLOWS = [REPO / "docs" / "ci" / name for name in RECIPES] + OWN_WORKFLOWS
PIN = re.compile(r"^\s*(?:-\s+)?uses:\s+([\w.-]+/[\w.-]+)@(\S+)\s+#\s+(v\d+\.\d+\.\d+)\s*$")


def steps(name: str) -> list[dict]:
    return the_job(load(REPO / "docs" / "ci" / name))["steps"]


def commands(script: str) -> list[list[str]]:
    """Shell words of each simple command in a ``run:`` script (split at lines, ``;``, ``&&``, ``||``, ``|``)."""
    out = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words: list[str] = []
        for token in lexer:
            if set(token) <= set(";&|"):
                out, words = out + [words] * bool(words), []
            else:
                words.append(token)
        if words:
            out.append(words)
    return out


def gate_command(name: str) -> list[str]:
    for step in steps(name):
        for words in commands(step.get("run", "")):
            if words[:3] == ["python", "-m", "pytest"] or words[:2] == ["graphcapture", "check"]:
                return words
    raise AssertionError(f"docs/ci/{name}: no gate step")


def option_value(args: list[str], option: str) -> str:
    for i, arg in enumerate(args):
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
        if arg == option:
            return args[i + 1]
    raise AssertionError(f"{option} not passed")


def tool(name: str) -> str:
    """A linter from the test extras, next to this Python, or a skip saying how to install it."""
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if not found:
        pytest.skip(f"{name} is in the test extras: pip install -e '.[test]'")
    return found


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
    docs = sorted(p.name for p in (REPO / "docs" / "ci").iterdir())
    assert docs == sorted(p.name for p in (REPO / "examples" / "ci").iterdir()), "examples/ci/ mirrors docs/ci/"
    assert set(RECIPES) <= set(docs) and set(docs) - set(RECIPES) == {"actionlint.yaml"}
    for name in docs:
        assert (REPO / "examples" / "ci" / name).read_bytes() == (REPO / "docs" / "ci" / name).read_bytes(), (
            f"examples/ci/{name} differs from docs/ci/{name}: copy it again"
        )


def test_no_recipe_to_copy_runs_this_repositorys_own_scripts_or_examples() -> None:
    for name in RECIPES:
        text = (REPO / "docs" / "ci" / name).read_text(encoding="utf-8")
        for words in (w for s in steps(name) for w in commands(s.get("run", ""))):
            assert "examples" not in words and not any(w.startswith("scripts/") for w in words), (name, words)
        assert "compat.sh" not in text, name


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_recipe_shape(name: str) -> None:
    data = load(REPO / "docs" / "ci" / name)
    triggers = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as True
    assert triggers and "pull_request" in triggers, f"{name}: should run on pull requests"
    job = the_job(data)
    runs_on = job["runs-on"]
    if name == "cpu.yml":
        assert runs_on == "ubuntu-latest"
    else:
        assert isinstance(runs_on, list) and "self-hosted" in runs_on and RECIPES[name] in runs_on, runs_on
    assert job["steps"][0]["name"] == "Check the settings at the top of this workflow"
    assert job["steps"][0]["run"] == steps("cpu.yml")[0]["run"], "one settings check, the same in every recipe"

    args = gate_command(name)
    if name in PYTEST_GATES:
        assert args[3] == "$TEST_PATH" and data["env"]["TEST_PATH"] == "tests", "the user's tests, by default tests/"
        report = option_value(args, "--graph-capture-report")
        golden_out = option_value(args, "--golden-out")
        written = [option_value(args, "--graph-capture-dir"), golden_out]
        assert "--graph-capture-trace" in args
        device = option_value(args, "--graph-capture-device")
        assert device == ("cpu" if name == "cpu.yml" else "cuda"), "GPU jobs must not fall back to CPU goldens"
    else:
        assert args[2] == "$TRACE_DIR" and option_value(args, "--golden-dir") == "$GOLDEN_DIR"
        report = option_value(args, "--report-md")
        golden_out = option_value(args, "--golden-out")
        written = ["${{ env.TRACE_DIR }}", golden_out]
    assert "--update-golden" not in args and "--update" not in args, "updating goldens is refused on CI"

    names = [s.get("name", s.get("uses", "")) for s in job["steps"]]
    upload = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert len(upload) == 1 and upload[0].get("if") == "always()", "upload the artifacts even when the gate fails"
    paths = [p.strip().rstrip("/") for p in upload[0]["with"]["path"].splitlines() if p.strip()]
    covered = lambda target: any(target == p or target.startswith(p + "/") for p in paths)  # noqa: E731
    for target in (*written, report, str(Path(report).with_suffix(".html"))):
        assert covered(target), f"{name}: {target} is written by the gate but not uploaded ({paths})"

    summary = [s for s in job["steps"] if "GITHUB_STEP_SUMMARY" in s.get("run", "")]
    assert len(summary) == 1 and summary[0].get("if") == "always()", "publish the report even when the gate fails"
    assert names.index(summary[0]["name"]) > names.index(upload[0]["name"]), "the summary links the uploaded artifact"
    assert summary[0]["env"]["REPORT"] == report
    assert summary[0]["env"]["ARTIFACT_URL"] == "${{ steps.%s.outputs.artifact-url }}" % upload[0]["id"]


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
                seen_gate = True
                try:
                    parser.parse_args(words[1:])
                except SystemExit:
                    raise AssertionError(f"{name}: graphcapture does not accept {' '.join(words[1:])}") from None
    assert seen_gate


@pytest.mark.parametrize("path", ALL_WORKFLOWS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_safe_by_default(path: Path) -> None:
    data = load(path)
    text = path.read_text(encoding="utf-8")
    triggers = data.get("on", data.get(True))
    assert "pull_request_target" not in triggers and "pull_request_target" not in re.sub(r"#.*", "", text)
    assert data["permissions"] == {"contents": "read"}, "a read-only token: the artifact upload needs no more"
    assert "github.workflow" in data["concurrency"]["group"], "one run per workflow and pull request"
    job = the_job(data)
    checkout = [s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@")]
    assert len(checkout) == 1 and checkout[0]["with"]["persist-credentials"] is False
    uses = [line for line in text.splitlines() if re.match(r"^\s*(?:-\s+)?uses:", line)]
    assert uses and all(PIN.match(line) for line in uses), [u for u in uses if not PIN.match(u)]
    for line in uses:
        assert re.fullmatch(r"[0-9a-f]{40}", PIN.match(line).group(2)), f"pin {line.strip()} to a full commit"
    if "self-hosted" in json.dumps(job["runs-on"]):
        condition = " ".join(job["if"].split())
        assert "github.event.pull_request.head.repo.full_name == github.repository" in condition
        assert "github.event.label.name == 'gpu-ci'" in condition and "github.event.action == 'labeled'" in condition


def test_each_action_is_pinned_to_one_commit_everywhere() -> None:
    pins: dict[str, set[tuple[str, str]]] = {}
    for path in ALL_WORKFLOWS:
        for line in path.read_text(encoding="utf-8").splitlines():
            match = PIN.match(line)
            if match:
                pins.setdefault(match.group(1), set()).add((match.group(2), match.group(3)))
    assert set(pins) == {"actions/checkout", "actions/setup-python", "actions/upload-artifact"}
    assert all(len(found) == 1 for found in pins.values()), pins
    documented = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    for action, ((sha, version),) in pins.items():
        assert f"`{action}` {version} (`{sha}`)" in documented, f"docs/ci.md: list {action} {version} and its commit"


def test_zizmor_finds_nothing_at_its_default_persona() -> None:
    done = subprocess.run(
        [tool("zizmor"), "--offline", *map(str, ALL_WORKFLOWS)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_auditor_findings_are_the_ones_docs_ci_md_explains() -> None:
    done = subprocess.run(
        [tool("zizmor"), "--offline", "--persona=auditor", "--format=json", *map(str, ALL_WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = sorted(
        (Path(f["locations"][0]["symbolic"]["key"]["Local"]["verbatim_path"]).name, f["ident"])
        for f in json.loads(done.stdout)
    )
    assert found == [(name, "self-hosted-runner") for name in sorted(RECIPES) if RECIPES[name] != "ubuntu-latest"]
    documented = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
    assert "`--persona=auditor`" in documented and "`self-hosted-runner`" in documented


def test_every_workflow_validates_against_githubs_schema() -> None:
    done = subprocess.run(
        [tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, ALL_WORKFLOWS)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_actionlint_config_names_every_self_hosted_label() -> None:
    config = load(REPO / "docs" / "ci" / "actionlint.yaml")
    custom = set()
    for name in RECIPES:
        runs_on = the_job(load(REPO / "docs" / "ci" / name))["runs-on"]
        if isinstance(runs_on, list):  # GitHub's own labels for self-hosted runners are known to actionlint
            custom |= set(runs_on) - {"self-hosted", "linux", "x64"}
    assert custom == {"nvidia", "rocm"} and set(config["self-hosted-runner"]["labels"]) == custom
    assert "`.github/actionlint.yaml`" in (REPO / "docs" / "ci.md").read_text(encoding="utf-8")


def test_ci_lints_every_recipe_and_workflow() -> None:
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert "zizmor --offline docs/ci/*.yml .github/workflows/*.yml" in lines
    assert "check-jsonschema --builtin-schema vendor.github-workflows docs/ci/*.yml .github/workflows/*.yml" in lines
