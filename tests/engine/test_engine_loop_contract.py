"""The step contract the engine-loop gate checks as the engine's calls happen (no capture needed)."""

from __future__ import annotations

import tracemalloc

import pytest

from pytest_graphcapture.engine.contract import (
    FORWARD,
    GRAPH_ENTER,
    GRAPH_EXIT,
    STEP,
    CaptureContractError,
    StepContract,
    key_sequence,
)
from pytest_graphcapture.keys import CaptureKey

BIG, SMALL = CaptureKey("Engine", 4), CaptureKey("Engine", 2)


def feed(contract: StepContract, calls: list[tuple[str, CaptureKey]]) -> None:
    for event, key in calls:
        contract.feed(event, key)


def key_calls(key: CaptureKey, sequence: list[str]) -> list[tuple[str, CaptureKey]]:
    return [(event, key) for event in sequence]


def test_the_documented_sequence_of_every_key_is_accepted() -> None:
    contract = StepContract()
    feed(contract, key_calls(BIG, key_sequence()) + key_calls(SMALL, key_sequence()))
    contract.finish()
    assert contract.done == [BIG, SMALL]


@pytest.mark.parametrize(
    ("calls", "message"),
    [
        (
            key_calls(BIG, [FORWARD, STEP, FORWARD, STEP, FORWARD]),
            "Engine bs=4: capture: expected the start of the graph capture, but the loop ran a forward",
        ),
        (
            key_calls(BIG, [FORWARD, STEP, GRAPH_ENTER]),
            "Engine bs=4: warmup 2: expected a forward, but the loop ran the start of the graph capture",
        ),
        (
            key_calls(BIG, key_sequence()) + key_calls(BIG, [GRAPH_ENTER]),
            "Engine bs=4: after the capture: the start of the graph capture of a key already captured",
        ),
        (
            key_calls(BIG, key_sequence()) + key_calls(SMALL, key_sequence()) + key_calls(BIG, [FORWARD]),
            "Engine bs=4: warmup 1: this key was captured already; an engine captures one graph per key",
        ),
        (
            key_calls(BIG, [FORWARD, STEP]) + key_calls(SMALL, [FORWARD]),
            "Engine bs=4: warmup 2: the loop moved on to bs=2 before this key was captured",
        ),
        ([(STEP, None)], "a profiler step came before any forward"),
    ],
    ids=["third warmup", "one warmup", "two graphs for one key", "key again", "moved on", "step first"],
)
def test_a_call_out_of_place_names_the_key_and_the_stage(calls: list, message: str) -> None:
    with pytest.raises(CaptureContractError, match="^graph_capture.engine: ") as info:
        feed(StepContract(), calls)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_loop_that_returns_early_or_captures_nothing_fails_on_finish() -> None:
    contract = StepContract()
    feed(contract, key_calls(BIG, [FORWARD, STEP, FORWARD, STEP]))
    with pytest.raises(CaptureContractError, match="Engine bs=4: capture: the capture function returned before"):
        contract.finish()
    with pytest.raises(CaptureContractError, match="captured no graph"):
        StepContract().finish()


def test_variants_of_one_size_may_come_in_any_order_but_sizes_only_descend() -> None:
    contract = StepContract()
    draft, plain = CaptureKey("Engine", 4, "draft"), CaptureKey("Engine", 4)
    feed(contract, key_calls(draft, key_sequence()) + key_calls(plain, key_sequence()))
    with pytest.raises(CaptureContractError, match="Engine bs=8: warmup 1: captured after bs=4; keys must be"):
        contract.feed(FORWARD, CaptureKey("Engine", 8))


def _peak_bytes(warmups: int) -> int:
    """The peak memory a contract of ``warmups`` takes while it checks one key's whole sequence."""
    tracemalloc.start()
    try:
        contract = StepContract(warmups)
        for n in range(2 * warmups):
            contract.feed(STEP if n % 2 else FORWARD, BIG)
            assert contract.stage.startswith(("warmup", "profiler step after warmup", "capture"))
        for event in (GRAPH_ENTER, FORWARD, GRAPH_EXIT, STEP):
            contract.feed(event, BIG)
        contract.finish()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("warmups", [1000, 300])  # 1000: the most warmups= accepts
def test_the_memory_of_the_contract_does_not_grow_with_the_warmup_count(warmups: int) -> None:
    few = _peak_bytes(1)
    assert _peak_bytes(warmups) < few + 4096, "the contract keeps something per warmup"


def test_a_loop_breaking_the_contract_after_many_warmups_names_the_warmup() -> None:
    contract = StepContract(700)
    feed(contract, [(FORWARD, BIG), (STEP, BIG)] * 449 + [(FORWARD, BIG)])
    with pytest.raises(
        CaptureContractError,
        match="Engine bs=4: profiler step after warmup 450: expected a profiler step, but the loop ran a forward; per key the loop must run 700 warmup forwards",
    ):
        contract.feed(FORWARD, BIG)
