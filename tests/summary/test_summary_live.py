"""Live profiler results and exported trace files give equal summaries (CPU)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from pytest_graphcapture.errors import GraphCaptureError
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.files import summarize_trace_file
from pytest_graphcapture.summary.live import replay_kernels_from_profile, summarize_profile

KEY = CaptureKey("toy", 3)


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(8, 16)
        self.down = torch.nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        return torch.cat([self.down(h), x[:, :4].to(torch.bfloat16).float()], dim=1)


def _profile_steps(tmp_path: Path, on_ready: Any, *, wrap: Any = None, **kwargs: Any) -> dict:
    model = _Model()
    out: dict = {}

    def ready(prof: Any) -> None:
        target = wrap(prof) if wrap else prof
        path = tmp_path / "trace.json.gz"

        def export() -> Path:
            # Kineto saves a trace only once: builds whose events are read from the trace read this export.
            if not path.exists():
                prof.export_chrome_trace(str(path))
            return path

        out["live"] = on_ready(target, export)
        if getattr(target, "exported", None):  # the summary exported it (no export was passed)
            path.write_bytes(gzip.compress(target.exported))
        else:
            export()
        (tmp_path / "trace.json").write_bytes(gzip.decompress((tmp_path / "trace.json.gz").read_bytes()))
        out["steps"] = out.get("steps", 0) + 1

    with (
        torch.no_grad(),
        profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=True,
            schedule=schedule(wait=2, warmup=0, active=1, repeat=0),
            on_trace_ready=ready,
            **kwargs,
        ) as prof,
    ):
        for step in range(4):
            model(torch.randn(3 + step, 8))  # batch changes per step: only the active one must show
            prof.step()
    return out


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_live_equals_file(tmp_path: Path) -> None:
    out = _profile_steps(
        tmp_path, lambda p, export: summarize_profile(p, KEY, platform="cpu", export=export), with_stack=True
    )
    live = out["live"]
    assert out["steps"] == 1
    for name in ("trace.json", "trace.json.gz"):
        from_file = summarize_trace_file(tmp_path / name, key=KEY)
        assert from_file == live, name
    # only the active step (wait=2 → third forward, batch 5) is summarized
    linear = [o for o in live.ops if o["name"] == "aten::linear"]
    assert sorted((o["input_dims"], o["count"]) for o in linear) == [
        ([[5, 8], [16, 8], [16]], 1),
        ([[5, 16], [4, 16], [4]], 1),
    ]
    assert all(o["input_types"][0] == "float" for o in linear)
    cat = [o for o in live.ops if o["name"] == "aten::cat"]
    assert len(cat) == 1 and cat[0]["input_types"][0] == "TensorList"
    assert live.kernels == [] and live.launches == {"total": 0, "by_api": {}} and live.complete
    assert live.environment["profiler"]["record_shapes"] is True


class _OldEvent:
    """A _KinetoEvent as torch 2.11 and older expose it: no activity_type(), no structured_input_shapes()."""

    def __init__(self, event: Any) -> None:
        self._event = event

    def __getattr__(self, name: str) -> Any:
        if name in ("activity_type", "structured_input_shapes"):
            raise AttributeError(name)
        return getattr(self._event, name)


class _OldProfile:
    """A profile of such a build; it keeps what it exports, for the test to compare with."""

    def __init__(self, prof: Any) -> None:
        events = [_OldEvent(e) for e in prof.profiler.kineto_results.events()]
        results = type("Results", (), {"events": lambda self: events})()
        self.profiler = type("Inner", (), {"kineto_results": results})()
        self.record_shapes = True
        self.profile_memory = prof.profile_memory
        self._prof = prof
        self.exported: Any = None

    def export_chrome_trace(self, path: str) -> None:
        self._prof.export_chrome_trace(path)
        self.exported = Path(path).read_bytes()


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_live_path_without_newer_event_methods_reads_the_profiles_trace(tmp_path: Path) -> None:
    """Where Kineto events cannot say their kind or list shapes, the summary is the trace file's.

    Classifying such events by name took runtime calls and ``[memory]`` events for ops and
    lost the shapes of list arguments (``aten::cat``).
    """
    out = _profile_steps(
        tmp_path, lambda p, export: summarize_profile(p, KEY, platform="cpu"), wrap=_OldProfile, profile_memory=True
    )
    from_file = summarize_trace_file(tmp_path / "trace.json", key=KEY)
    assert out["live"].comparable() == from_file.comparable()
    names = {o["name"] for o in out["live"].ops}
    assert "aten::linear" in names and not any(name.startswith("[") for name in names)
    cat = [o for o in out["live"].ops if o["name"] == "aten::cat"]
    assert len(cat) == 1 and cat[0]["input_dims"][0] != []  # the TensorList's shapes are kept


def test_the_callers_export_is_read_when_the_events_cannot_be(tmp_path: Path) -> None:
    """A profile exports once: the summary reads the caller's export of the cycle instead of exporting again."""
    trace = tmp_path / "cycle.json"
    trace.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "tid": 1, "args": {}},
                    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "ts": 2, "tid": 1, "args": {}},
                ]
            }
        ),
        encoding="utf-8",
    )

    class Exported:
        profiler = type("Inner", (), {"kineto_results": type("R", (), {"events": lambda self: [object()]})()})()

        def export_chrome_trace(self, path: str) -> None:
            raise AssertionError("exported twice")

    summary = summarize_profile(Exported(), KEY, platform="cpu", environment={}, export=lambda: trace)
    assert [(o["name"], o["count"]) for o in summary.ops] == [("aten::mm", 1)]


