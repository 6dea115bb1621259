"""The human-readable diff between a golden and a captured summary."""

from __future__ import annotations

import random

import pytest

from pytest_graphcapture.errors import GoldenError, UsageError
from pytest_graphcapture.golden import diff as golden
from pytest_graphcapture.golden.change import MAX_LINE_WIDTH, cut_lines
from pytest_graphcapture.keys import CaptureKey, key_label
from pytest_graphcapture.summary.model import Summary


def make(
    bs: int = 8,
    *,
    hidden: int = 256,
    kernels=None,
    ops=None,
    launches=None,
    complete: bool = True,
    reason=None,
    environment=None,
    level: str = "name",
) -> Summary:
    if kernels is None:
        kernels = [
            {"name": "elementwise_kernel", "kind": "kernel", "count": 3},
            {"name": "gemv_kernel", "kind": "kernel", "count": 1},
        ]
    if ops is None:
        ops = [
            {
                "name": "aten::mm",
                "input_dims": [[bs, hidden], [hidden, 256]],
                "input_types": ["float", "float"],
                "count": 1,
            },
            {"name": "aten::add", "input_dims": [[bs, 256], [bs, 256]], "input_types": ["float", "float"], "count": 2},
        ]
    if launches is None:
        launches = {"total": 4, "by_api": {"cudaLaunchKernel": 4}}
    return Summary(
        key=CaptureKey("Fake", bs),
        platform="cpu",
        kernels=kernels,
        ops=ops,
        launches=launches,
        complete=complete,
        incomplete_reason=reason,
        environment=environment if environment is not None else {"torch": "2.4.0"},
        level=level,
    )


def lines_of(diff: golden.KeyDiff) -> list[str]:
    return [line.strip() for line in diff.render(None)]


def test_identical_summaries_have_no_diff() -> None:
    diff = golden.compare(make(), make())
    assert diff.ok and diff.changes == [] and diff.notes == []


def test_list_order_does_not_matter() -> None:
    a = make().to_dict()
    b = make().to_dict()
    random.Random(1).shuffle(b["kernels"])
    b["ops"].reverse()
    assert golden.diff_dicts(a, b) == []


def test_kernel_added_removed_and_count_changed() -> None:
    actual = make(
        kernels=[
            {"name": "elementwise_kernel", "kind": "kernel", "count": 5},
            {"name": "triton_poi_fused_add_0", "kind": "kernel", "count": 1},
        ]
    )
    diff = golden.compare(make(), actual)
    lines = lines_of(diff)
    assert "~ elementwise_kernel count 3 → 5" in lines
    assert "- gemv_kernel ×1" in lines
    assert "+ triton_poi_fused_add ×1" in lines  # compared at level "name": the numeric suffix is dropped
    assert "kernels: 1 added, 1 removed, 1 changed" in lines


def test_kernel_launch_config_and_kind_are_part_of_the_item() -> None:
    exp = make(kernels=[{"name": "k", "kind": "kernel", "count": 1, "grid": [4, 1, 1], "block": [128, 1, 1]}])
    act = make(
        kernels=[
            {"name": "k", "kind": "kernel", "count": 1, "grid": [8, 1, 1], "block": [128, 1, 1]},
            {"name": "Memcpy DtoD", "kind": "memcpy", "count": 1},
        ]
    )
    lines = lines_of(golden.compare(exp, act))
    assert "- k grid=[4,1,1] block=[128,1,1] ×1" in lines
    assert "+ k grid=[8,1,1] block=[128,1,1] ×1" in lines
    assert "+ Memcpy DtoD (memcpy) ×1" in lines


def test_op_shape_change_is_shown_old_to_new() -> None:
    lines = lines_of(golden.compare(make(hidden=256), make(hidden=512)))
    assert "~ aten::mm [[8,256],[256,256]] → [[8,512],[512,256]]" in lines
    assert not any("aten::add" in line for line in lines)


def test_op_added_removed_count_and_dtype_changes() -> None:
    exp = make()
    ops = [dict(o) for o in exp.ops]
    ops = [o for o in ops if o["name"] != "aten::mm"]
    ops[0]["count"] = 4  # aten::add ×2 → ×4
    ops.append({"name": "aten::relu", "input_dims": [[8, 256]], "input_types": ["float"], "count": 1})
    ops.append({"name": "aten::mul", "input_dims": [[8]], "input_types": ["c10::Half"], "count": 1})
    exp_ops = [dict(o) for o in exp.ops] + [
        {"name": "aten::mul", "input_dims": [[8]], "input_types": ["float"], "count": 1}
    ]
    lines = lines_of(golden.compare(make(ops=exp_ops), make(ops=ops)))
    assert "- aten::mm [[8,256],[256,256]] ×1" in lines
    assert "+ aten::relu [[8,256]] ×1" in lines
    assert "~ aten::add [[8,256],[8,256]] count 2 → 4" in lines
    assert "~ aten::mul [[8]] (float) → [[8]] (c10::Half)" in lines


