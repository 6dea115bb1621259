"""Shared helpers of the project's own tests."""

from __future__ import annotations

import os

import pytest

# CI sets CI=true; tests that run pytest inside pytest must not inherit it unless they mean to.
CI_VARIABLES = ("CI", "GITHUB_ACTIONS", "GITLAB_CI", "BUILDKITE", "JENKINS_URL", "TF_BUILD", "CIRCLECI",
                "TRAVIS", "TEAMCITY_VERSION", "BITBUCKET_BUILD_NUMBER", "DRONE")
GRAPH_CAPTURE_VARIABLES = tuple(name for name in os.environ if name.startswith("GRAPH_CAPTURE_")
                                and name != "GRAPH_CAPTURE_REAL_TRACES")


@pytest.fixture(autouse=True)
def _isolated_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts outside CI and without GRAPH_CAPTURE_* settings from the outer shell."""
    for name in CI_VARIABLES + GRAPH_CAPTURE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _preload_lazy_torch_modules() -> None:
    """Import what torch.profiler imports lazily, once, before any pytester inline run.

    pytester's inline runs drop modules imported during the run; torch re-importing
    its dynamo/distributed modules then fails ("Only a single TORCH_LIBRARY ...").
    """
    import torch
    import torch.profiler

    with torch.profiler.profile(record_shapes=True):
        torch.zeros(1) + 1


_preload_lazy_torch_modules()
