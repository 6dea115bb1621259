"""The plugin as users run it: options, precedence, the gpu marker, progress lines, files."""

from __future__ import annotations

import pytest

from pytest_graphcapture.naming import trace_dir, trace_group_for

SHOW_SETTINGS = """
from pytest_graphcapture.plugin import graph_capture_config

def test_show(request):
    state = graph_capture_config(request.config)
    print("OUT_DIR=" + str(state.out_dir))
    print("TRACE=" + state.trace)
    print("SIZES=" + repr(state.batch_sizes))
"""

CAPTURE_DECODE = """
def test_capture(graph_capture):
    result = graph_capture()
    print("KEYS=" + ",".join(str(k.batch_size) for k in result.keys))
    print("TRACES=" + ",".join(p.name for p in result.trace_paths))
"""


def test_command_line_beats_environment_beats_ini(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\ngraph_capture_dir = from_ini\ngraph_capture_batch_sizes = 1,2\n")
    pytester.makepyfile(SHOW_SETTINGS)
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines([f"*OUT_DIR={pytester.path / 'from_ini'}", "SIZES=[1, 2]"])
    monkeypatch.setenv("GRAPH_CAPTURE_DIR", str(pytester.path / "from_env"))
    monkeypatch.setenv("GRAPH_CAPTURE_BATCH_SIZES", "4")
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines([f"*OUT_DIR={pytester.path / 'from_env'}", "SIZES=[4]"])
    result = pytester.runpytest(
        "-s", f"--graph-capture-dir={pytester.path / 'from_cli'}", "--graph-capture-batch-sizes=8,2"
    )
    result.stdout.fnmatch_lines([f"*OUT_DIR={pytester.path / 'from_cli'}", "SIZES=[2, 8]"])


def test_command_line_beats_environment_and_ini_for_the_trace_mode(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documented precedence holds for the trace mode too: command line > environment > ini."""
    pytester.makepyfile(SHOW_SETTINGS)
    pytester.makeini("[pytest]\ngraph_capture_trace = single\n")
    result = pytester.runpytest("-s", "--graph-capture-trace=per-bs")
    result.stdout.fnmatch_lines(["*TRACE=per-bs"])
    result.assert_outcomes(passed=1)
    monkeypatch.setenv("GRAPH_CAPTURE_TRACE", "single")
    result = pytester.runpytest("-s", "--graph-capture-trace")
    result.stdout.fnmatch_lines(["*TRACE=per-bs"])
    result = pytester.runpytest("-s")
    result.stdout.fnmatch_lines(["*TRACE=single"])  # the environment beats the ini key
    result.assert_outcomes(passed=1)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--graph-capture-device=tpu"], "*--graph-capture-device: 'tpu' is not one of auto, cpu, cuda*"),
        (["--graph-capture-batch-sizes=1,x"], "*--graph-capture-batch-sizes: 'x' is not an integer batch size*"),
        (
            ["--graph-capture-trace=everything"],
            "*--graph-capture-trace: 'everything' is not one of per-bs, single, off*",
        ),
        (["--graph-capture-profiler-flags=stack,colour"], "*unknown profiler flag(s) colour*"),
    ],
)
def test_bad_option_values_are_usage_errors_naming_the_option(
    pytester: pytest.Pytester, args: list, message: str
) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_bad_environment_value_names_the_variable(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(SHOW_SETTINGS)
    monkeypatch.setenv("GRAPH_CAPTURE_BATCH_SIZES", "0")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*environment variable GRAPH_CAPTURE_BATCH_SIZES: batch size 0 must be at least 1*"])


def test_gpu_marker_skips_with_an_actionable_reason_on_cpu(pytester: pytest.Pytester) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU, so the gpu marker does not skip here")
    pytester.makepyfile("""
        import pytest

        @pytest.mark.gpu
        def test_needs_gpu():
            raise AssertionError("must not run without a GPU")
    """)
    result = pytester.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA or ROCm GPU: torch.cuda.is_available() is False*"])


def test_trace_option_writes_one_file_per_batch_size(pytester: pytest.Pytester) -> None:
    module = pytester.makepyfile(CAPTURE_DECODE)
    result = pytester.runpytest(
        "-s", "--graph-capture-trace", "--graph-capture-dir=out", "--graph-capture-batch-sizes=1,2,4", "-W", "error"
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*KEYS=4,2,1",
            "TRACES=TinyDecodeRunner_bs_4_rank0.json.gz,"
            "TinyDecodeRunner_bs_2_rank0.json.gz,TinyDecodeRunner_bs_1_rank0.json.gz",
        ]
    )
    written = sorted(
        p.name for p in trace_dir(pytester.path / "out", trace_group_for(f"{module.name}::test_capture")).iterdir()
    )
    assert written == [
        "TinyDecodeRunner_bs_1_rank0.json.gz",
        "TinyDecodeRunner_bs_2_rank0.json.gz",
        "TinyDecodeRunner_bs_4_rank0.json.gz",
    ]


def test_without_the_trace_option_no_directory_is_created(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(CAPTURE_DECODE)
    result = pytester.runpytest("-s", "--graph-capture-dir=out", "--graph-capture-batch-sizes=1,2")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*TRACES="])
    assert not (pytester.path / "out").exists()


def test_verbose_mode_prints_one_progress_line_per_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from pytest_graphcapture.testing import FakeRunner

        def test_capture(graph_capture):
            graph_capture(FakeRunner([1, 2], variants=[None, "lora"]))
    """)
    result = pytester.runpytest("-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "graph-capture: FakeRunner bs=2 rank=0 captured in *s (warmups *s, capture *s)",
            "graph-capture: FakeRunner bs=2 variant=lora rank=0 captured in *s (warmups *s, capture *s)",
            "graph-capture: FakeRunner bs=1 rank=0 captured in *s (warmups *s, capture *s)",
            "graph-capture: FakeRunner bs=1 variant=lora rank=0 captured in *s (warmups *s, capture *s)",
        ]
    )
    quiet = pytester.runpytest()
    assert "graph-capture: FakeRunner" not in quiet.stdout.str()


