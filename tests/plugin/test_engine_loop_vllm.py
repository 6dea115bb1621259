"""vLLM 0.34 under ``graph_capture.engine`` (tests/vllm_v034.py, its capture path on CPU): PIECEWISE then FULL keys,
the size in tokens, and the memory-estimate pass (``passes=``) left out of every golden."""

from __future__ import annotations

import filecmp
import shutil

import pytest
import torch
from helpers import run
from vllm_v034 import GPUModelRunner

#: The test file a vLLM user writes (docs/engine-vllm.md), against the stand-in instead of vllm.
USER_TEST = '''
import pytest
import vllm_v034 as vllm

from pytest_graphcapture import CaptureKey


@pytest.fixture
def capturing(monkeypatch):
    """The mode of the shape vLLM captures, while its CudaGraphManager captures (empty otherwise)."""
    now = {}
    prepare, capture = vllm.prepare_inputs_to_capture, vllm.CudaGraphManager.capture

    def remember(*args, full_cudagraph, **kwargs):
        now["mode"] = "FULL" if full_cudagraph else "PIECEWISE"
        return prepare(*args, full_cudagraph=full_cudagraph, **kwargs)

    def captures(self, *args, **kwargs):
        try:
            return capture(self, *args, **kwargs)
        finally:
            now.clear()

    monkeypatch.setattr(vllm, "prepare_inputs_to_capture", remember)
    monkeypatch.setattr(vllm.CudaGraphManager, "capture", captures)
    return now


def gate(graph_capture, capturing, passes=True, **options):
    return graph_capture.engine(
        lambda: vllm.start(vllm.Options(**options)),
        forward=(vllm.TinyDecoder, "forward"),
        # tokens, not requests; a forward outside the capture (profile run, warm-up) is no key's
        key=lambda model, input_ids, positions: CaptureKey("decoder", len(input_ids), capturing["mode"])
        if capturing
        else None,
        passes=(vllm.GPUModelRunner, "capture_model") if passes else None,
        warmups=1,
    )


def test_one_pass(graph_capture, golden, capturing):
    golden.check(gate(graph_capture, capturing, passes=False, estimate=False))


def test_two_passes(graph_capture, golden, capturing):
    golden.check(gate(graph_capture, capturing))


def test_change_in_the_estimate_pass_only(graph_capture, golden, capturing):
    golden.check(gate(graph_capture, capturing, change=("estimate", "tanh")))


def test_regression_in_the_real_pass(graph_capture, golden, capturing):
    golden.check(gate(graph_capture, capturing, change=("real", "tanh")))


def test_estimate_and_real_pass_unseparated(graph_capture, golden, capturing):
    golden.check(gate(graph_capture, capturing, passes=False))
'''

KEYS = ["decoder_bs_1_FULL.json", "decoder_bs_2_FULL.json", "decoder_bs_2_PIECEWISE.json", "decoder_bs_4_FULL.json"]


def test_vllm_034_capture_gated_per_key_with_the_estimate_pass_left_out(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_vllm=USER_TEST)
    run(pytester, "--golden-dir=goldens", "--update-golden", "-k", "one_pass or two_passes").assert_outcomes(passed=2)
    folder = pytester.path / "goldens" / "cpu" / "test_vllm.py"
    one, two = folder / "test_one_pass", folder / "test_two_passes"
    names = sorted(p.name for p in one.iterdir())
    assert set(KEYS) <= set(names) and "decoder_bs_4_PIECEWISE.json" in names and len(names) == 5
    # A golden written from a run with the estimate pass is the one written without it, byte for byte.
    assert sorted(p.name for p in two.iterdir()) == names
    assert filecmp.cmpfiles(one, two, names, shallow=False)[0] == names
    for test in ("test_change_in_the_estimate_pass_only", "test_regression_in_the_real_pass"):
        shutil.copytree(one, folder / test)
    result = run(pytester, "--golden-dir=goldens")
    result.assert_outcomes(passed=3, failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines_random(
        [
            "FAILED test_vllm.py::test_regression_in_the_real_pass*",
            # vLLM captures every size again after its estimate: without passes= that is a second capture of a key.
            "*graph_capture.engine: decoder bs=4 variant=PIECEWISE: warmup 1: this key was captured already*",
        ]
    )
    assert "FAILED test_vllm.py::test_change_in_the_estimate_pass_only" not in out
    for key in ("bs=4 variant=PIECEWISE", "bs=2 variant=FULL"):
        assert key in out  # the regression fails the keys of the real pass it changed


def test_the_contract_takes_vllm_order_and_a_new_pass_but_not_a_pass_inside_a_key() -> None:
    from pytest_graphcapture.engine.contract import FORWARD, CaptureContractError, StepContract, key_sequence
    from pytest_graphcapture.keys import CaptureKey

    contract = StepContract(warmups=1)
    order = [(bs, mode) for mode in ("PIECEWISE", "FULL") for bs in (4, 2)]  # PIECEWISE sizes, then FULL sizes
    for _ in range(2):  # the estimate pass, then the real capture
        contract.new_pass()
        for bs, mode in order:
            for event in key_sequence(1):
                contract.feed(event, CaptureKey("decoder", bs, mode))
    contract.finish()
    assert len(contract.done) == 4
    with pytest.raises(CaptureContractError, match="bs=8 variant=FULL: warmup 1: captured after bs=2 variant=FULL"):
        contract.feed(FORWARD, CaptureKey("decoder", 8, "FULL"))  # sizes still descend within a mode
    contract = StepContract(warmups=1)
    contract.feed(FORWARD, CaptureKey("decoder", 4, "FULL"))
    with pytest.raises(CaptureContractError, match="new capture pass began before this key was captured"):
        contract.new_pass()


def test_passes_names_a_method_and_is_refused_with_one_trace(tmp_path) -> None:
    from pytest_graphcapture.engine.capture import CaptureSettings
    from pytest_graphcapture.engine.loop import capture_engine_loop
    from pytest_graphcapture.errors import UsageError

    model = torch.nn.Linear(
        2, 2
    )  # any forward: the stand-in model binds a graph pool, which only the loop stands in for
    kwargs = {"forward": (model, "forward"), "key": lambda *args: 1}
    with pytest.raises(UsageError, match="^graph_capture.engine: passes=: GPUModelRunner has no method 'capture'$"):
        capture_engine_loop(lambda: None, passes=(GPUModelRunner, "capture"), **kwargs)
    single = CaptureSettings(trace="single", out_dir=tmp_path)
    with pytest.raises(UsageError, match="passes= with --graph-capture-trace=single"):
        capture_engine_loop(lambda: None, passes=(GPUModelRunner, "capture_model"), settings=single, **kwargs)
