"""Multi-rank engine below the plugin: rank processes, the TP decoder's numbers, errors, no orphans."""

from __future__ import annotations

import pytest
import torch
from rank_targets import tp_decode

from pytest_graphcapture.engine.decode_model import DecoderConfig, TinyDecodeRunner, check_tensor_parallel
from pytest_graphcapture.engine.ranks.supervisor import (
    check_picklable,
    free_port,
    resolve_target,
    run_on_ranks,
)
from pytest_graphcapture.errors import UsageError
from pytest_graphcapture.keys import CaptureKey, key_label
from pytest_graphcapture.naming import golden_file_name


@pytest.fixture(scope="module")
def two_ranks() -> list[dict]:
    """One two-rank run for the TWO_RANKS tests (each checks its own part of what the ranks saw)."""
    return run_on_ranks("rank_targets:tp_decode_logits", 2, args=(2,), batch_sizes=[1, 2], timeout=60)


# The run is made once, on one worker; both tests are slow, so they stay together when slow tests go first.
TWO_RANKS = pytest.mark.xdist_group("test_distributed_two_ranks")


@pytest.mark.slow
@TWO_RANKS
def test_two_rank_tensor_parallel_decode_equals_one_rank(two_ranks: list[dict]) -> None:
    one = tp_decode(0, 1)  # the unsharded model, here: no process of its own needed
    two = two_ranks
    assert one["cache"][3] == 2 and [r["cache"][3] for r in two] == [1, 1]  # KV heads split across ranks
    for rank_result in two:  # every rank ends with the full (all-reduced) result
        torch.testing.assert_close(
            torch.tensor(rank_result["logits"]), torch.tensor(one["logits"]), rtol=1e-4, atol=1e-5
        )
        assert rank_result["tokens"] == one["tokens"]


@pytest.mark.slow
@TWO_RANKS
def test_ranks_see_an_initialized_gloo_process_group_and_the_session_batch_sizes(two_ranks: list[dict]) -> None:
    results = [rank_result["world"] for rank_result in two_ranks]
    assert results == [(0, 2, "gloo", (1, 2), 0, 2), (1, 2, "gloo", (1, 2), 1, 2)]


def test_tensor_parallel_layout_is_checked() -> None:
    check_tensor_parallel(DecoderConfig(), 2, 1)
    with pytest.raises(ValueError, match="num_kv_heads 2 does not split evenly over tp_size 4"):
        check_tensor_parallel(DecoderConfig(), 4, 0)
    with pytest.raises(ValueError, match=r"tp_rank must be in \[0, 2\)"):
        TinyDecodeRunner([1], tp_size=2, tp_rank=2)
    single, shard = TinyDecodeRunner([1]), TinyDecodeRunner([1], tp_size=2, tp_rank=1)
    assert single.name == "TinyDecodeRunner" and shard.name == "TinyDecodeRunner-tp2"
    # Column-parallel QKV: this rank's 2 query heads and 1 KV head of 16 dims each; row-parallel o_proj/down.
    assert tuple(shard.model.layers[0].qkv.shape) == ((2 + 2 * 1) * 16, 64)
    assert tuple(shard.model.layers[0].o_proj.shape) == (64, 32)
    assert tuple(shard.model.layers[0].down.shape) == (64, 64)
    full = single.model.layers[0]
    assert torch.equal(shard.model.layers[0].o_proj, full.o_proj[:, 32:])  # the same seeded model, sliced
    assert torch.equal(shard.model.layers[0].qkv[:32], full.qkv[32:64])


def test_factories_must_reach_the_rank_processes() -> None:
    with pytest.raises(UsageError, match="cannot be sent to the rank processes"):
        check_picklable(lambda ctx: None)
    with pytest.raises(UsageError, match="cannot be imported"):
        resolve_target("rank_targets:no_such_function")
    with pytest.raises(UsageError, match="expected a callable or a 'module:function' string"):
        resolve_target("rank_targets")
    with pytest.raises(UsageError, match="number of ranks must be a positive integer"):
        run_on_ranks("rank_targets:rank_and_world", 0)
    assert resolve_target("rank_targets:rank_and_world").__name__ == "rank_and_world"
    assert 0 < free_port() < 65536


def test_multi_rank_goldens_name_every_rank_and_single_rank_names_are_unchanged() -> None:
    key0, key1 = CaptureKey("R", 4, None, 0), CaptureKey("R", 4, None, 1)
    assert golden_file_name(key0) == "R_bs_4.json"  # single rank: as before
    assert golden_file_name(key1) == "R_bs_4_rank1.json"
    assert golden_file_name(key0, explicit_rank=True) == "R_bs_4_rank0.json"
    assert key_label(key0, explicit_rank=True) == "bs=4 rank=0" and key_label(key0) == "bs=4"
