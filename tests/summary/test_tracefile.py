"""Loading Chrome/Kineto traces: every malformed input is one clear TraceFormatError."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from pytest_graphcapture.errors import TraceFormatError, UsageError
from pytest_graphcapture.naming import trace_stem
from pytest_graphcapture.summary.tracefile import (
    DEFAULT_MAX_TRACE_BYTES,
    MAX_TRACE_BYTES_ENV,
    load_trace,
    parse_size,
    resolve_max_bytes,
)

GOOD = {"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 1, "dur": 2}]}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _problem(path: Path, **kwargs) -> str:
    with pytest.raises(TraceFormatError) as info:
        load_trace(path, **kwargs)
    assert info.value.path == str(path)
    assert str(info.value).startswith(str(path) + ": ")
    return info.value.problem


def test_loads_plain_and_gzip(tmp_path: Path) -> None:
    text = json.dumps(GOOD).encode()
    assert load_trace(_write(tmp_path / "a.json", text)) == GOOD
    assert load_trace(_write(tmp_path / "a.json.gz", gzip.compress(text))) == GOOD
    # gzip is recognised by content, not by the name
    assert load_trace(_write(tmp_path / "misnamed.json", gzip.compress(text))) == GOOD


def test_multi_member_gzip_and_bom(tmp_path: Path) -> None:
    text = json.dumps(GOOD).encode()
    half = len(text) // 2
    assert load_trace(_write(tmp_path / "m.json.gz", gzip.compress(text[:half]) + gzip.compress(text[half:]))) == GOOD
    assert load_trace(_write(tmp_path / "bom.json", b"\xef\xbb\xbf" + text)) == GOOD


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"", "file is empty"),
        (b"   \n", "file is empty"),
        (b"\x00\x01binary", "not a gzip or JSON file"),
        (b"hello world", "not a gzip or JSON file"),
        (b'{"traceEvents": [{"name": "a"}', "truncated JSON"),
        (b'{"traceEvents": [}', "invalid JSON"),
        (b"[1, 2]", "top level is a JSON list"),
        (b'{"schemaVersion": 1}', "no traceEvents"),
        (b'{"traceEvents": {"a": 1}}', "traceEvents is a JSON dict"),
        (b'{"traceEvents": [{"name": "a"}, 3]}', "traceEvents[1] is a JSON int"),
        (b'{"traceEvents": [{"ts": NaN}]}', "NaN/Infinity"),
        (b'{"traceEvents": [{"ts": -Infinity}]}', "NaN/Infinity"),
        (b'{"traceEvents": [{"name": "caf\xe9"}]}', "not UTF-8"),
    ],
)
def test_malformed_content(tmp_path: Path, content: bytes, expected: str) -> None:
    assert expected in _problem(_write(tmp_path / "t.json", content))


def test_malformed_gzip(tmp_path: Path) -> None:
    assert "corrupt gzip" in _problem(_write(tmp_path / "c.json.gz", b"\x1f\x8b" + b"garbage" * 10))
    full = gzip.compress(json.dumps(GOOD).encode() * 1)
    assert "truncated gzip" in _problem(_write(tmp_path / "t.json.gz", full[: len(full) // 2]))
    assert "empty" in _problem(_write(tmp_path / "e.json.gz", gzip.compress(b"")))
    assert "truncated JSON" in _problem(_write(tmp_path / "j.json.gz", gzip.compress(b'{"traceEvents": [')))


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert "cannot read file" in _problem(tmp_path / "nope.json")
    assert "directory" in _problem(tmp_path)


def test_size_cap_argument_and_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = json.dumps(GOOD).encode()
    plain = _write(tmp_path / "p.json", text)
    packed = _write(tmp_path / "p.json.gz", gzip.compress(text))
    for path in (plain, packed):
        problem = _problem(path, max_bytes=len(text) - 1)
        assert MAX_TRACE_BYTES_ENV in problem and "max_bytes" in problem
        assert load_trace(path, max_bytes=len(text)) == GOOD
    monkeypatch.setenv(MAX_TRACE_BYTES_ENV, str(len(text) - 1))
    assert MAX_TRACE_BYTES_ENV in _problem(packed)
    monkeypatch.setenv(MAX_TRACE_BYTES_ENV, "1M")
    assert load_trace(packed) == GOOD
    monkeypatch.setenv(MAX_TRACE_BYTES_ENV, "lots")
    with pytest.raises(UsageError, match=MAX_TRACE_BYTES_ENV):
        load_trace(packed)


def test_size_parsing() -> None:
    assert parse_size("2048") == 2048
    assert parse_size("4K") == 4096
    assert parse_size("512m") == 512 * 1024**2
    assert parse_size("2GiB") == 2 * 1024**3
    for bad in ("", "-1", "0", "1.5G", "big"):
        with pytest.raises(ValueError):
            parse_size(bad)
    assert resolve_max_bytes() == DEFAULT_MAX_TRACE_BYTES
    with pytest.raises(UsageError):
        resolve_max_bytes(0)


def test_trace_stem() -> None:
    assert trace_stem("/x/run_bs_8_rank0.json.gz") == "run_bs_8_rank0"
    assert trace_stem("a.json") == "a"
