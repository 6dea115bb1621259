"""Module-level targets the multi-rank tests run inside spawned rank processes.

Spawned ranks import their target by name, so these live in a plain module (not a
test module) that the rank processes import from ``tests/`` on ``sys.path``.  The process that starts
the ranks imports this module too (to check the target's name), so torch is imported by the targets that
use it: a Python that only starts ranks (the GIL test's parent) does not pay for torch.
"""

from __future__ import annotations

import os
import sys


def tp_decode_logits(ctx, tp_size: int) -> dict:
    """:func:`tp_decode` on this rank's shard, and what the rank sees of its run (:func:`rank_and_world`)."""
    return {**tp_decode(ctx.rank, tp_size), "world": rank_and_world(ctx)}


def tp_decode(rank: int, tp_size: int) -> dict:
    """Eager decode of a fixed batch on shard ``rank`` of ``tp_size`` (1: the whole model, no process group
    needed); returns logits, tokens and the KV-cache shape."""
    import torch

    from pytest_graphcapture.engine.decode_model import TinyDecodeRunner

    runner = TinyDecodeRunner([1, 2, 4], tp_size=tp_size, tp_rank=rank)
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(0, runner.config.vocab_size, (4,), generator=generator)
    lens = torch.randint(1, runner.config.max_seq_len + 1, (4,), generator=generator)
    # History in the cache: the same full cache on every rank, each keeping its KV heads.
    kv = runner.model.local_kv_heads
    for cache, seed in ((runner.k_cache, 7), (runner.v_cache, 8)):
        shape = list(cache.shape)
        shape[3] = kv * tp_size
        full = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        cache.copy_(full[:, :, :, rank * kv : (rank + 1) * kv])
    tokens, logits = runner.eager_decode(ids, lens, slots=torch.arange(4))
    return {
        "logits": logits.tolist(),
        "tokens": tokens.tolist(),
        "cache": list(runner.k_cache.shape),
    }


def threads_and_variable(ctx, name: str) -> list:
    """torch's intra-op threads (libgomp read OMP_NUM_THREADS when torch loaded it) and ``os.environ[name]``."""
    import torch

    return [torch.get_num_threads(), os.environ.get(name)]


def how_started(ctx, name: str) -> list:
    """Whether this rank is a fresh Python started by ``spawn``, its parent's pid, then :func:`threads_and_variable`."""
    return [
        any("multiprocessing.spawn" in arg for arg in sys.orig_argv),
        os.getppid(),
        *threads_and_variable(ctx, name),
    ]


def rank_and_world(ctx) -> tuple:
    """What the rank sees: its context and the initialized process group."""
    import torch

    return (
        ctx.rank,
        ctx.world_size,
        ctx.backend,
        ctx.batch_sizes,
        torch.distributed.get_rank(),
        torch.distributed.get_world_size(),
    )


def _start_sleeper(pid_file: str) -> None:
    """Start a process of the rank's own (as a runner factory may: a server, a compile worker) and note its pid."""
    import subprocess
    import sys
    from pathlib import Path

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    Path(pid_file).write_text(str(child.pid))


def start_a_process_then_hang_or_fail(ctx, pid_files: list) -> None:
    """Rank 0 starts a process and hangs; rank 1 starts one, waits for rank 0's, then fails the run."""
    import time
    from pathlib import Path

    _start_sleeper(pid_files[ctx.rank])
    if ctx.rank == 0:
        time.sleep(600)
    while not Path(pid_files[0]).exists():
        time.sleep(0.05)
    raise RuntimeError("rank 1 fails; rank 0 hangs")


def hold_the_gil(ctx, pid_file: str) -> None:
    """Note this rank's pid, then stay in one C call that never releases the GIL."""
    from pathlib import Path

    Path(pid_file).write_text(str(os.getpid()))
    sum(range(10**15))


def exit_while_building(ctx):
    """A runner factory whose rank 1 ends its process without a word (like a native crash or the OOM killer)
    while building the runner; rank 0 waits for it in a collective."""
    import torch

    if ctx.rank == 1:
        os._exit(7)
    torch.distributed.barrier()


def crash(ctx):
    """A rank target that dies of a native crash (a read of address 0), as a bug in a C extension would."""
    import ctypes

    ctypes.string_at(0)