def test_op_with_several_shapes_lists_the_changed_set() -> None:
    exp = make(
        ops=[
            {"name": "aten::mm", "input_dims": [[8, 16]], "input_types": [], "count": 1},
            {"name": "aten::mm", "input_dims": [[8, 32]], "input_types": [], "count": 1},
        ]
    )
    act = make(
        ops=[
            {"name": "aten::mm", "input_dims": [[8, 16]], "input_types": [], "count": 1},
            {"name": "aten::mm", "input_dims": [[8, 64]], "input_types": [], "count": 1},
            {"name": "aten::mm", "input_dims": [[8, 128]], "input_types": [], "count": 1},
        ]
    )
    lines = lines_of(golden.compare(exp, act))
    assert "~ aten::mm [[8,32]] → [[8,128]], [[8,64]] (count 1 → 2)" in lines


def test_launch_total_and_per_api_changes() -> None:
    act = make(launches={"total": 6, "by_api": {"cudaLaunchKernel": 5, "cudaMemcpyAsync": 1}})
    lines = lines_of(golden.compare(make(), act))
    assert "~ total launches 4 → 6" in lines
    assert "~ cudaLaunchKernel 4 → 5" in lines
    assert "+ cudaMemcpyAsync 1 (was 0)" in lines
    gone = make(launches={"total": 4, "by_api": {}})
    assert "- cudaLaunchKernel 4 (now 0)" in lines_of(golden.compare(make(), gone))


def test_incomplete_actual_skips_kernels_but_compares_ops() -> None:
    act = make(kernels=[], complete=False, reason="profiler dropped 3 records")
    diff = golden.compare(make(), act)
    assert diff.ok
    assert diff.incomplete == "profiler dropped 3 records"
    assert "incomplete: profiler dropped 3 records (kernels not compared)" in diff.notes[0]
    act_ops = make(hidden=512, kernels=[], complete=False, reason="dropped")
    diff = golden.compare(make(), act_ops)
    assert not diff.ok and {c.section for c in diff.changes} == {"ops"}


def test_incomplete_golden_skips_kernels_with_a_note() -> None:
    diff = golden.compare(make(kernels=[], complete=False, reason="old driver"), make())
    assert diff.ok and "golden was written from an incomplete capture (old driver)" in diff.notes[0]


def test_environment_note_only_next_to_a_diff() -> None:
    env_only = golden.compare(
        make(environment={"torch": "2.4.0", "device": "H100"}), make(environment={"torch": "2.5.1", "device": "H200"})
    )
    assert env_only.ok and env_only.notes == []
    diff = golden.compare(
        make(environment={"torch": "2.4.0", "cuda": {"runtime": "12.1"}}),
        make(hidden=512, environment={"torch": "2.5.1", "cuda": {"runtime": "12.4"}}),
    )
    note = [n for n in diff.notes if n.startswith("environment differs")]
    assert note and "torch 2.4.0 → 2.5.1" in note[0] and "cuda.runtime 12.1 → 12.4" in note[0]


def test_levels_merge_names_and_finer_level_than_golden_is_an_error() -> None:
    exp = make(
        kernels=[
            {"name": "void at::native::vectorized_elementwise_kernel<4, float>(int)", "kind": "kernel", "count": 1}
        ],
        level="exact",
    )
    act = make(
        kernels=[
            {"name": "void at::native::vectorized_elementwise_kernel<4, c10::Half>(int)", "kind": "kernel", "count": 1}
        ],
        level="exact",
    )
    assert not golden.compare(exp, act, level="exact").ok
    assert not golden.compare(exp, act, level="name").ok
    assert golden.compare(exp, act, level="family").ok
    with pytest.raises(GoldenError, match="finer level 'exact'"):
        golden.compare(make(level="family"), make(level="exact"), level="exact", golden="g.json")


def test_ignore_patterns_drop_items_on_both_sides() -> None:
    act = make(
        kernels=[
            {"name": "elementwise_kernel", "kind": "kernel", "count": 3},
            {"name": "gemv_kernel", "kind": "kernel", "count": 1},
            {"name": "nccl_log_kernel", "kind": "kernel", "count": 2},
        ],
        hidden=512,
    )
    assert not golden.compare(make(), act).ok
    assert golden.compare(make(), act, ignore_kernels=[r"^nccl_"], ignore_ops=[r"aten::mm"]).ok


