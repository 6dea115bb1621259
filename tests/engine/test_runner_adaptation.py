"""Adapting an engine's own runner: what runners list, what they return, and what is recorded."""

from __future__ import annotations

import enum
import os
from pathlib import Path

import pytest
import torch

from pytest_graphcapture.engine.backend import EagerBackend
from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
from pytest_graphcapture.errors import CaptureError, UsageError
from pytest_graphcapture.keys import CaptureKey, key_label
from pytest_graphcapture.naming import golden_file_name
from pytest_graphcapture.testing import FakeRunner


class Mode(enum.Enum):
    """Forward modes the way engines spell them."""

    DECODE = 1
    DRAFT = 2


class ModeRunner(FakeRunner):
    """Dispatches on the enum member it listed: the runner gets its own variant values back."""

    def forward_for(self, key: CaptureKey):  # type: ignore[no-untyped-def]
        assert isinstance(key.variant, Mode), f"forward_for got {key.variant!r}, not the runner's own variant"
        bs = key.batch_size

        def forward() -> None:
            y = torch.mm(self.x[:bs], self.w)
            if key.variant is Mode.DRAFT:
                y = torch.tanh(y)
            self.out[:bs].copy_(y)

        return forward


def summarize_only() -> CaptureSettings:
    return CaptureSettings(trace="off", summarize=True)


def op_names(summary) -> set[str]:  # type: ignore[no-untyped-def]
    return {op["name"] for op in summary.to_dict()["ops"]}


def test_duplicate_batch_sizes_and_variants_are_captured_once() -> None:
    result = capture_runner(
        FakeRunner([4, 1, 4, 2, 1], variants=[None, "lora", None]), EagerBackend(), summarize_only()
    )
    assert [(k.batch_size, k.variant) for k in result.keys] == [
        (4, None),
        (4, "lora"),
        (2, None),
        (2, "lora"),
        (1, None),
        (1, "lora"),
    ]


def test_a_batch_size_that_is_not_a_positive_integer_is_one_usage_error() -> None:
    with pytest.raises(UsageError, match=r"runner FakeRunner lists batch size 2\.5, which is not a positive integer"):
        capture_runner(FakeRunner([4, 2.5]), EagerBackend(), summarize_only())  # type: ignore[list-item]


def test_enum_variants_are_captured_and_named_by_their_name() -> None:
    result = capture_runner(ModeRunner([2, 1], variants=[Mode.DECODE, Mode.DRAFT]), EagerBackend(), summarize_only())
    keys = list(result.keys)
    assert [(k.batch_size, k.variant) for k in keys] == [
        (2, Mode.DECODE),
        (2, Mode.DRAFT),
        (1, Mode.DECODE),
        (1, Mode.DRAFT),
    ]
    draft = result.for_batch_size(2, Mode.DRAFT)
    assert draft.summary.to_dict()["key"]["variant"] == "DRAFT"
    assert "aten::tanh" in op_names(draft.summary)
    assert "aten::tanh" not in op_names(result.for_batch_size(2, Mode.DECODE).summary)
    assert golden_file_name(draft.key) == "ModeRunner_bs_2_DRAFT.json"
    assert key_label(draft.key) == "bs=2 variant=DRAFT"
    assert sorted(keys) == sorted(keys, key=lambda k: (k.batch_size, k.variant_name))


def test_a_variant_named_None_is_told_apart_from_the_plain_graph() -> None:
    plain, named = CaptureKey("R", 4), CaptureKey("R", 4, "None")
    assert key_label(plain) == "bs=4"
    assert key_label(named) == 'bs=4 variant="None"'
    assert str(named) == 'R[bs=4, variant="None", rank=0]'
    assert golden_file_name(plain) != golden_file_name(named)


def test_an_unhashable_or_empty_variant_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match=r"a variant must be hashable, got \['lora'\]"):
        CaptureKey("R", 4, ["lora"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a variant needs a non-empty string form"):
        CaptureKey("R", 4, "")


class TupleRunner(FakeRunner):
    def forward_for(self, key: CaptureKey):  # type: ignore[no-untyped-def]
        return (super().forward_for(key), "extra")


def test_forward_for_returning_a_non_callable_says_what_it_must_return() -> None:
    with pytest.raises(CaptureError) as caught:
        capture_runner(TupleRunner([1]), EagerBackend(), summarize_only())
    message = str(caught.value)
    assert "TupleRunner.forward_for(TupleRunner[bs=1, rank=0]) returned a tuple, not a callable" in message
    assert "it must return a function taking no arguments that runs one forward on the static buffers" in message
    assert "'tuple' object is not callable" not in message


class CumsumHookRunner(FakeRunner):
    """A ``post_warmup`` hook doing torch work of its own, as engines' hooks do."""

    def post_warmup(self, key: CaptureKey) -> None:
        torch.cumsum(self.out, dim=0)


def test_post_warmup_work_is_not_recorded() -> None:
    result = capture_runner(CumsumHookRunner([2, 1]), EagerBackend(), summarize_only())
    for key_result in result:
        names = op_names(key_result.summary)
        assert "aten::mm" in names, "the capture forward is recorded"
        assert "aten::cumsum" not in names, "the hook's work after the second warmup must stay out of the summary"


class LoudRunner(FakeRunner):
    """Writes to the stderr descriptor itself: that output must still reach the user."""

    def forward_for(self, key: CaptureKey):  # type: ignore[no-untyped-def]
        inner = super().forward_for(key)

        def forward() -> None:
            os.write(2, f"runner says bs={key.batch_size}\n".encode())
            inner()

        return forward


def test_kineto_trace_points_stay_out_of_stderr_and_other_output_stays(
    capfd: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    capture_runner(LoudRunner([2, 1]), EagerBackend(), CaptureSettings(trace="per-bs", out_dir=tmp_path))
    err = capfd.readouterr().err
    assert "USDT" not in err and "profiler_start" not in err
    assert err.count("runner says bs=2\n") == 3 and err.count("runner says bs=1\n") == 3
