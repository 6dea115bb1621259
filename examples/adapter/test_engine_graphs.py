"""The gate on an engine's own decode graph runner, through the adapter in ``adapter.py``.

Goldens: ``examples/goldens/<platform>/adapter/test_engine_graphs.py/...`` — one per batch
size and variant (``MiniEngine_bs_4_logprobs.json``).  Created with
``cd examples && pytest adapter --update-golden``.
"""

import pytest
import torch

from pytest_graphcapture.testing import CallLog, FakeBackend


def test_engine_decode_graphs_match_goldens(graph_capture, golden):
    result = graph_capture()  # the conftest's decode_runner: the engine through the adapter
    golden.check(result)


@pytest.mark.parametrize("variants", [(None, "logprobs"), ("logprobs", None)], ids=["plain-first", "logprobs-first"])
def test_plugin_captures_in_the_engines_order(variants):
    # A recording backend shows what the plugin would do with real graphs: the engine's own
    # order (largest batch size first, every variant of a size together, variants in the
    # engine's declared order, whatever their names), two warmups each.
    from adapter import EngineAdapter
    from mini_engine import MiniEngineGraphRunner

    from pytest_graphcapture import capture_runner
    from pytest_graphcapture.engine.capture import CaptureSettings

    decode_runner = EngineAdapter(MiniEngineGraphRunner(variants=variants))
    log = CallLog()
    result = capture_runner(decode_runner, FakeBackend(log), CaptureSettings(summarize=False))
    captured = [(k.batch_size, k.variant) for k in result.keys]
    assert captured == decode_runner.engine.capture_order()
    assert captured[0] == (max(decode_runner.engine.capture_bs), variants[0])
    assert all(log.count("forward", key) == 3 for key in result.keys)  # 2 warmups + 1 capture


def test_replaying_the_plugins_graphs_matches_the_engines_own(graph_capture, decode_runner):
    engine = decode_runner.engine
    engine.capture()  # the engine's own start-up capture
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, engine.config.vocab_size, (3,), generator=generator).to(engine.device)
    lens = torch.randint(1, engine.config.max_seq_len + 1, (3,), generator=generator).to(engine.device)
    snapshot = engine.k_cache.clone(), engine.v_cache.clone()
    want = engine.decode(ids, lens, "logprobs")  # bs=3 is padded to the bs=4 graph
    result = graph_capture(decode_runner, trace="off", summarize=False)
    decode_runner.use_graphs(result, graph_capture.backend)
    engine.k_cache.copy_(snapshot[0])
    engine.v_cache.copy_(snapshot[1])
    got = engine.decode(ids, lens, "logprobs")
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    assert bool((got[1] < 0).all())  # real log-probabilities were written by the logprobs variant
