"""Every command and Python snippet in README.md and docs/*.md is run (or explicitly marked not runnable).

Fenced blocks must name a language.  ``bash`` and ``python`` blocks are executed, one
document at a time, in order, in a fresh folder (so a document's steps build on each
other, as a reader follows them), with this checkout's installed plugin and no
``GRAPH_CAPTURE_*`` / CI variables.  HTML comments right above a block steer it:

``<!-- not-run: REASON -->``      skipped; the reason is listed (``-rs`` / the inventory test)
``<!-- file: PATH -->``           the block is written to PATH (any language) for later steps
``<!-- pytest-file: PATH -->``    written to PATH, then ``pytest PATH --update-golden`` and
                                  ``pytest PATH`` must both pass (a test snippet, run for real)
``<!-- expect-exit: N -->``       the bash block must exit N (default 0)
``<!-- expect-output: TEXT -->``  its output must contain TEXT (may repeat)
``<!-- include: PATH -->``        the block must equal the repository file PATH (docs/ci/*.yml)

A document whose first line after the title is ``<!-- docs-test: copy examples -->`` runs
in a folder holding a copy of ``examples/``.  Every ``bash`` / ``python`` block is run
or carries ``not-run`` with its reason (:func:`test_every_command_is_run_or_says_why_not`).
``python tests/e2e/test_docs.py`` prints the inventory.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pytest_graphcapture.golden.store import CI_VARIABLES

REPO = Path(__file__).resolve().parents[2]  # tests/e2e/ -> the repository
sys.path.insert(0, str(REPO / "scripts"))

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
RUN_LANGS = ("bash", "python")
FENCE = re.compile(r"^(`{3,}|~{3,})(\S*)\s*$")
MARKER = re.compile(r"^<!--\s*([a-z-]+):\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    doc: Path
    line: int
    lang: str
    text: str
    markers: list[tuple[str, str]] = field(default_factory=list)

    def get(self, name: str) -> list[str]:
        return [value for key, value in self.markers if key == name]

    @property
    def where(self) -> str:
        return f"{self.doc.relative_to(REPO).as_posix()}:{self.line}"


def parse(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc`` with the marker comments directly above each."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, lang = match.groups()
        markers = []
        j = i - 1
        while j >= 0 and MARKER.match(lines[j]):
            key, value = MARKER.match(lines[j]).groups()  # type: ignore[union-attr]
            markers.insert(0, (key, value))
            j -= 1
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        if end == len(lines):
            raise AssertionError(f"{doc.name}:{i + 1}: unclosed code fence")
        blocks.append(Block(doc, i + 1, lang, "\n".join(lines[i + 1 : end]) + "\n", markers))
        i = end + 1
    return blocks


def copies_examples(doc: Path) -> bool:
    return "<!-- docs-test: copy examples -->" in doc.read_text(encoding="utf-8")


def inventory() -> list[tuple[str, str, str]]:
    """``(where, lang, what happens)`` for every block of every doc."""
    rows = []
    for doc in DOCS:
        for block in parse(doc):
            if block.get("not-run"):
                what = f"not run: {block.get('not-run')[0]}"
            elif block.get("include"):
                what = f"checked equal to {block.get('include')[0]}"
            elif block.get("pytest-file"):
                what = f"written to {block.get('pytest-file')[0]}, run with pytest (--update-golden, then plain)"
            elif block.get("file"):
                what = f"written to {block.get('file')[0]}, used by later commands"
            elif block.lang in RUN_LANGS:
                what = "executed"
            else:
                what = "shown only (not a command)"
            rows.append((block.where, block.lang, what))
    return rows


def environment() -> dict[str, str]:
    from warm_python import warm_path  # under pytest only: `python tests/e2e/test_docs.py` lists blocks without it

    # PYTEST_ADDOPTS is the suite's own for the pytests it starts (tests/conftest.py), not the worker's.
    env = {
        k: v
        for k, v in os.environ.items()
        if (k == "PYTEST_ADDOPTS" or not k.startswith(("GRAPH_CAPTURE_", "PYTEST_"))) and k not in CI_VARIABLES
    }
    # The doc's python, pytest and graphcapture: this environment's, forked warm (tests/warm_python.py).
    env["PATH"] = warm_path({"PATH": os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])})
    return env


def run_block(block: Block, cwd: Path, index: int) -> None:
    """Execute one runnable block in ``cwd``; fail naming the doc line and the output."""
    from warm_python import warm_python

    env = environment()
    if block.lang == "python":
        script = cwd / f".doc_snippet_{index}.py"
        script.write_text(block.text, encoding="utf-8")
        command = [warm_python(), script.name]
    else:
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    want = int(block.get("expect-exit")[0]) if block.get("expect-exit") else 0
    assert done.returncode == want, (
        f"{block.where}: exit {done.returncode}, expected {want}\n"
        f"--- block ---\n{block.text}--- output (tail) ---\n{output[-4000:]}"
    )
    for text in block.get("expect-output"):
        assert text in output, f"{block.where}: output lacks {text!r}\n--- output (tail) ---\n{output[-4000:]}"


def run_pytest_file(block: Block, cwd: Path) -> None:
    from warm_python import warm_python

    target = block.get("pytest-file")[0]
    (cwd / target).parent.mkdir(parents=True, exist_ok=True)
    (cwd / target).write_text(block.text, encoding="utf-8")
    for extra in (["--update-golden"], []):
        command = [warm_python(), "-m", "pytest", target, "-p", "no:cacheprovider", *extra]
        done = subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{block.where}: pytest {target} {' '.join(extra)} failed:\n{done.stdout[-4000:]}"


def doc_ids() -> list[Path]:
    return [doc for doc in DOCS if any(b.lang in RUN_LANGS or b.get("pytest-file") for b in parse(doc))]


def test_every_block_names_a_language_and_known_markers() -> None:
    known = {"not-run", "file", "pytest-file", "expect-exit", "expect-output", "include"}
    problems = []
    for doc in DOCS:
        for block in parse(doc):
            if not block.lang:
                problems.append(f"{block.where}: fenced block without a language (use bash, python, yaml, text…)")
            for key, value in block.markers:
                if key not in known:
                    problems.append(f"{block.where}: unknown marker {key!r}")
                if key == "not-run" and not value:
                    problems.append(f"{block.where}: not-run needs a reason")
    assert not problems, "\n".join(problems)


def test_every_command_is_run_or_says_why_not() -> None:
    """What README.md and docs/README.md promise: each bash / python block is executed here or marked not-run."""
    allowed = ("executed", "not run: ", "written to ")
    silent = [
        f"{where}: {what}" for where, lang, what in inventory() if lang in RUN_LANGS and not what.startswith(allowed)
    ]
    assert not silent, "\n".join(silent)
    for page in ("README.md", "docs/README.md"):
        text = " ".join((REPO / page).read_text(encoding="utf-8").split())
        assert "test_docs.py" in text and ("not-run" in text or "marked" in text), page


def test_included_files_are_identical() -> None:
    checked = 0
    for doc in DOCS:
        for block in parse(doc):
            for path in block.get("include"):
                assert (REPO / path).read_text(encoding="utf-8") == block.text, (
                    f"{block.where}: differs from {path}; paste the file into the doc again"
                )
                checked += 1
    assert checked >= 3, "docs/ci.md should include the three CI workflows"


def test_configuration_reference_is_up_to_date() -> None:
    import gen_config_docs

    assert gen_config_docs.undocumented_env() == [], "describe these in OTHER_ENV in scripts/gen_config_docs.py"
    current = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert current == gen_config_docs.render(), (
        "docs/configuration.md is out of date with the code: run python scripts/gen_config_docs.py"
    )


def test_configuration_reference_covers_every_setting() -> None:
    import gen_config_docs

    from pytest_graphcapture.plugin.settings import SETTINGS

    gen_config_docs._modules()  # every module that declares settings is imported
    text = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    for setting in SETTINGS.values():
        assert f"`{setting.option}` | `{setting.env}` | `{setting.ini}`" in text, setting.option
    for name in (
        "decode_runner",
        "graph_capture",
        "golden",
        "gpu",
        "pytest_graphcapture_make_runner",
        "graphcapture show",
        "max_launches",
    ):
        assert name in text, name


def test_the_inventory_runs_as_a_script(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """What docs/README.md tells a reader to run: `python tests/e2e/test_docs.py`, with only tests/e2e/ on the path."""
    monkeypatch.setattr(
        sys, "path", [str(Path(__file__).parent), *(p for p in sys.path if not Path(p, "warm_python.py").exists())]
    )
    monkeypatch.delitem(sys.modules, "warm_python", raising=False)
    runpy.run_path(__file__, run_name="__main__")
    listed = capsys.readouterr().out
    assert "README.md:" in listed and "not run: creates a venv" in listed, listed[-2000:]


@pytest.mark.parametrize("doc", doc_ids(), ids=lambda p: p.name)
@pytest.mark.slow
def test_doc_snippets_run(doc: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if copies_examples(doc):
        shutil.copytree(
            REPO / "examples", work / "examples", ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache")
        )
    skipped = []
    ran = 0
    for index, block in enumerate(parse(doc)):
        if block.get("not-run"):
            skipped.append(f"{block.where}: {block.get('not-run')[0]}")
            continue
        if block.get("include"):
            continue
        if block.get("pytest-file"):
            run_pytest_file(block, work)
            ran += 1
            continue
        if block.get("file"):
            target = work / block.get("file")[0]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.text, encoding="utf-8")
            continue
        if block.lang not in RUN_LANGS:
            continue
        run_block(block, work, index)
        ran += 1
    print(f"{doc.name}: {ran} blocks run; not run: {skipped or 'none'}")
    assert ran or skipped, f"{doc.name}: nothing ran"


if __name__ == "__main__":
    for where, lang, what in inventory():
        print(f"{where:32} {lang or '(none)':8} {what}")
