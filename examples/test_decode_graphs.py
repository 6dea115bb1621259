"""The gate as an inference engine's repo uses it: one golden summary per decode batch size.

Run ``pytest examples`` (add ``--graph-capture-trace`` to also export one Chrome trace per
captured graph).  On a GPU the graphs are real CUDA graphs and goldens live under
``goldens/cuda-sm90/...``; on CPU the eager stand-in is captured and goldens live under
``goldens/cpu/...``.
"""

import torch


def test_decode_graphs_match_goldens(graph_capture, golden):
    # Captures the `decode_runner` fixture (the embedded tiny decoder unless a conftest overrides it),
    # largest batch size first, and summarizes each graph's kernels, op shapes and launches.
    result = graph_capture()
    golden.check(result)


def test_replayed_decode_matches_eager(graph_capture, decode_runner):
    # No trace and no summary needed here: this test checks the numbers the graphs produce.
    result = graph_capture(decode_runner, trace="off", summarize=False)
    decode_runner.use_graphs(result, graph_capture.backend)
    generator = torch.Generator().manual_seed(0)
    for n in (1, 3, 5, 8):  # on and between captured batch sizes; 3 and 5 are padded
        ids = torch.randint(0, decode_runner.config.vocab_size, (n,), generator=generator)
        lens = torch.randint(1, decode_runner.config.max_seq_len + 1, (n,), generator=generator)
        ids, lens = ids.to(decode_runner.device), lens.to(decode_runner.device)
        snapshot = decode_runner.k_cache.clone(), decode_runner.v_cache.clone()
        replay_tokens, replay_logits = decode_runner.decode(ids, lens)
        decode_runner.k_cache.copy_(snapshot[0])
        decode_runner.v_cache.copy_(snapshot[1])
        eager_tokens, eager_logits = decode_runner.eager_decode(ids, lens)
        torch.testing.assert_close(replay_logits, eager_logits, rtol=1e-4, atol=1e-5)
        assert torch.equal(replay_tokens, eager_tokens)
