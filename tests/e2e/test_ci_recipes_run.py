"""The CI recipes run as a user's CI would run them, and the wheel they install is one that can be released.

A scratch repository of tests only gets the CPU recipe's shell steps, with the plugin's own wheel as
``GRAPHCAPTURE_PLUGIN``, every other setting as shipped, and an environment that already holds this
machine's CPU torch. First run: no goldens yet, so the gate fails, and the job still publishes the report
and uploads the harvest; after ``graphcapture accept`` of that harvest, and with an engine package added
under ``python/`` (like sglang's, ``PACKAGE_DIR: python``), the second run passes. Left unedited, every
recipe stops in its first step with the line docs/ci.md documents.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO_ROOT
from scratch_env import PIP_ENV, existing_torch, fresh_venv
from workflow_sim import ARTIFACT_URL, run_workflow

pytest.importorskip("yaml", reason="pyyaml is in the test extras: pip install -e '.[test]'")

RECIPES = sorted((REPO_ROOT / "docs" / "ci").glob("*.yml"))
UNSET_LINE = (
    "GRAPHCAPTURE_PLUGIN is not set: set it in the env block at the top of this workflow to a pinned requirement "
    "(pytest-graphcapture @ git+https://<host>/<owner>/pytest-graphcapture@<commit>) or a wheel URL or path"
)

TESTS_FILES = {
    "pytest.ini": "[pytest]\ntestpaths = tests\n",
    "tests/conftest.py": """\
import pytest

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


@pytest.fixture
def decode_runner():
    return TinyDecodeRunner([1, 2], device="cpu", config=DecoderConfig(hidden_size=32))
""",
    "tests/test_decode_graphs.py": """\
def test_decode_graphs(graph_capture, golden):
    golden.check(graph_capture())
""",
}
ENGINE_FILES = {
    "python/pyproject.toml": """\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "scratch-engine"
version = "0.0.1"
""",
    "python/scratch_engine/__init__.py": '"""A stand-in inference engine: the size of its model."""\n\nHIDDEN_SIZE = 32\n',
    "tests/conftest.py": """\
import pytest
import scratch_engine

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner


@pytest.fixture
def decode_runner():
    return TinyDecodeRunner([1, 2], device="cpu", config=DecoderConfig(hidden_size=scratch_engine.HIDDEN_SIZE))
""",
}


def scratch_repository(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")
    return root


def runner_env(bin_dir: Path) -> dict[str, str]:
    """The runner's environment: this machine's, with the fresh venv's python first and nothing of ours."""
    # PYTHONPYCACHEPREFIX would give the linked torch a new, empty bytecode cache (its paths are new):
    # without it, imports read the bytecode pip compiled beside the real files.
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GRAPH_CAPTURE_", "PYTEST_", "PIP_"))
        and k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONPYCACHEPREFIX", "CI")
    }
    ours = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([str(bin_dir), *(p for p in env.get("PATH", "").split(os.pathsep) if p != ours)])
    env.update(PIP_ENV)
    return env


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_an_unedited_recipe_fails_in_its_first_step_saying_what_to_set(recipe: Path, tmp_path: Path) -> None:
    run = run_workflow(recipe, tmp_path, env={"PATH": os.environ["PATH"]}, stop_after=0)
    (first,) = run.steps
    assert first.returncode == 1
    assert first.output.splitlines() == [f"::error::{UNSET_LINE}"]
    assert UNSET_LINE in (REPO_ROOT / "docs" / "ci.md").read_text(encoding="utf-8"), "docs/ci.md: document the line"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("pytest-graphcapture", "is a bare name"),
        ("pytest-graphcapture @ git+https://example.org/o/pytest-graphcapture@main", "full 40-hex commit"),
    ],
)
def test_a_requirement_an_index_or_a_branch_could_change_is_refused(value: str, problem: str, tmp_path: Path) -> None:
    run = run_workflow(
        RECIPES[0], tmp_path, env={"PATH": os.environ["PATH"]}, settings={"GRAPHCAPTURE_PLUGIN": value}, stop_after=0
    )
    assert run.steps[0].returncode == 1 and problem in run.steps[0].output


@pytest.mark.parametrize(
    "value",
    [
        "pytest-graphcapture @ git+https://example.org/o/pytest-graphcapture@" + "0123456789abcdef" * 2 + "01234567",
        "https://example.org/wheels/pytest_graphcapture-0.1.0-py3-none-any.whl",
        "wheels/pytest_graphcapture-0.1.0-py3-none-any.whl",
        "pytest-graphcapture==0.1.0",
    ],
)
def test_a_pinned_requirement_passes_the_first_step(value: str, tmp_path: Path) -> None:
    run = run_workflow(
        RECIPES[0], tmp_path, env={"PATH": os.environ["PATH"]}, settings={"GRAPHCAPTURE_PLUGIN": value}, stop_after=0
    )
    assert run.steps[0].returncode == 0, run.steps[0].output


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_a_package_dir_without_a_project_stops_the_install_in_one_line(recipe: Path, tmp_path: Path) -> None:
    repo = scratch_repository(tmp_path / "engine", TESTS_FILES)
    settings = {"GRAPHCAPTURE_PLUGIN": "pytest-graphcapture==0.1.0", "PACKAGE_DIR": "pyton"}
    run = run_workflow(
        recipe, repo, env={"PATH": os.environ["PATH"]}, settings=settings, already_done=("Show the GPU and driver",)
    )
    install = next(step for step in run.steps if step.name.startswith("Install"))
    assert install.returncode == 1 and install.output.splitlines() == [
        "::error::PACKAGE_DIR=pyton holds no Python project to install: set it to the folder of your project's "
        "pyproject.toml, or to . for a repository of tests only"
    ]
    assert not (repo / ".venv").exists(), "stopped before anything was installed"


