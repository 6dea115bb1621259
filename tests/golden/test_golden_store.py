"""Golden files on disk: layout, containment, byte-stable atomic writes, strict reading, schema versions."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_graphcapture import _io
from pytest_graphcapture.errors import GoldenError
from pytest_graphcapture.golden import store as golden
from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary.model import SCHEMA_VERSION, Summary, summary_from_dict


def make_summary(bs: int = 8, *, runner: str = "Fake", hidden: int = 256, variant=None, rank: int = 0) -> Summary:
    return Summary(
        key=CaptureKey(runner, bs, variant, rank),
        platform="cpu",
        kernels=[
            {"name": "elementwise_kernel", "kind": "kernel", "count": 3},
            {"name": "gemv_kernel", "kind": "kernel", "count": 1, "grid": [4, 1, 1], "block": [128, 1, 1]},
        ],
        ops=[
            {
                "name": "aten::mm",
                "input_dims": [[bs, hidden], [hidden, 256]],
                "input_types": ["float", "float"],
                "count": 2,
            }
        ],
        launches={"total": 4, "by_api": {"cudaLaunchKernel": 4}},
        environment={"torch": "2.4.0", "device": "FakeDevice"},
    )


# --------------------------------------------------------------------------- layout


def test_layout_plain_test(tmp_path: Path) -> None:
    path = golden.golden_path(tmp_path, "cuda-sm90", "tests/models/test_llama.py::test_decode", CaptureKey("Eager", 4))
    assert path == tmp_path / "cuda-sm90" / "tests" / "models" / "test_llama.py" / "test_decode" / "Eager_bs_4.json"


def test_layout_class_variant_and_rank_suffix_only_for_nonzero_rank(tmp_path: Path) -> None:
    nodeid = "tests/test_x.py::TestDecode::test_y"
    rank0 = golden.golden_path(tmp_path, "cpu", nodeid, CaptureKey("R", 2, "prefill", 0))
    rank1 = golden.golden_path(tmp_path, "cpu", nodeid, CaptureKey("R", 2, "prefill", 1))
    assert rank0.relative_to(tmp_path).as_posix() == "cpu/tests/test_x.py/TestDecode/test_y/R_bs_2_prefill.json"
    assert rank1.name == "R_bs_2_prefill_rank1.json"


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/test_x.py::test_y[a/b]",
        "tests/test_x.py::test_y[../../etc/passwd]",
        "tests/test_x.py::test_y[ü-日本]",
        "tests/test_x.py::test_y[a::b]",
        "../outside/test_x.py::test_y",
        "/abs/test_x.py::test_y",
    ],
)
def test_user_names_are_sanitized_and_stay_inside(tmp_path: Path, nodeid: str) -> None:
    path = golden.golden_path(tmp_path, "../plat", nodeid, CaptureKey("../run", 1, "v/../x"))
    rel = path.relative_to(tmp_path)
    assert all(part not in ("..", ".", "") and "/" not in part for part in rel.parts)
    assert tmp_path.resolve() in path.resolve().parents


def test_parametrize_ids_that_differ_get_distinct_folders(tmp_path: Path) -> None:
    a = golden.golden_folder(tmp_path, "cpu", "t.py::test_y[a/b]")
    b = golden.golden_folder(tmp_path, "cpu", "t.py::test_y[a_b]")
    assert a != b


@settings(max_examples=60, deadline=None)
@given(
    module=st.text(min_size=1, max_size=40),
    test=st.text(max_size=40),
    runner=st.text(min_size=1, max_size=20),
    platform=st.text(min_size=1, max_size=20),
)
def test_any_name_lands_inside_the_golden_dir(
    tmp_path_factory: pytest.TempPathFactory, module: str, test: str, runner: str, platform: str
) -> None:
    root = tmp_path_factory.getbasetemp() / "goldens"
    path = golden.golden_path(root, platform, f"{module}::{test}", CaptureKey(runner, 1))
    assert root.resolve() in path.resolve().parents


def test_symlink_out_of_the_golden_dir_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "goldens"
    (root / "cpu").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "cpu" / "tests").symlink_to(outside, target_is_directory=True)
    with pytest.raises(GoldenError, match="outside the golden dir"):
        golden.golden_path(root, "cpu", "tests/test_x.py::test_y", CaptureKey("R", 1))


# --------------------------------------------------------------------------- writing


def test_file_format_one_entry_per_line_trailing_newline(tmp_path: Path) -> None:
    path = tmp_path / "g" / "Fake_bs_8.json"
    assert golden.write_golden(path, make_summary().to_dict()) == "created"
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and not text.endswith("\n\n")
    data = json.loads(text)
    assert data == make_summary().to_dict()
    assert data["schema_version"] == SCHEMA_VERSION
    lines = text.splitlines()
    # Each kernel and op entry is exactly one line, named first.
    assert '    {"name": "gemv_kernel", "block": [128, 1, 1], "count": 1, "grid": [4, 1, 1], "kind": "kernel"}' in lines
    assert sum(1 for line in lines if line.lstrip().startswith('{"name": "aten::mm"')) == 1
    assert '      "cudaLaunchKernel": 4' in lines
    assert text.splitlines()[1].startswith('  "')


def test_rewrite_is_byte_identical_and_reports_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "Fake_bs_8.json"
    golden.write_golden(path, make_summary().to_dict())
    before = path.read_bytes()
    mtime = path.stat().st_mtime_ns
    # Same content built in a different list order must serialize identically.
    shuffled = make_summary()
    shuffled.kernels.reverse()
    assert golden.write_golden(path, summary_from_dict(shuffled.to_dict()).to_dict()) == "unchanged"
    assert path.read_bytes() == before and path.stat().st_mtime_ns == mtime
    assert golden.write_golden(path, make_summary(hidden=512).to_dict()) == "updated"
    assert path.read_bytes() != before


def test_written_file_is_readable_by_others(tmp_path: Path) -> None:
    path = tmp_path / "Fake_bs_8.json"
    golden.write_golden(path, make_summary().to_dict())
    assert path.stat().st_mode & 0o644 == 0o644


@pytest.mark.parametrize("failing", ["write", "fsync", "replace"])
def test_failed_write_keeps_previous_golden_and_removes_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    path = tmp_path / "Fake_bs_8.json"
    golden.write_golden(path, make_summary().to_dict())
    before = path.read_bytes()

    def disk_full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    if failing == "write":
        real_fdopen = os.fdopen

        class FullFile:
            def __init__(self, handle: object) -> None:
                self._handle = handle

            def __enter__(self) -> "FullFile":
                return self

            def __exit__(self, *exc: object) -> None:
                self._handle.close()  # type: ignore[attr-defined]

            write = staticmethod(disk_full)

        monkeypatch.setattr(_io.os, "fdopen", lambda fd, mode: FullFile(real_fdopen(fd, mode)))
    else:
        monkeypatch.setattr(_io.os, failing, disk_full)
    with pytest.raises(GoldenError, match="No space left on device") as info:
        golden.write_golden(path, make_summary(hidden=512).to_dict())
    monkeypatch.undo()
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Fake_bs_8.json"]


def test_nan_cannot_be_written(tmp_path: Path) -> None:
    data = make_summary().to_dict()
    data["environment"]["x"] = float("nan")
    with pytest.raises(GoldenError, match="JSON"):
        golden.write_golden(tmp_path / "x.json", data)


# --------------------------------------------------------------------------- reading


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "Fake_bs_8.json"
    summary = make_summary(variant="decode", rank=2)
    golden.write_golden(path, summary.to_dict())
    assert golden.read_golden(path) == summary
    assert golden.read_golden(path).environment == summary.environment


def _write_raw(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_duplicate_keys_are_an_error_naming_file_and_key(tmp_path: Path) -> None:
    path = _write_raw(tmp_path, '{"schema_version": 1, "platform": "cpu", "platform": "cuda"}')
    with pytest.raises(GoldenError, match="duplicate key 'platform'") as info:
        golden.read_golden(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    "text, problem",
    [
        ("[1, 2]", "top level"),
        ("{", "truncated JSON"),
        ('{"schema_version": NaN}', "NaN/Infinity are not allowed"),
        ('{"kernels": []}', "no schema_version"),
        ('{"schema_version": "1"}', "schema_version must be an integer"),
        ('{"schema_version": true}', "schema_version must be an integer"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, problem: str) -> None:
    path = _write_raw(tmp_path, text)
    with pytest.raises(GoldenError, match=problem) as info:
        golden.read_golden(path)
    assert info.value.path == str(path)


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"schema_version": 1, "x": "\xff"}')
    with pytest.raises(GoldenError, match="UTF-8"):
        golden.read_golden(path)


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda d: d.update(kernels={"a": 1}), "kernels must be a list"),
        (lambda d: d["kernels"][0].update(count="3"), r"kernels\[0\].count must be an integer"),
        (lambda d: d["ops"][0].update(name=7), r"ops\[0\].name must be a string"),
        (lambda d: d["launches"].update(total=None), "launches.total"),
        (lambda d: d.update(platform=""), "platform"),
        (lambda d: d.update(level="bogus"), "level"),
    ],
)
def test_wrong_types_are_golden_errors_naming_the_file(tmp_path: Path, mutate, problem: str) -> None:
    data = make_summary().to_dict()
    mutate(data)
    path = _write_raw(tmp_path, json.dumps(data))
    with pytest.raises(GoldenError, match=problem) as info:
        golden.read_golden(path)
    assert str(path) in str(info.value)


def test_newer_schema_says_upgrade(tmp_path: Path) -> None:
    data = make_summary().to_dict()
    data["schema_version"] = SCHEMA_VERSION + 1
    path = _write_raw(tmp_path, json.dumps(data))
    with pytest.raises(GoldenError, match="upgrade the plugin"):
        golden.read_golden(path)


def test_older_schema_is_migrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = make_summary().to_dict()
    old["schema_version"] = SCHEMA_VERSION - 1
    # A hypothetical older layout: completeness as a bare bool, launches as a plain total.
    old["complete"] = True
    old["launches"] = {"total": 4}

    def step(data: dict) -> dict:
        data["complete"] = {"value": data["complete"], "reason": None}
        data["launches"] = {"total": data["launches"]["total"], "by_api": {"cudaLaunchKernel": 4}}
        return data

    monkeypatch.setitem(golden.MIGRATIONS, SCHEMA_VERSION - 1, step)
    path = _write_raw(tmp_path, json.dumps(old))
    assert golden.read_golden(path) == make_summary()


def test_older_schema_without_migration_is_an_error(tmp_path: Path) -> None:
    data = make_summary().to_dict()
    data["schema_version"] = 0  # before the first released schema: no migration leads from it
    path = _write_raw(tmp_path, json.dumps(data))
    with pytest.raises(GoldenError, match="too old"):
        golden.read_golden(path)


def test_same_content_ignores_environment_only() -> None:
    a = make_summary().to_dict()
    b = make_summary().to_dict()
    b["environment"] = {"torch": "9.9"}
    assert golden.same_content(a, b)
    assert not golden.same_content(a, make_summary(hidden=512).to_dict())


# --------------------------------------------------------------------------- listing / deleting


def test_golden_files_lists_only_this_folder(tmp_path: Path) -> None:
    folder = tmp_path / "cpu" / "t.py" / "test_a"
    golden.write_golden(folder / "Fake_bs_1.json", make_summary(1).to_dict())
    (folder / ".Fake_bs_2.json.abc.tmp").write_text("partial")
    (folder / "notes.txt").write_text("x")
    golden.write_golden(folder / "TestNested" / "Fake_bs_1.json", make_summary(1).to_dict())
    assert [p.name for p in golden.golden_files(folder)] == ["Fake_bs_1.json"]
    assert golden.golden_files(tmp_path / "missing") == []


def test_remove_golden_prunes_empty_folders_up_to_root(tmp_path: Path) -> None:
    root = tmp_path / "goldens"
    path = root / "cpu" / "t.py" / "test_a" / "Fake_bs_1.json"
    keep = root / "cpu" / "other.json"
    golden.write_golden(path, make_summary(1).to_dict())
    golden.write_golden(keep, make_summary(1).to_dict())
    golden.remove_golden(path, root)
    assert not (root / "cpu" / "t.py").exists()
    assert keep.exists() and root.exists()
    with pytest.raises(GoldenError, match="outside"):
        golden.remove_golden(tmp_path / "x.json", root)
