"""Claims in the README, docs/, the CI recipes and the CHANGELOG, held against the code and the data they describe.

Each test reads the fact from its source (the committed CPU goldens, the main command, the settings
registry, the runner base class, git history, pyproject.toml) and checks that the text says it.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_graphcapture.golden.store import CI_OFF_VALUES, CI_VARIABLES
from pytest_graphcapture.naming import TRACE_SUBDIR, trace_group_for
from pytest_graphcapture.plugin.settings import TRACE
from pytest_graphcapture.plugin.torch_setup import TORCH_WARNINGS, torch_warning_lines

REPO = Path(__file__).resolve().parents[2]
# The recipes a user copies to gate their own project (this repository's own workflows are in .github/).
RECIPES = sorted((REPO / "examples" / "ci").glob("*.yml"))


def _read(rel: str) -> str:
    return (REPO / rel).read_text(encoding="utf-8")


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split()))]


def test_readme_claims_kernel_changes_only_where_captures_have_kernels() -> None:
    goldens = sorted((REPO / "examples" / "goldens" / "cpu").rglob("*.json"))
    assert goldens, "examples/goldens/cpu holds the CPU goldens"
    assert all(json.loads(p.read_text(encoding="utf-8"))["kernels"] == [] for p in goldens), "a CPU capture has kernels"
    for sentence in _sentences(_read("README.md")):
        if "fused kernel" in sentence:
            assert "CPU" not in sentence, f"a CPU capture has no kernels, so no kernel swap fails there: {sentence!r}"


def test_readme_names_the_trace_folder_its_main_command_writes() -> None:
    readme = _read("README.md")
    main = re.search(r"--graph-capture-dir=(\S+)", readme)
    assert main, "the README's main command names --graph-capture-dir"
    assert f"`{main.group(1)}/{TRACE_SUBDIR}/`" in readme
    assert f"`{TRACE_SUBDIR}/`" not in readme, f"traces land under {main.group(1)}/, not in the current folder"


def test_configuration_reference_lists_the_ci_variables() -> None:
    reference = _read("docs/configuration.md")
    for name in CI_VARIABLES:
        assert f"`{name}`" in reference, f"{name} is read by the plugin (CI detection) but not documented"
    for value in CI_OFF_VALUES:
        assert f"`{value}`" in reference


def test_configuration_reference_says_golden_check_splits_a_single_trace_by_its_windows() -> None:
    """Only a single trace without windows (a CPU capture) is refused: tests/engine_traces/test_pytest_gate.py."""
    row = next(line for line in _read("docs/configuration.md").splitlines() if line.startswith(f"| `{TRACE.option}`"))
    assert "golden.check splits by its capture windows" in row and "every golden.check" not in row, row


def _required_methods() -> list[str]:
    """Methods of GraphRunner whose base body raises RunnerContractError (a NotImplementedError): what a subclass must write."""
    tree = ast.parse(_read("pytest_graphcapture/engine/runner.py"))
    base = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "GraphRunner")
    return [
        f.name
        for f in base.body
        if isinstance(f, ast.FunctionDef)
        and any(isinstance(n, ast.Raise) and "RunnerContractError" in ast.unparse(n) for n in ast.walk(f))
    ]


def test_adapting_names_the_methods_a_runner_must_implement() -> None:
    required = _required_methods()
    assert required == ["batch_sizes", "forward_for"]
    sentences = _sentences(_read("docs/adapting.md"))
    claim = next((s[s.index("A runner must implement") :] for s in sentences if "A runner must implement" in s), None)
    assert claim, "docs/adapting.md says what a runner must implement"
    assert "two methods" in claim
    for name in required:
        assert f"`{name}(" in claim, (name, claim)


def test_docs_write_runner_methods_as_the_runners_not_as_plugin_api() -> None:
    # use_graphs is a method of the embedded and example runners; written bare, it reads as the plugin's.
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for code in re.findall(r"`([^`\n]+)`", doc.read_text(encoding="utf-8")):
            assert not re.search(r"(?<![.\w])use_graphs\(", code), f"{doc.name}: `{code}`"


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


def test_compatibility_page_says_which_commit_and_machine_each_row_ran_on() -> None:
    page = _read("docs/compatibility.md")
    rows = [line for line in page.splitlines() if re.match(r"^\| \d+\.\d+", line)]
    assert rows
    pythons = set(re.findall(r"Python (3\.\d+)", page))
    for sentence in _sentences(page):
        if sentence.startswith("All runs"):
            said = set(re.findall(r"Python (3\.\d+)", sentence))
            assert not said or said == pythons, f"rows ran on Python {sorted(pythons)}: {sentence!r}"
            assert "CPU only" not in sentence or "H200" not in page, sentence
    assert not re.search(r"\b(final|latest|current) commit\b", page), "a page cannot know the final commit: name it"
    if _git("rev-parse", "HEAD").returncode != 0:
        pytest.skip("not a git checkout: the table's commits cannot be looked up (run from a clone)")
    for row in rows:
        commit = re.findall(r"`([0-9a-f]{7,40})`", row)[-1]
        assert _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0, f"{commit} is not in history"


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipes_say_to_accept_a_harvest_never_to_copy_it(recipe: Path) -> None:
    comments = " ".join(line.strip("# ") for line in recipe.read_text(encoding="utf-8").splitlines() if "#" in line)
    for sentence in _sentences(comments):
        if "golden_out" in sentence:
            assert "copy it over" not in sentence and "graphcapture accept" in sentence, sentence


def test_the_recipes_to_copy_are_not_this_repositorys_own_workflows() -> None:
    assert RECIPES and not any("scripts/compat.sh" in p.read_text(encoding="utf-8") for p in RECIPES)
    assert (REPO / ".github" / "workflows" / "torch-matrix.yml").is_file()


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipes_install_the_plugin_in_a_users_repository(recipe: Path) -> None:
    yaml = pytest.importorskip("yaml", reason="pyyaml is in the test extras: pip install -e '.[test]'")
    name = re.search(r'^name = "([^"]+)"', _read("pyproject.toml"), flags=re.M).group(1)  # type: ignore[union-attr]
    workflow = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    job = next(iter(workflow["jobs"].values()))
    script = "".join(s["run"] for s in job["steps"] if s.get("name", "").startswith("Install"))
    assert workflow["env"]["GRAPHCAPTURE_PLUGIN"] == "", f"{recipe.name}: no default the user could forget to pin"
    assert f"{name} @ git+https://" in recipe.read_text(encoding="utf-8"), "the comment shows a pinned requirement"
    assert '"$GRAPHCAPTURE_PLUGIN"' in script and '-e "$PACKAGE_DIR"' in script, script


def test_changelog_has_one_section_per_heading_and_no_repeated_entry() -> None:
    releases = re.split(r"^## ", _read("CHANGELOG.md"), flags=re.M)[1:]
    titles = [r.splitlines()[0].strip() for r in releases]
    assert len(titles) == len(set(titles)), titles
    for release in releases:
        headings = re.findall(r"^### (.+)$", release, flags=re.M)
        assert len(headings) == len(set(headings)), f"{release.splitlines()[0]}: {headings}"
        entries = re.findall(r"^- (.+(?:\n  .+)*)", release, flags=re.M)
        repeated = {e for e in entries if entries.count(e) > 1}
        assert not repeated, repeated


# --------------------------------------------------------------------------- traces, numpy, metrics, CLI exits


def test_readme_main_job_counts_the_keys_it_checks_and_leaves_one_trace_per_key() -> None:
    # tests/e2e/test_examples.py runs the main job and counts its traces against the keys it checked.
    goldens = list((REPO / "examples" / "goldens" / "cpu").rglob("*.json"))
    claim = next(s for s in _sentences(_read("README.md")) if s.startswith("**Main job**"))
    assert f"({len(goldens)} keys on CPU)" in claim, claim
    assert "one trace per key" in claim and "its own folder" in claim, claim
    recorded = list((REPO / "examples" / "goldens").glob("*/engine_traces/**/*.json"))
    readme = " ".join(_read("README.md").split())
    assert f"also gates {len(recorded)} keys of [`examples/engine_traces/`]" in readme


def test_golden_workflow_shows_the_trace_folder_the_plugin_writes() -> None:
    text = " ".join(_read("docs/golden-workflow.md").split())
    nodeid = "test_decode_graphs.py::test_decode_graphs_match_goldens"
    assert f"`{TRACE_SUBDIR}/{trace_group_for(nodeid)}/`" in text
    assert f"`goldens/cpu/{trace_group_for(nodeid)}/`" in text  # the same folder as the goldens'
    assert trace_group_for(nodeid, 2) == f"{trace_group_for(nodeid)}/2"
    assert "second capture's traces to the sub-folder `2/`" in text


def test_readme_says_what_numpy_is_for_as_the_plugin_does_it() -> None:
    class Config:  # what torch_warning_lines reads: the warnings torch gave at import
        stash = {TORCH_WARNINGS: ["Failed to initialize NumPy"]}

    (line,) = torch_warning_lines(Config())  # type: ignore[arg-type]
    prefix = line.split(" (", 1)[0]
    text = " ".join(_read("README.md").split())
    said = [s for s in _sentences(_read("README.md")) if "numpy" in s.lower() or "-W error" in s]
    assert said and not any(re.search(r"would (fail|break)", s) for s in said), said
    assert f"`{prefix} ...`" in text, prefix
    assert "the plugin does not use it" in text
    plugin_imports = [
        path.relative_to(REPO).as_posix()
        for path in (REPO / "pytest_graphcapture").rglob("*.py")
        if re.search(r"^\s*(import|from) numpy\b", path.read_text(encoding="utf-8"), flags=re.M)
    ]
    assert plugin_imports == []


def test_changelog_states_the_torch_requirement_pyproject_has() -> None:
    bound = re.search(r'"torch>=([\d.]+)"', _read("pyproject.toml")).group(1)  # type: ignore[union-attr]
    unreleased = re.split(r"^## ", _read("CHANGELOG.md"), flags=re.M)[1]
    said = re.findall(r"`torch>=([\d.]+)`", unreleased)
    assert said == [bound], f"the Unreleased section names torch>={said}; pyproject.toml says torch>={bound}"


def test_trace_metrics_are_documented_as_what_an_exported_trace_holds(tmp_path: Path) -> None:
    from pytest_graphcapture.engine.backend import EagerBackend
    from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
    from pytest_graphcapture.testing import FakeRunner

    settings = CaptureSettings(trace="per-bs", out_dir=tmp_path, replay=True)
    (key_result,) = capture_runner(FakeRunner((1,)), EagerBackend("cpu"), settings)
    with gzip.open(key_result.trace_path) as handle:
        held = set(json.load(handle)["graph_capture_metrics"])
    assert key_result.metrics.replay_seconds is not None and "replay_seconds" not in held
    assert held >= {"warmup_seconds", "capture_seconds"}
    for page in ("docs/golden-workflow.md", "docs/concepts.md", "CHANGELOG.md"):
        for sentence in _sentences(_read(page)):
            if "graph_capture_metrics" in sentence or "trace's metadata" in sentence:
                assert "replay" not in sentence or "after the trace is written" in sentence, (page, sentence)


def test_the_documented_exit_code_of_a_reader_that_leaves_early_is_the_one_given(tmp_path: Path) -> None:
    claim = next(s for s in _sentences(_read("docs/configuration.md")) if "leaves before all of it is written" in s)
    code = int(re.search(r"else (\d+)", claim).group(1))  # type: ignore[union-attr]
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"aten::op_{i}", "pid": 1, "tid": 1, "ts": i, "dur": 1}
        for i in range(3000)
    ]
    trace = tmp_path / "R_bs_1_rank0.json"
    trace.write_text(json.dumps({"traceEvents": events}))
    command = f"{sys.executable} -m pytest_graphcapture summarize {trace} | head -n 1"
    done = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (code, ""), claim


def test_gpu_readiness_lists_the_steps_the_gpu_check_runs() -> None:
    script = re.findall(r"^step (\S+) ", _read("scripts/gpu_check.sh"), flags=re.M)
    page = _read("docs/gpu-readiness.md")
    listed = re.findall(r"^\d+\. `([a-z-]+)`:", page, flags=re.M)
    assert listed == script, f"scripts/gpu_check.sh runs {script}; docs/gpu-readiness.md lists {listed}"
    numbers = {
        "5": "five",
        "6": "six",
        "7": "seven",
        "8": "eight",
        "9": "nine",
        "10": "ten",
        "11": "eleven",
        "12": "twelve",
    }
    assert f"It runs {numbers.get(str(len(script)), len(script))} steps" in page


def test_adapting_lists_exactly_the_cpu_stand_ins_an_engine_loop_gets() -> None:
    from pytest_graphcapture.engine.observe import eager_cuda_calls

    text = _read("docs/adapting.md")
    start = text.index("**On a machine without a GPU**")
    listed = text[start : text.index("get eager stand-ins", start)]
    named = {name.split(".")[-1] for name in re.findall(r"`([\w.]+)`", listed)}
    assert named == set(eager_cuda_calls())


def test_the_exit_codes_say_check_fails_a_missing_golden_with_1() -> None:
    """tests/engine_traces/test_check_command.py: a key with no golden exits 1; the references must say so."""
    reference = next(line for line in _read("docs/configuration.md").splitlines() if line.startswith("Exit codes:"))
    assert re.search(r"; 1 a difference \([^)]*`check` found a key that differs, has no golden", reference), reference
    readme = " ".join(_read("README.md").split())
    assert "(exit 0 match; 1 a key differs, has no golden or is gone; 2 bad input" in readme


def test_compatibility_counts_the_suites_gpu_marked_tests() -> None:
    marked = sum(
        len(re.findall(r"^@pytest\.mark\.gpu$", path.read_text(encoding="utf-8"), flags=re.M))
        for path in (REPO / "tests").rglob("test_*.py")
    )
    words = {1: "one `gpu`-marked test is", 2: "two `gpu`-marked tests are", 3: "three `gpu`-marked tests are"}
    assert f"the suite's {words.get(marked, marked)} skipped" in " ".join(_read("docs/compatibility.md").split())
