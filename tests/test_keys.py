"""Capture keys and the sanitizing of names that come from users."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_graphcapture.keys import MAX_NAME_LENGTH, UNKNOWN_BATCH_SIZE, CaptureKey, capture_order, safe_name
from pytest_graphcapture.naming import trace_file_name


@pytest.mark.parametrize(
    "raw",
    [
        "..",
        "../../etc/passwd",
        "a/b",
        "a\\b",
        "nul\x00byte",
        ".hidden",
        "",
        "/",
        "x" * 5000,
        "décodé-ünïcode",
        "日本語",
    ],
)
def test_safe_name_is_one_harmless_path_component(raw: str) -> None:
    name = safe_name(raw)
    assert name and "/" not in name and "\\" not in name and "\x00" not in name
    assert not name.startswith(".")
    assert len(name) <= MAX_NAME_LENGTH
    assert name.isascii()


def test_plain_names_stay_as_they_are() -> None:
    assert safe_name("TinyDecodeRunner") == "TinyDecodeRunner"
    assert safe_name("lora-r16_v2.1") == "lora-r16_v2.1"


def test_names_that_needed_changes_stay_readable_and_distinct() -> None:
    assert safe_name("a/b").startswith("a_b-")
    assert safe_name("a/b") != safe_name("a\\b") != safe_name("a b")
    assert safe_name("décodé").startswith("decode-")


@given(st.text(max_size=300), st.text(max_size=300))
def test_distinct_names_map_to_distinct_components(a: str, b: str) -> None:
    if a != b:
        assert safe_name(a) != safe_name(b)


def test_capture_order_is_largest_batch_size_first_variants_in_the_given_order() -> None:
    keys = [CaptureKey("R", 1), CaptureKey("R", 4, "target"), CaptureKey("R", 4, "draft"), CaptureKey("R", 2)]
    assert capture_order(keys) == [
        CaptureKey("R", 4, "target"),
        CaptureKey("R", 4, "draft"),
        CaptureKey("R", 2),
        CaptureKey("R", 1),
    ]


def test_runner_capture_keys_keep_the_declared_variant_order() -> None:
    from pytest_graphcapture.engine.runner import GraphRunner

    class Lora(GraphRunner):
        def batch_sizes(self) -> list:
            return [1, 2]

        def variants(self) -> list:
            return ["lora", None]  # the engine captures lora before the plain graph

    assert [(k.batch_size, k.variant) for k in Lora().capture_keys()] == [
        (2, "lora"),
        (2, None),
        (1, "lora"),
        (1, None),
    ]


@pytest.mark.parametrize("bs", [-1, 1.5, True])
def test_batch_size_must_be_a_positive_integer(bs: object) -> None:
    with pytest.raises(ValueError, match="batch size"):
        CaptureKey("R", bs)  # type: ignore[arg-type]


def test_batch_size_zero_is_the_unknown_one() -> None:
    """Only keys read from traces that do not say their batch size; runners never capture it."""
    assert str(CaptureKey("R", UNKNOWN_BATCH_SIZE)) == "R[bs=?, rank=0]"


def test_trace_file_names() -> None:
    assert trace_file_name(CaptureKey("R", 8)) == "R_bs_8_rank0.json.gz"
    assert trace_file_name(CaptureKey("R", 8, "draft", 2)) == "R_bs_8_draft_rank2.json.gz"