class _KindsButNoMetadata:
    """An event that says its kind and list shapes but has no metadata_json() (no grid, block, graph node id)."""

    def activity_type(self) -> str:
        return "cpu_op"

    def structured_input_shapes(self) -> list:
        return [[2, 2]]

    def name(self) -> str:
        return "aten::from_the_events"


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_live_summary_and_replay_kernels_on_builds_read_from_the_trace_leave_the_export_to_the_caller(
    tmp_path: Path,
) -> None:
    """On builds whose events are read from the trace (2.8 to 2.12), the caller's export is the one read.

    A profile exports once: summarizing it through a temporary export left the caller's own
    export failing with torch's ``Trace is already saved``.
    """
    out = _profile_steps(
        tmp_path,
        lambda p, export: (
            summarize_profile(p, KEY, platform="cpu", export=export),
            replay_kernels_from_profile(p, export=export),
        ),
        wrap=_OldProfile,
    )
    summary, kernels = out["live"]
    assert summary.comparable() == summarize_trace_file(tmp_path / "trace.json", key=KEY).comparable()
    assert kernels == [] and out["steps"] == 1


def test_events_without_metadata_are_read_from_the_trace(tmp_path: Path) -> None:
    """Kinds and list shapes are not enough: without metadata a kernel loses its grid, block and graph node id."""
    trace = tmp_path / "cycle.json"
    op = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "tid": 1, "args": {}}
    trace.write_text(json.dumps({"traceEvents": [op]}), encoding="utf-8")
    events = [_KindsButNoMetadata()]

    class Profile:
        profiler = type("Inner", (), {"kineto_results": type("R", (), {"events": lambda self: events})()})()

    summary = summarize_profile(Profile(), KEY, platform="cpu", environment={}, export=lambda: trace)
    assert [(o["name"], o["count"]) for o in summary.ops] == [("aten::mm", 1)]


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_replay_kernels_from_cpu_profile_is_empty(tmp_path: Path) -> None:
    out = _profile_steps(tmp_path, lambda p, export: replay_kernels_from_profile(p, export=export))
    assert out["live"] == []


def test_profile_without_results_is_a_clear_error() -> None:
    with pytest.raises(GraphCaptureError, match="on_trace_ready"):
        summarize_profile(object(), KEY, platform="cpu")


@pytest.mark.filterwarnings("ignore:Profiler won't be using warmup")
def test_live_ops_carry_the_thread_ids_and_spans_kernel_attribution_needs(tmp_path: Path) -> None:
    # Attribution finds a launch's op on the launching thread: live events must name threads as
    # the trace file does (the system thread id, not the profiler's own thread numbering).
    from pytest_graphcapture.summary.live import _profile_events

    out = _profile_steps(tmp_path, lambda p, export: [e for e in _profile_events(p) if e["cat"] == "cpu_op"])
    trace = json.loads((tmp_path / "trace.json").read_text())
    file_ops = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    assert {e["tid"] for e in out["live"]} == {e["tid"] for e in file_ops}
    assert sorted(e["dur"] / 1000 for e in out["live"]) == pytest.approx(sorted(e["dur"] for e in file_ops), abs=1e-3)
