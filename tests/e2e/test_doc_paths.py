"""Every relative link and every repository path the docs name exists, so a rename cannot leave a stale one.

Read: README.md, docs/**/*.md (the generated configuration reference included) and the CI recipes
(examples/ci/*.yml and their copies in docs/ci/).  Checked:

* every Markdown link that is not a URL or an in-page anchor, relative to the document;
* every path-like word in inline code, in an HTML comment (except the ``file:`` / ``pytest-file:``
  markers, which name files the document's own steps create) and, in the YAML recipes, anywhere:
  a word that starts with a top-level folder of the repository (``tests/…``, ``docs/…``) must exist
  from the repository root; any other word ending in .py/.md/.yml/.toml/.sh must name a file of the
  repository by its name or by the end of its path (``tracefile.py``, ``summary/live.py``).
  ``path::node`` is read as ``path``, ``--opt=path`` as ``path``.

Not repository paths, and so not checked: words with wildcards or ``<placeholders>``, names in capitals
(``FILE.md``), files the document's own steps create (``file:`` markers, and the values its commands
give to an option: ``--graph-capture-report=graph_capture_out/report.md``), and the outputs listed in
:data:`WRITTEN_BY`, each with the repository file that writes it (checked to name it, so the
exemption cannot go stale).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SUFFIXES = (".py", ".md", ".yml", ".toml", ".sh")
#: Files a tool of this repository writes, named in the docs as outputs: {name: the file that writes it}.
WRITTEN_BY = {"summary.md": "scripts/gpu_check.sh", "bench_out/results.md": "benchmarks/run.py"}

LINK = re.compile(r"\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"(`+)(.+?)\1")
COMMENT = re.compile(r"<!--(.*?)-->", re.S)
CREATES = re.compile(r"<!--\s*(?:pytest-)?file:\s*(\S+)\s*-->")
OPTION_VALUE = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*(?:=|\s+)([^\s`'\"]+)")
PUNCTUATION = "'\"()[],;:.!?"


def _repo_files() -> list[str]:
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        return listed.stdout.split()
    ignore = {".git", ".venv", "__pycache__"}
    return [p.relative_to(REPO).as_posix() for p in REPO.rglob("*") if p.is_file() and not ignore & set(p.parts)]


FILES = _repo_files()
TOP_LEVEL = {path.split("/", 1)[0] for path in FILES if "/" in path}
BASENAMES = {path.rsplit("/", 1)[-1] for path in FILES}


def _names_a_file(word: str) -> bool:
    """``word`` is a repository file's name or the end of its path."""
    return word in BASENAMES if "/" not in word else any(path.endswith("/" + word) for path in FILES)


def documents() -> list[Path]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return docs + sorted((REPO / "examples" / "ci").glob("*.yml")) + sorted((REPO / "docs").rglob("*.yml"))


def _words(text: str) -> list[str]:
    """Path candidates in ``text``: whitespace-separated words, with ``--opt=`` and trailing punctuation cut."""
    out = []
    for word in text.split():
        word = word.split("=", 1)[1] if word.startswith("-") and "=" in word else word
        word = word.split("::", 1)[0].strip(PUNCTUATION)
        if word:
            out.append(word)
    return out


def stale_paths(doc: Path, text: str | None = None) -> list[str]:
    """``line: what`` for each link or named repository path in ``doc`` that does not exist."""
    text = doc.read_text(encoding="utf-8") if text is None else text
    # Option values are outputs of the document's commands unless they point into the repository.
    outputs = {value.strip(PUNCTUATION) for value in OPTION_VALUE.findall(text)}
    created = set(CREATES.findall(text)) | {value for value in outputs if value.partition("/")[0] not in TOP_LEVEL}
    found: list[str] = []

    def check_word(line: int, word: str) -> None:
        if "://" in word or any(c in word for c in "*?{}<>$%|\\"):
            return
        if word in created or word in WRITTEN_BY:
            return
        if word.partition("/")[0] in TOP_LEVEL and "/" in word:
            if not (REPO / word).exists():
                found.append(f"{line}: {word!r} is not a path in the repository")
        elif word.endswith(SUFFIXES) and not _names_a_file(word):
            if not word.rsplit("/", 1)[-1].rsplit(".", 1)[0].isupper():
                found.append(f"{line}: {word!r} names no file in the repository")

    lines = text.splitlines()
    in_comment = ""
    for number, line in enumerate(lines, 1):
        if doc.suffix == ".md":
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                if any(c in target for c in "*?{}<>$%|\\"):  # a template's link (`](<%s>)`), not a path
                    continue
                path = target.split("#", 1)[0]
                if path and not (doc.parent / path).exists():
                    found.append(f"{number}: link {target!r} leads to no file")
            for _, code in CODE.findall(line):
                for word in _words(code):
                    check_word(number, word)
        else:
            for word in _words(line):
                check_word(number, word)
        # HTML comments, one or several lines long; the created-file markers name no repository path.
        in_comment += line + "\n" if in_comment or "<!--" in line else ""
        if in_comment and "-->" in line:
            for body in COMMENT.findall(in_comment):
                if not re.match(r"\s*(?:pytest-)?file:", body):
                    for word in _words(body):
                        check_word(number, word)
            in_comment = ""
    return found


@pytest.mark.parametrize("doc", documents(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_named_path_and_link_exists(doc: Path) -> None:
    stale = stale_paths(doc)
    assert not stale, f"{doc.relative_to(REPO).as_posix()}:\n" + "\n".join(stale)


def test_the_outputs_exempted_are_written_where_said() -> None:
    for name, writer in WRITTEN_BY.items():
        assert name in (REPO / writer).read_text(encoding="utf-8"), f"{writer} no longer writes {name}"


@pytest.mark.parametrize(
    ("line", "stale"),
    [
        ("see [the runner](../pytest_graphcapture/runner.py)", True),
        ("see [the runner](../pytest_graphcapture/engine/runner.py#L10)", False),
        ("run by `tests/test_docs.py`", True),
        ("run by `python tests/e2e/test_docs.py -q`", False),
        ("`pytest tests/e2e/test_docs.py::test_included_files_are_identical`", False),
        ("a module `stream_reader.py`", True),
        ("a module `tracefile.py`", False),
        ("<!-- not-run: tests/test_examples.py runs it -->", True),
        ("<!--\n  listed by tests/test_docs.py\n-->", True),
        ("<!-- pytest-file: tests/test_mine.py -->\n`tests/test_mine.py`", False),
        ("`--graph-capture-report=graph_capture_out/report.md` and `FILE.md`", False),
        ("`--report=docs/nothing.md`", True),
        ("reads the trace (see `summary/live.py`)", False),
        ("reads the trace (see `summary/alive.py`)", True),
        ("`bench_out/results.md` and `out/results.md`", True),
        ("[`ci.md`](ci.md) in a [link](https://example.com/x.py) or [anchor](#top)", False),
        ("[`ci.md`](docs/ci.md)", True),
    ],
)
def test_the_check_finds_what_a_rename_leaves(line: str, stale: bool) -> None:
    found = stale_paths(REPO / "docs" / "example.md", line)
    assert bool(found) == stale, found
