"""The per-key capture sequence, checked with the public fakes (CPU only)."""

from __future__ import annotations

import pytest

from pytest_graphcapture.engine.contract import FORWARD, GRAPH_ENTER, GRAPH_EXIT, HOOK, STEP, key_sequence
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.testing import CallLog, FakeBackend, FakeRunner, RecordingProfiler, assert_call_sequence

KEY = CaptureKey("FakeRunner", 4)


def capture(profiling: bool, with_profiler: bool) -> tuple[CallLog, RecordingProfiler]:
    log = CallLog()
    backend = FakeBackend(log)
    profiler = RecordingProfiler(log)
    runner = FakeRunner([4])
    backend.capture_one(
        KEY,
        runner.forward_for(KEY),
        profiler=profiler if with_profiler else None,
        profiling=profiling,
        post_warmup=runner.post_warmup,
    )
    return log, profiler


def test_no_profiling_runs_three_forwards_two_hooks_and_no_step() -> None:
    log, profiler = capture(profiling=False, with_profiler=True)
    assert (log.count(FORWARD), log.count(HOOK), log.count(STEP)) == (3, 2, 0)
    assert profiler.steps == 0
    assert_call_sequence(log.names(), key_sequence(profiling=False, backend_calls=True))


def test_profiling_enabled_without_a_profiler_is_no_error_and_no_step() -> None:
    log, _ = capture(profiling=True, with_profiler=False)
    assert log.count(STEP) == 0
    assert_call_sequence(log.names(), key_sequence(profiling=False, backend_calls=True))


def test_profiling_steps_three_times_the_last_after_the_graph_context_exits() -> None:
    log, profiler = capture(profiling=True, with_profiler=True)
    names = log.names()
    assert profiler.steps == 3
    assert names.index(GRAPH_ENTER) < names.index(GRAPH_EXIT) < len(names) - 1
    assert names[-1] == STEP, "the last step must come after the graph context has exited"
    inside = names[names.index(GRAPH_ENTER) : names.index(GRAPH_EXIT)]
    assert STEP not in inside, "stepping inside the capture context would synchronize the device"
    assert_call_sequence(names, key_sequence(backend_calls=True))


def test_assert_call_sequence_shows_expected_against_actual() -> None:
    with pytest.raises(AssertionError) as info:
        assert_call_sequence(["synchronize", "forward"], ["synchronize", "barrier", "forward"])
    message = str(info.value)
    assert "-barrier" in message and "expected" in message and "actual" in message


def test_post_warmup_hook_of_the_runner_runs_after_each_warmup() -> None:
    seen: list[CaptureKey] = []
    log = CallLog()
    runner = FakeRunner([2])
    key = CaptureKey("FakeRunner", 2)
    FakeBackend(log).capture_one(key, runner.forward_for(key), post_warmup=seen.append)
    assert seen == [key, key]
    assert runner.forward_calls == 3
