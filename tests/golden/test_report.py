"""The session report: counting, merging xdist workers' reports, terminal/Markdown/JSON rendering."""

from __future__ import annotations

import json

import pytest

from pytest_graphcapture.golden.report import COUNT_NAMES, FileRecord, KeyRecord, SessionReport


def worker(records: list[tuple[str, str, str, str]], *, incomplete: str | None = None) -> SessionReport:
    report = SessionReport(golden_dir="goldens")
    for nodeid, platform, bs, outcome in records:
        golden = f"{platform}/t.py/{nodeid.split('::')[-1]}/Fake_bs_{bs}.json"
        report.add_record(
            KeyRecord(nodeid, platform, f"bs={bs}", golden, outcome, incomplete if outcome == "passed" else None)
        )
        report.add_folder(platform, golden.rsplit("/", 1)[0], nodeid)
    return report


def test_counts_per_platform() -> None:
    report = worker(
        [
            ("t.py::a", "cpu", "1", "passed"),
            ("t.py::a", "cpu", "2", "failed"),
            ("t.py::b", "cpu", "1", "created"),
            ("t.py::b", "cuda-sm90", "1", "updated"),
        ],
        incomplete="dropped records",
    )
    report.unused.append(FileRecord("cpu", "cpu/t.py/a/Fake_bs_4.json"))
    report.deleted.append(FileRecord("cuda-sm90", "cuda-sm90/t.py/b/Fake_bs_8.json"))
    counts = report.counts()
    assert counts["cpu"] == {
        "checked": 3,
        "passed": 1,
        "failed": 1,
        "created": 1,
        "updated": 0,
        "deleted": 0,
        "unused": 1,
        "incomplete": 1,
    }
    assert counts["cuda-sm90"] == {
        "checked": 1,
        "passed": 0,
        "failed": 0,
        "created": 0,
        "updated": 1,
        "deleted": 1,
        "unused": 0,
        "incomplete": 0,
    }
    assert list(counts["cpu"]) == list(COUNT_NAMES)
    assert report.totals()["checked"] == 4


def test_unknown_outcome_is_rejected() -> None:
    with pytest.raises(ValueError, match="outcome"):
        KeyRecord("t.py::a", "cpu", "bs=1", "cpu/x.json", "skipped")


def test_dict_round_trip_and_merge_equal_single_process_report() -> None:
    rows = [(f"t.py::test_{i}", "cpu", str(bs), "created" if i % 2 else "passed") for i in range(8) for bs in (1, 2)]
    single = worker(rows)
    workers = [worker(rows[i::4]) for i in range(4)]
    merged = SessionReport(golden_dir="goldens")
    for w in workers:
        merged.merge(json.loads(json.dumps(w.to_dict())))  # what crosses the xdist channel
    assert merged.counts() == single.counts()
    assert merged.to_dict() == single.to_dict()
    assert SessionReport.from_dict(single.to_dict()).to_dict() == single.to_dict()


def test_from_dict_rejects_foreign_data() -> None:
    with pytest.raises(ValueError, match="not a graph capture session report"):
        SessionReport.from_dict({"records": []})


def test_terminal_lines_list_failures_incomplete_and_unused() -> None:
    report = worker(
        [("t.py::a", "cpu", "1", "passed"), ("t.py::a", "cpu", "2", "failed"), ("t.py::a", "cpu", "4", "failed")],
        incomplete="no kernels recorded",
    )
    report.unused.append(FileRecord("cpu", "cpu/t.py/a/Fake_bs_8.json"))
    lines = report.terminal_lines()
    assert lines[0] == ("cpu: 3 checked, 1 passed, 2 failed, 0 created, 0 updated, 0 deleted, 1 unused, 1 incomplete")
    assert "failed: t.py::a (bs=2, bs=4)" in lines
    assert "incomplete: t.py::a bs=1: no kernels recorded" in lines
    assert "unused: goldens/cpu/t.py/a/Fake_bs_8.json (remove with --update-golden)" in lines


def test_verbose_terminal_lines_name_written_files() -> None:
    report = worker([("t.py::a", "cpu", "1", "created"), ("t.py::a", "cpu", "2", "updated")])
    assert not any(line.startswith("created:") for line in report.terminal_lines())
    verbose = report.terminal_lines(verbose=True)
    assert "created: goldens/cpu/t.py/a/Fake_bs_1.json" in verbose
    assert "updated: goldens/cpu/t.py/a/Fake_bs_2.json" in verbose


def test_markdown_has_table_diffs_and_files() -> None:
    report = worker([("t.py::a", "cpu", "1", "passed"), ("t.py::a", "cpu", "2", "failed")])
    report.add_failure("t.py::a", "cpu", "graph capture of Fake does not match\n  ~ elementwise_kernel ×3 → ×5\n")
    report.add_failure("t.py::b<x>", "cpu", "has ``` fences")
    report.deleted.append(FileRecord("cpu", "cpu/t.py/a/Fake_bs_8.json"))
    text = report.markdown()
    assert "| platform | checked | passed | failed | created | updated | deleted | unused | incomplete |" in text
    assert "| `cpu` | 2 | 1 | 1 | 0 | 0 | 1 | 0 | 0 |" in text
    assert "~ elementwise_kernel ×3 → ×5" in text
    assert "<code>t.py::b&lt;x&gt;</code>" in text and "````text" in text
    assert "- `goldens/cpu/t.py/a/Fake_bs_8.json`" in text


def test_markdown_of_an_empty_session() -> None:
    assert "No golden checks ran." in SessionReport().markdown()


def test_json_has_counts_totals_and_records() -> None:
    report = worker([("t.py::a", "cpu", "1", "created"), ("t.py::b", "cpu", "1", "failed")])
    data = json.loads(report.to_json())
    assert data["counts"]["cpu"]["created"] == 1 and data["totals"]["failed"] == 1
    assert [r["nodeid"] for r in data["records"]] == ["t.py::a", "t.py::b"]
    assert data["used"] == [
        {"platform": "cpu", "path": "cpu/t.py/a/Fake_bs_1.json"},
        {"platform": "cpu", "path": "cpu/t.py/b/Fake_bs_1.json"},
    ]
