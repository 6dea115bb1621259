"""Generate docs/configuration.md from the code, so the reference cannot drift.

Everything is read from the installed plugin, never listed by hand:

* settings — ``config.SETTINGS`` after importing every module of the package
  (command-line option, environment variable, ini key, default, choices, help);
* other environment variables — ``GRAPH_CAPTURE_*`` names found in the package's
  source that are not settings; each needs a line in :data:`OTHER_ENV` (the drift
  test fails naming any that has none); and the CI-detection variables
  (``settings.CI_VARIABLES``);
* markers — the lines ``pytest --markers`` prints with the plugin loaded and not
  without it;
* fixtures — pytest fixture definitions in the package's modules, with docstrings;
* hooks — the hookspecs in ``pytest_graphcapture.plugin.hookspecs`` with signatures;
* ``golden.check`` / ``graph_capture`` keyword arguments — their signatures;
* the ``graphcapture`` command line — its argparse parser, subcommand by subcommand.

Run ``python scripts/gen_config_docs.py`` to rewrite the file, ``--check`` to
exit 1 when it is out of date (``tests/e2e/test_docs.py`` does the same).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

REPO = Path(__file__).resolve().parent.parent
TARGET = REPO / "docs" / "configuration.md"

#: Environment variables read outside the settings registry: what each does.
OTHER_ENV = {
    "GRAPH_CAPTURE_MAX_TRACE_BYTES": "cap on the decompressed size of a trace file the summarizer or the "
    "`graphcapture` CLI reads (bytes, or `512M`, `4GiB`; default 2 GiB): a "
    "corrupt or hostile trace fails with a clear error instead of exhausting memory",
    "GRAPH_CAPTURE_REAL_TRACES": "the project's own tests only: folder of the real NVIDIA/AMD traces "
    "(default `../shared/testdata/real_traces`)",
}


def _modules() -> list[Any]:
    import pytest_graphcapture

    names = sorted(
        m.name
        for m in pkgutil.walk_packages(pytest_graphcapture.__path__, "pytest_graphcapture.")
        if not m.name.endswith("__main__")
    )
    return [importlib.import_module(name) for name in names]


def _settings() -> list[Any]:
    _modules()
    from pytest_graphcapture.plugin.settings import SETTINGS

    return sorted(SETTINGS.values(), key=lambda s: s.option)


def _env_in_source() -> set[str]:
    import pytest_graphcapture

    found: set[str] = set()
    for path in Path(pytest_graphcapture.__file__).parent.rglob("*.py"):
        found |= set(re.findall(r"\bGRAPH_CAPTURE_[A-Z0-9_]+\b", path.read_text(encoding="utf-8")))
    return found


def undocumented_env() -> list[str]:
    """``GRAPH_CAPTURE_*`` names in the source that are neither settings nor in :data:`OTHER_ENV`."""
    known = {s.env for s in _settings()} | set(OTHER_ENV)
    return sorted(_env_in_source() - known)


def _ci_variables() -> list[str]:
    """The CI-detection variables, read from ``settings.CI_VARIABLES`` and ``settings.CI_OFF_VALUES``."""
    from pytest_graphcapture.golden.store import CI_OFF_VALUES, CI_VARIABLES

    off = ", ".join(f"`{v}`" for v in CI_OFF_VALUES)
    return [
        "**CI detection.** The plugin never sets these; it reads them to tell whether it runs on CI. When any "
        f"of them is set to a value other than empty, {off} (any case), `--update-golden` is refused and a "
        "failing check says that updating is refused there:",
        "",
        ", ".join(f"`{name}`" for name in CI_VARIABLES) + ".",
    ]


def _markers() -> list[tuple[str, str]]:
    def run(*extra: str) -> set[str]:
        with tempfile.TemporaryDirectory() as empty:
            (Path(empty) / "pytest.ini").write_text("[pytest]\n")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("GRAPH_CAPTURE_", "PYTEST_ADDOPTS"))}
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "--markers", "-p", "no:cacheprovider", *extra],
                cwd=empty,
                capture_output=True,
                text=True,
                timeout=120,
                env=env,
            )
        if done.returncode != 0:
            raise RuntimeError(f"pytest --markers failed: {done.stderr[-500:]}")
        return {line for line in done.stdout.splitlines() if line.startswith("@pytest.mark.")}

    ours = run() - run("-p", "no:graphcapture")  # the installed plugin (pytest11 entry point) vs none
    out = []
    for line in sorted(ours):
        head, _, text = line.partition(": ")
        out.append((head.removeprefix("@pytest.mark."), text.strip()))
    return out


def _fixture_info(obj: Any) -> Optional[tuple[str, Any]]:
    """``(name, function)`` when ``obj`` is a pytest fixture definition (pytest 7 to 9)."""
    marker = getattr(obj, "_pytestfixturefunction", None)
    if marker is not None:
        return (getattr(marker, "name", None) or obj.__name__), obj
    if type(obj).__name__ == "FixtureFunctionDefinition":
        func = getattr(obj, "_get_wrapped_function", lambda: getattr(obj, "__wrapped__", obj))()
        return (getattr(obj, "name", None) or func.__name__), func
    return None


def _fixtures() -> list[tuple[str, str, str]]:
    out = {}
    for module in _modules():
        for value in vars(module).values():
            info = _fixture_info(value)
            if info is not None:
                name, func = info
                out[name] = (name, module.__name__, inspect.getdoc(func) or "")
    return [out[k] for k in sorted(out)]


def _hooks() -> list[tuple[str, str, bool, str]]:
    from pytest_graphcapture.plugin import hookspecs

    out = []
    for name, func in sorted(vars(hookspecs).items()):
        if name.startswith("pytest_") and callable(func) and hasattr(func, "pytest_spec"):
            spec = func.pytest_spec or {}
            out.append(
                (name, _signature(func, returns=True), bool(spec.get("firstresult")), inspect.getdoc(func) or "")
            )
    return out


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _annotation(value: Any) -> str:
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _signature(func: Any, *, returns: bool = False) -> str:
    """``(a: int, *, b: str = 'x')`` with annotations as written (no quotes from postponed evaluation)."""
    sig = inspect.signature(func)
    parts, star = [], False
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            text += f" = {p.default!r}" if p.annotation is not p.empty else f"={p.default!r}"
        parts.append(text)
    tail = f" -> {_annotation(sig.return_annotation)}" if returns and sig.return_annotation is not sig.empty else ""
    return f"({', '.join(parts)}){tail}"


def _usage(name: str, command: argparse.ArgumentParser) -> str:
    """Usage line built from the actions (argparse's own format differs between Python versions)."""
    words = [f"graphcapture {name}"]
    for action in command._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            metavar = action.metavar or (
                f"{{{','.join(map(str, action.choices))}}}" if action.choices else action.dest.upper()
            )
            flag = action.option_strings[-1]
            words.append(f"[{flag}]" if action.nargs == 0 else f"[{flag} {metavar}]")
    for action in command._actions:
        if not action.option_strings:
            metavar = action.metavar or action.dest
            words.append(f"{metavar} [{metavar} ...]" if action.nargs == "+" else metavar)
    return " ".join(words)


def _cli() -> list[str]:
    from pytest_graphcapture.tools.cli import build_parser

    parser = build_parser()
    lines: list[str] = []
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    for name, command in sub.choices.items():
        usage = _usage(name, command)
        lines += [f"### `graphcapture {name}`", "", _cell(helps.get(name, "")), "", "```text", usage, "```", ""]
        rows = []
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            what = ", ".join(action.option_strings) or action.metavar or action.dest
            choices = f" (one of {', '.join(map(str, action.choices))})" if action.choices else ""
            rows.append(f"| `{what}` | {_cell((action.help or '') + choices)} |")
        if rows:
            lines += ["| argument | meaning |", "|---|---|", *rows, ""]
    return lines


def render() -> str:
    """The full text of docs/configuration.md."""
    from pytest_graphcapture.plugin.fixtures import GoldenChecker, GraphCapture

    out = [
        "# Configuration reference",
        "",
        "<!-- Generated by scripts/gen_config_docs.py from the code; do not edit by hand.",
        "     tests/e2e/test_docs.py fails when this file is out of date: rerun the script. -->",
        "",
        "Every setting can be given on the command line, in the environment or in the ini file "
        "(`pytest.ini`, `[tool.pytest.ini_options]`, …). Precedence: **command line > environment variable "
        "> ini key > default**. Options marked *flag* may be given bare (`--update-golden`) and then take the "
        "value shown; put test paths *before* a bare flag.",
        "",
        "**Relative paths**, in every path setting, follow pytest's own rule: a path given on the command line "
        "or in an environment variable is relative to the directory the command was started in; a path in the "
        "ini file is relative to the ini file's directory, wherever pytest is started; a default is relative "
        "to the rootdir (the ini file's directory when there is one). `graphcapture accept` without "
        "`--golden-dir` uses the golden tree a `pytest` started in the same directory would use: "
        "`GRAPH_CAPTURE_GOLDEN_DIR`, else the `golden_dir` ini key of the ini file pytest finds from there, "
        "else `goldens` in the rootdir.",
        "",
        "## Settings",
        "",
        "| option | environment variable | ini key | default | values | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for s in _settings():
        values = ", ".join(f"`{c}`" for c in s.choices) if s.choices else (f"`{s.metavar}`" if s.metavar else "")
        if s.const is not None:
            values += f" (flag: `{s.const}`)"
        default = f"`{s.default}`" if s.default is not None else "—"
        out.append(f"| `{s.option}` | `{s.env}` | `{s.ini}` | {default} | {values} | {_cell(s.help)} |")
    out += ["", "## Other environment variables", "", "| variable | what it does |", "|---|---|"]
    for name in sorted(OTHER_ENV):
        out.append(f"| `{name}` | {OTHER_ENV[name]} |")
    out += ["", *_ci_variables()]
    out += ["", "## Markers", "", "| marker | what it does |", "|---|---|"]
    for name, text in _markers():
        out.append(f"| `@pytest.mark.{name}` | {_cell(text)} |")
    out += ["", "## Fixtures", ""]
    for name, module, doc in _fixtures():
        out += [f"### `{name}`", "", f"Defined in `{module}`.", "", doc, ""]
    out += [
        "## `golden.check(...)`",
        "",
        "```text",
        f"golden.check{_signature(GoldenChecker.check)}",
        "```",
        "",
        inspect.getdoc(GoldenChecker.check) or "",
        "",
        "## `graph_capture(...)`",
        "",
        "```text",
        f"graph_capture{_signature(GraphCapture.__call__)}",
        "```",
        "",
        inspect.getdoc(GraphCapture.__call__) or "",
        "",
        "## Hooks",
        "",
        "Implement them in a `conftest.py` (or a plugin) like any pytest hook.",
        "",
    ]
    for name, sig, first, doc in _hooks():
        kind = "first non-`None` result wins" if first else "every implementation is called"
        out += [f"### `{name}{sig}`", "", f"*{kind}.*", "", doc, ""]
    out += [
        "## The `graphcapture` command line",
        "",
        "Exit codes: 0 success / equal; 1 a difference (`diff` found one; `check` found a key that differs, has "
        "no golden, or has a golden but is not in the traces); 2 bad input, an incomplete capture or nothing to "
        "check (one line on stderr); 130 interrupted; when the reader of the output leaves before all of it is written (`| head -1`), still 1 for a "
        "difference, else 141 (as a tool killed by SIGPIPE), with no traceback, so `set -o pipefail` "
        "scripts see no false success. An output file that is one of the command's inputs (`summarize X "
        "--out X`, `show DIR --html DIR/a.json`; the same file under any name) is refused with exit 2 and "
        "the input left as it was. `graphcapture --version` prints the version.",
        "",
    ]
    out += _cli()
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/configuration.md is out of date")
    args = parser.parse_args(argv)
    missing = undocumented_env()
    if missing:
        print(
            f"undocumented environment variables: {', '.join(missing)}; describe them in OTHER_ENV in "
            f"{Path(__file__).name}",
            file=sys.stderr,
        )
        return 1
    text = render()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET.relative_to(REPO)} is out of date: run python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