@pytest.mark.slow
@pytest.mark.xdist_group("plugin_wheel")
def test_cpu_recipe_gates_a_tests_only_repository_then_an_engine_package(
    plugin_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = scratch_repository(tmp_path / "engine", TESTS_FILES)
    bin_dir = fresh_venv(tmp_path / "runner-python", existing_torch(tmp_path / "existing-torch", plugin_wheel))
    env = runner_env(bin_dir)
    recipe = REPO_ROOT / "docs" / "ci" / "cpu.yml"

    # Tests only, nothing set but the plugin: what docs/ci.md says needs no other edit.
    first = run_workflow(recipe, repo, env=env, settings={"GRAPHCAPTURE_PLUGIN": str(plugin_wheel)})
    install = first.step("Install torch (CPU build) and the plugin")
    assert install.returncode == 0, install.output[-3000:]
    project = first.step("Install your project")
    assert project.returncode == 0 and "a repository of tests only" in project.output, project.output[-3000:]
    gate = first.step("Run the gate")
    assert gate.returncode == 1 and "has no golden for bs=1, bs=2" in gate.output, gate.output[-3000:]
    published = first.step("Publish the report as the job summary")
    assert published.returncode == 0, published.output
    assert "## Graph capture goldens" in first.summary
    link = ARTIFACT_URL.format(n=1)
    assert f"(<{link}>)" in first.summary and "(<report.html>)" not in first.summary, first.summary
    uploaded = {p.relative_to(repo).as_posix() for p in first.uploaded["graph-capture-cpu"]}
    assert uploaded == {"graph_capture_out", "golden_out"}
    assert (repo / "graph_capture_out" / "report.html").read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert len(list((repo / "graph_capture_out" / "graph_capture_profile").rglob("*.json.gz"))) == 2, "one trace a size"
    harvest = sorted((repo / "golden_out").rglob("*.json"))
    assert [p.name for p in harvest] == ["TinyDecodeRunner_bs_1.json", "TinyDecodeRunner_bs_2.json"]

    # What the docs tell the user: accept the downloaded harvest, review, commit; then CI passes.
    from pytest_graphcapture.tools.cli import main

    monkeypatch.chdir(repo)
    assert main(["accept", "golden_out"]) == 0, capsys.readouterr()
    assert len(list((repo / "goldens" / "cpu").rglob("*.json"))) == 2

    # The engine's package arrives under python/ and the tests import it: PACKAGE_DIR installs it.
    scratch_repository(repo, ENGINE_FILES)
    settings = {"GRAPHCAPTURE_PLUGIN": str(plugin_wheel), "PACKAGE_DIR": "python"}
    second = run_workflow(recipe, repo, env=env, settings=settings, already_done=(install.name,))
    assert second.passed, [(s.name, s.returncode, s.output[-2000:]) for s in second.steps if s.returncode]
    assert "Successfully installed scratch-engine" in second.step(project.name).output
    assert "cpu: 2 checked, 2 passed, 0 failed" in second.step("Run the gate").output

    # The wheel went in beside the torch that was there: same files, same build, nothing replaced.
    installed = [line for line in install.output.splitlines() if line.startswith("Installing collected packages:")]
    assert installed and not any("torch" in line.replace("pytest-graphcapture", "") for line in installed), installed
    assert "Requirement already satisfied: torch" in install.output
    where = "from importlib import metadata as m, util as u; print(u.find_spec('torch').origin, m.version('torch'), u.find_spec('pytest_graphcapture').origin)"
    probe = subprocess.run(
        ["python", "-c", where],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    torch_file, version, plugin_file = probe.stdout.split()
    assert Path(torch_file).parent == tmp_path / "existing-torch" / "torch"
    assert version == __import__("torch").__version__
    assert Path(plugin_file).is_relative_to(tmp_path / "runner-python"), "the plugin comes from the wheel"


@pytest.mark.xdist_group("plugin_wheel")
def test_the_wheel_holds_the_package_typed_and_nothing_of_tests(plugin_wheel: Path) -> None:
    with zipfile.ZipFile(plugin_wheel) as archive:
        names = archive.namelist()
        dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = archive.read(f"{dist_info}/METADATA").decode("utf-8")
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode("utf-8")
    assert {n.split("/")[0] for n in names} == {"pytest_graphcapture", dist_info}
    assert "pytest_graphcapture/py.typed" in names
    package = sorted(p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "pytest_graphcapture").rglob("*.py"))
    assert sorted(n for n in names if n.endswith(".py")) == package, "every module of the package, and only those"
    assert f"{dist_info}/licenses/LICENSE" in names
    fields = [line.split(": ", 1) for line in meta.split("\n\n", 1)[0].splitlines() if ": " in line]
    values = {}
    for key, value in fields:
        values.setdefault(key, []).append(value)
    assert values["License-Expression"] == ["MIT"] and values["License-File"] == ["LICENSE"]
    assert "Framework :: Pytest" in values["Classifier"] and "Typing :: Typed" in values["Classifier"]
    assert "cuda" in values["Provides-Extra"]
    assert any(r.startswith("cuda-bindings") and 'extra == "cuda"' in r for r in values["Requires-Dist"])
    assert values["Description-Content-Type"] == ["text/markdown"]
    assert "[pytest11]\ngraphcapture = pytest_graphcapture.plugin" in entry_points
    assert "[console_scripts]\ngraphcapture = pytest_graphcapture.tools.cli:main" in entry_points
