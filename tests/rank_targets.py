"""Module-level targets the multi-rank tests run inside spawned rank processes.

Spawned ranks import their target by name, so these live in a plain module (not a
test module) that the rank processes import from ``tests/`` on ``sys.path``.
"""

from __future__ import annotations

import os

import torch

from pytest_graphcapture.engine.decode_model import TinyDecodeRunner


def tp_decode_logits(ctx, tp_size: int) -> dict:
    """Eager decode of a fixed batch on this rank's shard; returns logits and the KV-cache shape."""
    runner = TinyDecodeRunner([1, 2, 4], tp_size=tp_size, tp_rank=ctx.rank)
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, runner.config.vocab_size, (4,), generator=generator)
    lens = torch.randint(1, runner.config.max_seq_len + 1, (4,), generator=generator)
    # History in the cache: the same full cache on every rank, each keeping its KV heads.
    kv = runner.model.local_kv_heads
    for cache, seed in ((runner.k_cache, 7), (runner.v_cache, 8)):
        shape = list(cache.shape)
        shape[3] = kv * tp_size
        full = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        cache.copy_(full[:, :, :, ctx.rank * kv : (ctx.rank + 1) * kv])
    tokens, logits = runner.eager_decode(ids, lens, slots=torch.arange(4))
    return {"logits": logits.tolist(), "tokens": tokens.tolist(), "cache": list(runner.k_cache.shape)}


def rank_and_world(ctx) -> tuple:
    """What the rank sees: its context and the initialized process group."""
    return (
        ctx.rank,
        ctx.world_size,
        ctx.backend,
        ctx.batch_sizes,
        torch.distributed.get_rank(),
        torch.distributed.get_world_size(),
    )


def exit_on_rank_one(ctx) -> int:
    """Rank 1 dies without a Python exception (like a segfault or the OOM killer)."""
    if ctx.rank == 1:
        os._exit(7)
    torch.distributed.barrier()
    return ctx.rank
