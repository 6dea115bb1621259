"""A golden that repeats a key anywhere is refused, naming the file and the key, however the file is written.

Goldens are parsed at C speed and the slow duplicate-key hook only runs when a count
says a key may be repeated (``_io.loads_unique``): these tests hold that shortcut to
giving exactly what the strict parse gives, for valid goldens and damaged ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_graphcapture import _io
from pytest_graphcapture.errors import GoldenError
from pytest_graphcapture.golden import store
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.model import Summary


def golden_dict(types: tuple[str, ...] = ("float", "c10::BFloat16"), env: Any = None) -> dict:
    """A golden the way --update-golden writes it: kernels with launching ops, ops, launches, environment."""
    op = {"name": "aten::mm", "input_dims": [[8, 256], [256, 128]]}
    summary = Summary(
        key=CaptureKey("Fake", 8, "decode", 0),
        platform="cuda",
        kernels=[
            {"name": "at::native::elementwise_kernel", "kind": "kernel", "count": 3, "op": op},
            {"name": "gemv_kernel", "kind": "kernel", "count": 1, "grid": [4, 1, 1], "block": [128, 1, 1], "op": op},
            {"name": "Memcpy DtoD", "kind": "memcpy", "count": 1},
        ],
        ops=[
            {"name": "aten::mm", "input_dims": [[8, 256], [256, 128]], "input_types": list(types), "count": 2},
            {"name": "aten::add_", "input_dims": [[8, 128], [8, 128], []], "input_types": ["float"] * 3, "count": 1},
        ],
        launches={"total": 5, "by_api": {"cudaLaunchKernel": 4, "cudaMemcpyAsync": 1}},
        environment=env if env is not None else {"torch_version": "2.13.0", "device_name": "H100: SXM"},
    )
    data = summary.to_dict()
    data["launch_budget"] = 10
    return data


# A JSON document as a tree that can hold a key twice: ("obj", [(key, tree), ...]), ("arr", [tree, ...]), ("val", v).
Tree = tuple


def tree_of(value: Any) -> Tree:
    if isinstance(value, dict):
        return ("obj", [(k, tree_of(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("arr", [tree_of(v) for v in value])
    return ("val", value)


def objects(tree: Tree) -> Iterator[list]:
    """Every object's pair list, in document order."""
    kind, body = tree
    if kind == "obj":
        yield body
        for _, child in body:
            yield from objects(child)
    elif kind == "arr":
        for child in body:
            yield from objects(child)


def text_of(tree: Tree, *, escape_colons: bool = False, spaced: bool = False) -> str:
    """The document as JSON text; ``escape_colons`` writes every colon inside a string as ``\\u003a``."""

    def string(s: str) -> str:
        out = json.dumps(s, ensure_ascii=False)
        return out.replace(":", "\\u003a") if escape_colons else out

    kind, body = tree
    if kind == "obj":
        sep = " : " if spaced else ": "
        return (
            "{"
            + ", ".join(string(k) + sep + text_of(v, escape_colons=escape_colons, spaced=spaced) for k, v in body)
            + "}"
        )
    if kind == "arr":
        return "[" + ", ".join(text_of(v, escape_colons=escape_colons, spaced=spaced) for v in body) + "]"
    return string(body) if isinstance(body, str) else json.dumps(body)


def strict(text: str) -> Any:
    """What the strict parser says: the value, or its message."""
    try:
        return _io.loads_strict(text, unique_keys=True)
    except _io.JSONProblem as exc:
        return f"error: {exc}"


def golden_parse(text: str, path: Path) -> Any:
    try:
        return store.parse_golden_text(text, path)
    except GoldenError as exc:
        assert str(path) in str(exc)
        return f"error: {exc.problem}"


def test_a_golden_as_written_reads_back_as_its_dict(tmp_path: Path) -> None:
    data = golden_dict()
    path = tmp_path / "Fake_bs_8_decode.json"
    store.write_golden(path, data)
    assert store.parse_golden_file(path) == data


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    types=st.lists(st.sampled_from(["float", "c10::BFloat16", "", "a:b:c", 'q"uo:te', "back\\:slash"]), max_size=3),
    env=st.dictionaries(st.sampled_from(["torch", "host:port", "flags", "ünï"]), st.text(':ab"\\é', max_size=4)),
    escape_colons=st.booleans(),
    spaced=st.booleans(),
    same_value=st.booleans(),
)
def test_a_key_written_twice_in_any_object_is_refused_naming_it(
    data: st.DataObject,
    types: list[str],
    env: dict,
    escape_colons: bool,
    spaced: bool,
    same_value: bool,
) -> None:
    tree = tree_of(golden_dict(tuple(types), env))
    path = Path("goldens/cuda/test_x.py/test_y/Fake_bs_8_decode.json")  # only named in messages
    clean = text_of(tree, escape_colons=escape_colons, spaced=spaced)
    assert golden_parse(clean, path) == strict(clean) == json.loads(clean)

    candidates = [pairs for pairs in objects(tree) if pairs]
    pairs = candidates[data.draw(st.integers(0, len(candidates) - 1), label="object")]
    key, value = pairs[data.draw(st.integers(0, len(pairs) - 1), label="key")]
    # Written again with the same value, the parsed dict is the one without the repeat: only the text tells.
    repeat = (key, value if same_value else ("val", "x:y"))
    pairs.insert(data.draw(st.integers(0, len(pairs)), label="where"), repeat)
    damaged = text_of(tree, escape_colons=escape_colons, spaced=spaced)
    said = golden_parse(damaged, path)
    assert said == strict(damaged)
    assert isinstance(said, str) and said.startswith(f"error: duplicate key {key!r}")


@pytest.mark.parametrize(
    "text",
    [
        '{"schema_version": 2, "schema_version": 2}',
        '{"a": {"b": 1, "b": 1}}',
        '{"ops": [{"name": "aten::mm", "count": 1, "count": 1}]}',
        '{"ops": [{"name": "aten::mm", "name": "aten::mm"}], "x": "::::"}',
        '{"kernels": [{"name": "k", "op": {"name": "a::b", "name": "a::b"}}]}',
        '{"environment": {"t": "1\\u003a2", "t": "1\\u003a2"}}',
        '{"a": 1, "a": NaN}',
        '{"a": 1, "a": 2',
    ],
)
def test_hand_edits_fail_with_the_strict_parsers_message(tmp_path: Path, text: str) -> None:
    path = tmp_path / "edited.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(GoldenError) as info:
        store.parse_golden_file(path)
    assert str(path) in str(info.value)
    assert f"error: {info.value.problem}" == strict(text)


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1e400, "b": -1e400}',  # out of the float range: the fast parser refuses, json reads ±inf
        '{"a": [1e-400, -0.0, 0.1, 1E5]}',
        '{"a": 123456789012345678901234567890, "b": -98765432109876543210}',
        '{"a": "caf\u00e9 \U0001f600", "b": null, "c": [true, false]}',
        '{"a": {"b": {"c": [[[]]]}}, "d": ""}',
    ],
)
def test_values_read_exactly_as_json_reads_them(tmp_path: Path, text: str) -> None:
    """The fast parse gives json's values, and hands what it will not read to the strict parse."""
    path = tmp_path / "edited.json"
    path.write_text(text, encoding="utf-8")
    parsed = store.parse_golden_file(path)
    assert parsed == json.loads(text)
    assert repr(parsed) == repr(json.loads(text))  # the same types too (int stays int, -0.0 stays -0.0)
