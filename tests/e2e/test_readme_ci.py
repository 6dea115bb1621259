"""The README's claim about CI holds: ``.ci/run`` runs the main job verbatim and the test command's steps in order."""

from __future__ import annotations

import re

from helpers import REPO_ROOT


def _readme_commands() -> list[str]:
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"<!-- not-run: [^>]*\.ci/run[^>]*-->\n```bash\n(.+?)\n```", text)


def test_ci_runs_the_main_job_verbatim_and_the_test_command_step_by_step() -> None:
    main_job, tests = _readme_commands()
    ci = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert main_job in ci  # verbatim, as the README says
    # The test command, split only to run ruff between the install and pytest.
    steps = tests.split(" && ")
    install, pytest_step = " && ".join(steps[:-1]), steps[-1]
    assert install in ci and pytest_step in ci
    first, last = ci.index(install), ci.index(pytest_step)
    assert first < ci.index("ruff check .") < ci.index("ruff format --check .") < last < ci.index(main_job)
