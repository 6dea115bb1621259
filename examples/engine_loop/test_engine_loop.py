"""The gate on the engine's own capture loop: ``graph_capture.engine(...)``, no adapter.

The engine's ``capture(profiler=...)`` runs unmodified — its loop over batch sizes and
variants, its warmups, its pool and stream, its order — and steps the plugin's
per-batch-size profiler where it steps its own.  On a GPU it captures real CUDA graphs;
on CPU the gate gives its ``torch.cuda.graph`` / ``CUDAGraph`` / stream calls eager
stand-ins, so the same test runs on CPU CI against the CPU goldens.

Goldens: ``examples/goldens/<platform>/engine_loop/test_engine_loop.py/...``, one per batch
size and variant, created with ``cd examples && pytest engine_loop --update-golden``.
"""

import torch


def gate(graph_capture, engine, **options):
    return graph_capture.engine(
        # use_graphs=True: the engine's CUDA-graph path, also on CPU (where the gate stands in for CUDA).
        lambda profiler: engine.capture(use_graphs=True, profiler=profiler),
        forward=(engine, "forward_decode"),  # the body every graph holds
        key=lambda bs, variant: (bs, variant),  # the key of one call of it
        runner_name="MiniEngine",
        **options,  # trace="off": no trace files (the checks below need none)
    )


def test_engine_capture_loop_matches_goldens(graph_capture, golden, engine):
    result = gate(graph_capture, engine)
    assert [(k.batch_size, k.variant) for k in result.keys] == engine.capture_order()
    golden.check(result)


def test_adapter_and_engine_loop_capture_the_same_graphs(graph_capture, engine):
    from adapter import EngineAdapter
    from mini_engine import MiniEngineGraphRunner

    adapted = graph_capture(EngineAdapter(MiniEngineGraphRunner(device=engine.device)), trace="off")
    own_loop = gate(graph_capture, engine, trace="off")
    assert list(own_loop.keys) == list(adapted.keys)
    for key in adapted.keys:
        assert own_loop.keys[key].summary == adapted.keys[key].summary, f"{key} differs"


def test_the_engine_serves_decode_from_the_graphs_its_loop_captured(graph_capture, engine):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, engine.config.vocab_size, (3,), generator=generator).to(engine.device)
    lens = torch.randint(1, engine.config.max_seq_len + 1, (3,), generator=generator).to(engine.device)
    snapshot = engine.k_cache.clone(), engine.v_cache.clone()
    gate(graph_capture, engine, trace="off", summarize=False)
    engine.k_cache.copy_(snapshot[0])
    engine.v_cache.copy_(snapshot[1])
    got = engine.decode(ids, lens, "logprobs")  # bs=3 replays the bs=4 graph the loop captured
    engine.k_cache.copy_(snapshot[0])
    engine.v_cache.copy_(snapshot[1])
    engine.graphs = {}
    engine.capture(use_graphs=False)  # eager closures: the reference
    want = engine.decode(ids, lens, "logprobs")
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
