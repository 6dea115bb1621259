"""The embedded decode runner: replayed results equal eager results (CPU; GPU under `gpu`)."""

from __future__ import annotations

import pytest
import torch

from pytest_graphcapture.engine.backend import make_backend
from pytest_graphcapture.engine.capture import CaptureSettings, capture_runner
from pytest_graphcapture.engine.decode_model import DecoderConfig, TinyDecodeRunner
from pytest_graphcapture.engine.runner import default_batch_sizes

CAPTURED = [1, 2, 4, 8]


def test_default_batch_sizes_follow_the_reference_list_shape() -> None:
    assert default_batch_sizes(32) == [1, 2, 4, 8, 12, 16, 24, 32]
    assert default_batch_sizes(10) == [1, 2, 4, 8]
    sizes = default_batch_sizes(256)
    assert len(sizes) == 36 and sizes[-1] == 256 and sizes[5:8] == [16, 24, 32]


def test_padding_picks_the_smallest_captured_size_that_holds_the_batch() -> None:
    runner = TinyDecodeRunner(CAPTURED)
    assert [runner.padded_batch_size(n) for n in (1, 2, 3, 4, 5, 8)] == [1, 2, 4, 4, 8, 8]
    with pytest.raises(ValueError, match="does not fit"):
        runner.padded_batch_size(9)


def check_replay_equals_eager(device: str) -> None:
    runner = TinyDecodeRunner(CAPTURED, device=device)
    backend = make_backend(device)
    result = capture_runner(runner, backend, CaptureSettings(trace="off", summarize=False))
    runner.use_graphs(result, backend)
    generator = torch.Generator().manual_seed(1)
    for n in (1, 2, 3, 4, 5, 7, 8):  # on and between captured sizes
        ids = torch.randint(0, runner.config.vocab_size, (n,), generator=generator).to(device)
        lens = torch.randint(1, runner.config.max_seq_len + 1, (n,), generator=generator).to(device)
        # Fill the cache with history, snapshot it, and run both paths from the same state.
        runner.k_cache.normal_(generator=None)
        runner.v_cache.normal_(generator=None)
        snapshot = runner.k_cache.clone(), runner.v_cache.clone()
        replay_tokens, replay_logits = runner.decode(ids, lens)
        after_replay = runner.k_cache.clone()
        runner.k_cache.copy_(snapshot[0])
        runner.v_cache.copy_(snapshot[1])
        eager_tokens, eager_logits = runner.eager_decode(ids, lens)
        torch.testing.assert_close(replay_logits, eager_logits, rtol=1e-4, atol=1e-5)
        assert torch.equal(replay_tokens, eager_tokens), f"next tokens differ for a batch of {n}"
        # Padded rows wrote only to the padding slot, never into the real sequences' cache.
        torch.testing.assert_close(after_replay[:, :n], runner.k_cache[:, :n])
        untouched = slice(n, runner.padding_slot)
        assert torch.equal(after_replay[:, untouched], snapshot[0][:, untouched])


def test_replay_equals_eager_on_cpu() -> None:
    check_replay_equals_eager("cpu")


@pytest.mark.gpu
def test_replay_of_real_cuda_graphs_equals_eager() -> None:
    check_replay_equals_eager("cuda")


def test_decode_before_capture_says_what_to_do() -> None:
    with pytest.raises(RuntimeError, match="capture first"):
        TinyDecodeRunner([1]).decode(torch.tensor([1]), torch.tensor([1]))


def test_config_rejects_heads_that_do_not_divide() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        DecoderConfig(hidden_size=64, num_heads=5)