def test_sections_select_what_is_compared() -> None:
    act = make(hidden=512, launches={"total": 9, "by_api": {"cudaLaunchKernel": 9}})
    assert {c.section for c in golden.compare(make(), act).changes} == {"ops", "launches"}
    assert golden.compare(make(), act, sections=("kernels",)).ok
    assert {c.section for c in golden.compare(make(), act, sections=["launches"]).changes} == {"launches"}
    with pytest.raises(UsageError, match="sections"):
        golden.compare(make(), act, sections=("kernel",))
    with pytest.raises(UsageError, match="sections"):
        golden.compare(make(), act, sections=())


def test_render_names_the_batch_size_and_golden() -> None:
    diff = golden.compare(make(4), make(4, hidden=512), golden="goldens/cpu/t.py/test_a/Fake_bs_4.json")
    assert diff.render()[0] == "bs=4 (goldens/cpu/t.py/test_a/Fake_bs_4.json):"
    assert key_label(CaptureKey("R", 2, "prefill", 1)) == "bs=2 variant=prefill rank=1"


def test_long_kernel_names_are_shortened_in_messages_only() -> None:
    name = "void cutlass::Kernel<" + "x" * 300 + ">(Params)"
    diff = golden.compare(
        make(kernels=[], level="exact"),
        make(kernels=[{"name": name, "kind": "kernel", "count": 1}], level="exact"),
        level="exact",
    )
    short = [line for line in diff.render() if "cutlass" in line][0]
    assert "…" in short and len(short) < 160 and short.rstrip().endswith("(Params) ×1")
    assert any(name in line for line in diff.render(None))


def test_cut_lines_points_to_the_full_diff() -> None:
    lines = [f"line {i}" for i in range(100)]
    cut = cut_lines(lines, "/tmp/full.txt", max_lines=60)
    assert len(cut) == 60 and cut[:59] == lines[:59]
    assert cut[-1] == "… 41 more lines; full diff in /tmp/full.txt"
    assert cut_lines(lines[:60], "/tmp/full.txt", max_lines=60) == lines[:60]


def test_to_dict_is_json_ready() -> None:
    import json

    data = golden.compare(make(), make(hidden=512)).to_dict()
    assert json.loads(json.dumps(data))["changes"][0]["section"] == "ops"


def test_no_failure_line_runs_long_and_the_full_text_keeps_everything() -> None:
    """Many shapes of one op and two long kernel names: each short line fits, the full one lists all."""
    long_a = "void cutlass::Kernel<" + "a" * 200 + ">(Params)"
    long_b = "void cutlass::Kernel<" + "b" * 200 + ">(Params)"
    ops_old = [
        {"name": "aten::mm", "input_dims": [[8, i], [i, 256]], "input_types": ["float"] * 2, "count": 1}
        for i in range(1, 30)
    ]
    ops_new = [
        {"name": "aten::mm", "input_dims": [[8, i], [i, 512]], "input_types": ["float"] * 2, "count": 1}
        for i in range(1, 30)
    ]
    diff = golden.compare(
        make(kernels=[{"name": long_a, "kind": "kernel", "count": 1}], ops=ops_old, level="exact"),
        make(kernels=[{"name": long_b, "kind": "kernel", "count": 1}], ops=ops_new, level="exact"),
        level="exact",
    )
    short = [c.render() for c in diff.changes]
    assert short and max(len(line) for line in short) <= MAX_LINE_WIDTH
    mm = next(line for line in short if line.startswith("~ aten::mm"))
    was, now = mm.split(" → ")
    assert "256]]" in was and "512]]" in now and was.endswith("… +27 more") and now.endswith("… +27 more")
    full = next(c.render(None) for c in diff.changes if c.subject == "aten::mm")
    assert all(f"[[8,{i}],[{i},512]]" in full for i in range(1, 30))  # the diff file's line lists every shape


def test_one_key_folds_view_op_lines_only_when_something_else_changed() -> None:
    def ops(hidden: int) -> list:
        return [
            {"name": "aten::mm", "input_dims": [[8, hidden], [hidden, 256]], "input_types": ["float"] * 2, "count": 1},
            {"name": "aten::t", "input_dims": [[256, hidden]], "input_types": ["float"], "count": 1},
        ]

    diff = golden.compare(make(ops=ops(64)), make(ops=ops(96)))
    brief = diff.render(brief=True, full_diff="diff.txt")
    assert [line.strip().split(" ", 2)[1] for line in brief if line.startswith("    ~")] == ["aten::mm"]
    assert "    + 1 view/metadata op line (t); full diff in diff.txt" in brief
    assert any("aten::t" in line for line in diff.render())  # the full record keeps it
    only_views = golden.compare(make(ops=ops(64)[1:]), make(ops=ops(96)[1:]))
    assert any("~ aten::t" in line for line in only_views.render(brief=True))  # nothing else changed: shown
