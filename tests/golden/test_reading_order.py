"""A failure reads compute first: on a copy of the examples, a changed model fails with its GEMM (or the
changed op) on the first op line, view/metadata ops folded into one line, and short lines.

The rule is tried on several changes of the same kind (a widened MLP, a widened hidden size, a longer
KV cache, a swapped activation), not on one example: whatever changed, the first op line is a compute op
of the class that changed, no view/metadata op is among the first three lines, ``as_strided`` is on at
most one line and no line is over 250 characters.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import REPO_ROOT, fake_project, run
from warm_python import warm_python

from pytest_graphcapture.golden.change import COMPUTE, DEFAULT_CLASSES, VIEW
from pytest_graphcapture.golden.store import golden_folder

TEST = "test_decode_graphs.py::test_decode_graphs_match_goldens"

#: Parametrizes the examples' runner with the scenarios: each is the embedded decoder changed as
#: SCENARIOS (in the environment) says, its goldens a copy of the examples' own, so the run's failures
#: are those a reviewer reads after each change (one session for all of them).
CONFTEST = """
import json
import os

import pytest
import torch

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner

SCENARIOS = json.loads(os.environ.get("SCENARIOS", "{}"))


@pytest.fixture(autouse=True, params=list(SCENARIOS))
def scenario(request):
    return SCENARIOS[request.param]


@pytest.fixture
def decode_runner(scenario, monkeypatch):
    config, activation = scenario
    if activation:
        monkeypatch.setattr(torch.nn.functional, "silu", getattr(torch.nn.functional, activation))
    return TinyDecodeRunner([1, 2, 4, 8, 12, 16, 24, 32], device="cpu", config=DecoderConfig(**json.loads(config)))
"""

#: (what changed, decoder config, activation, op class the first op line must be of)
SCENARIOS = [
    ("mlp 128 -> 192", '{"intermediate_size": 192}', "", "gemm"),
    ("mlp 128 -> 320", '{"intermediate_size": 320}', "", "gemm"),
    ("hidden 64 -> 96", '{"hidden_size": 96}', "", "gemm"),
    ("kv cache 32 -> 48", '{"max_seq_len": 48}', "", "gemm"),
    ("silu -> gelu", "{}", "gelu", "activation"),
]


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    copy = tmp_path_factory.mktemp("reading") / "examples"
    shutil.copytree(REPO_ROOT / "examples", copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    goldens = golden_folder(copy / "goldens", "cpu", TEST)
    for change, *_ in SCENARIOS:
        shutil.copytree(goldens, golden_folder(copy / "goldens", "cpu", f"{TEST}[{change}]"))
    return copy


@pytest.fixture(scope="module")
def failures(examples: Path) -> dict[str, list[str]]:
    """Each scenario's failure message, from one run of the examples' test over all of them."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRAPH_CAPTURE_") and k != "CI"}
    env.update(SCENARIOS=json.dumps({s[0]: [s[1], s[2]] for s in SCENARIOS}), COLUMNS="400")
    command = [warm_python(), "-m", "pytest", TEST, "-p", "no:cacheprovider", "--graph-capture-device=cpu", "-n0"]
    done = subprocess.run(command, cwd=examples, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout.splitlines()
    messages = {}
    for change, *_ in SCENARIOS:
        header = next(i for i, line in enumerate(out) if re.match(rf"_+ \S+\[{re.escape(change)}\] _+$", line))
        start = next(i for i in range(header, len(out)) if out[i].startswith("graph capture of TinyDecodeRunner"))
        end = next(i for i in range(start, len(out)) if out[i].startswith("accept them with:"))
        messages[change] = out[start : end + 1]
    assert len(set(map(tuple, messages.values()))) == len(SCENARIOS), done.stdout[-3000:]
    return messages


def _op_lines(message: list[str]) -> list[str]:
    start = message.index("  ops:") + 1
    end = next((i for i in range(start, len(message)) if not message[i].startswith("    ")), len(message))
    return message[start:end]


def _op(line: str) -> str:
    """The op a change line is about: ``bs=1,2: ~ aten::mm …`` → ``aten::mm``."""
    found = re.match(r"\s+(?:bs=\S+: )?[~+-] (\S+)", line)
    assert found, line
    return found.group(1)


@pytest.mark.slow
@pytest.mark.parametrize(("change", "config", "activation", "leading"), SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_a_changed_model_reads_compute_first(
    examples: Path, failures: dict[str, list[str]], change: str, config: str, activation: str, leading: str
) -> None:
    message = failures[change]
    shown = "\n".join(message)
    ops = _op_lines(message)
    assert ops, shown
    first = _op(ops[0])
    assert DEFAULT_CLASSES.rank(first)[0] == COMPUTE and DEFAULT_CLASSES.kind(first) == leading, shown
    # No view/metadata op among the first three lines (the folded line counts as none of them).
    for line in ops[:3]:
        assert "view/metadata op line" in line or DEFAULT_CLASSES.rank(_op(line))[0] != VIEW, shown
    assert sum("as_strided" in line for line in message) <= 1, shown
    assert max(len(line) for line in message) <= 250, shown
    # The folded line says how many view/metadata lines it stands for and where they all are.
    folded = [line for line in ops if "view/metadata op line" in line]
    assert len(folded) <= 1, shown
    if folded:
        where = folded[0].split("full diff in ", 1)[1]
        full = Path(where if os.path.isabs(where) else examples / where).read_text()
        assert "aten::as_strided" in full  # the full record keeps every view/metadata op line


def _ops_section(result: pytest.RunResult) -> list[str]:
    """The lines of the failure's ops section."""
    out = result.outlines
    start = out.index("  ops:") + 1
    end = next(i for i in range(start, len(out)) if not out[i].startswith("    "))
    return out[start:end]


@pytest.mark.parametrize(
    ("ini", "first", "folded"),
    [
        ("", "aten::mm", False),  # built-in classes: the GEMM leads, relu is an activation, nothing folds
        ("golden_view_ops = aten::relu", "aten::mm", True),  # a project's own view op folds
        ("golden_compute_ops = *relu*", "aten::relu", False),  # a project's own compute op leads
    ],
    ids=["built-in", "view-ops-ini", "compute-ops-ini"],
)
def test_a_project_extends_the_op_classes_in_its_ini(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ini: str, first: str, folded: bool
) -> None:
    fake_project(pytester, monkeypatch, "def test_decode(fake_capture, golden):\n    golden.check(fake_capture())\n")
    pytester.makeini(f"[pytest]\n{ini}\n")
    run(pytester, "--update-golden").assert_outcomes(passed=1)
    monkeypatch.setenv("FAKE_HIDDEN", "512")  # aten::mm changes shape
    monkeypatch.setenv("FAKE_EXTRA_OP", "1")  # aten::relu is new
    result = run(pytester)
    result.assert_outcomes(failed=1)
    ops = _ops_section(result)
    assert first in ops[0], "\n".join(ops)
    assert any("1 view/metadata op line (relu)" in line for line in ops) == folded, "\n".join(ops)
