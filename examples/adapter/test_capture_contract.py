"""Contract tests of the engine's own capture loop, on a CPU-only machine.

``capture_contract`` runs ``MiniEngineGraphRunner.capture`` with ``torch.cuda.CUDAGraph``,
``torch.cuda.graph`` and the stream calls replaced by recording fakes, and checks the
step contract: per key two warmups then the capture, a profiler step after each and
none inside the graph, largest batch size first.
"""

from mini_engine import MiniEngineGraphRunner

from pytest_graphcapture.keys import CaptureKey


def test_engine_capture_loop_keeps_the_step_contract(capture_contract):
    engine = MiniEngineGraphRunner(device="cpu")
    log = capture_contract.check_capture(
        lambda profiler: engine.capture(use_graphs=True, profiler=profiler),
        forward=(engine, "forward_decode"),
        key=lambda bs, variant: CaptureKey("MiniEngine", bs, variant),
    )
    assert log.count("graph.enter") == len(engine.capture_order())


def test_the_adapter_keeps_the_step_contract_as_the_plugin_captures_it(capture_contract, decode_runner):
    result = capture_contract.check_runner(decode_runner)  # one trace per key, in the engine's order
    assert [(k.batch_size, k.variant) for k in result.keys] == decode_runner.engine.capture_order()
