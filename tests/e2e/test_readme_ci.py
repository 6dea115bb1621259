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


def test_readme_quickstart_and_contributing_install_torchs_cpu_build_with_one_command() -> None:
    """torch's CPU index beside PyPI: `==2.13.0` admits `2.13.0+cpu`, which pip ranks above PyPI's CUDA build."""
    installs = {step for command in _readme_commands() for step in command.split(" && ") if "torch==" in step}
    (install,) = installs
    assert "--extra-index-url https://download.pytorch.org/whl/cpu" in install and "--retries 1" in install
    for page in ("docs/quickstart.md", "CONTRIBUTING.md"):
        assert install in (REPO_ROOT / page).read_text(encoding="utf-8"), f"{page}: not the README's torch install"