def test_users_override_decode_runner_in_their_conftest(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import pytest
        from pytest_graphcapture.testing import FakeRunner

        @pytest.fixture
        def decode_runner():
            return FakeRunner([3], name="MyEngine")
    """)
    pytester.makepyfile(CAPTURE_DECODE)
    result = pytester.runpytest("-s", "--graph-capture-trace", "--graph-capture-dir=out")
    result.stdout.fnmatch_lines(["*KEYS=3", "TRACES=MyEngine_bs_3_rank0.json.gz"])


def test_runner_factory_hook_supplies_the_runner(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        from pytest_graphcapture.testing import FakeRunner

        def pytest_graphcapture_make_runner(config, device, batch_sizes):
            return FakeRunner(batch_sizes or [5], name="FromHook")
    """)
    pytester.makepyfile(CAPTURE_DECODE)
    result = pytester.runpytest("-s", "--graph-capture-batch-sizes=6,7")
    result.stdout.fnmatch_lines(["*KEYS=7,6"])


def test_golden_check_after_a_single_trace_capture_says_to_use_per_bs(pytester: pytest.Pytester) -> None:
    module = pytester.makepyfile("""
        from pytest_graphcapture.testing import FakeRunner

        def test_gate(graph_capture, golden):
            golden.check(graph_capture(FakeRunner([1, 2])))
    """)
    result = pytester.runpytest("--graph-capture-trace=single", "--graph-capture-dir=out")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*--graph-capture-trace=single*holds no capture windows*(a capture on CPU records none)*per-bs*"]
    )
    assert (
        trace_dir(pytester.path / "out", trace_group_for(f"{module.name}::test_gate"))
        / "cuda_graph_capture-FakeRunner-TP-0.json.gz"
    ).exists()
