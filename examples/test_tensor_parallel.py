"""Tensor-parallel decode: every rank captures its own graphs and has its own goldens.

``@pytest.mark.graph_capture_ranks(2)`` makes ``graph_capture`` spawn 2 processes with
torch.distributed initialized (gloo on CPU, NCCL/RCCL on GPUs), build the runner on each rank
from a factory, capture there, and bring every rank's summaries back.  Goldens are per rank:
``goldens/<platform>/test_tensor_parallel.py/<test>/TinyDecodeRunner-tp2_bs_<bs>_rank<r>.json``.
With ``--graph-capture-trace`` each rank writes its own trace per batch size
(``TinyDecodeRunner-tp2_bs_<bs>_rank<r>.json.gz``).
"""

import pytest

from pytest_graphcapture.engine.decode_model import TinyDecodeRunner


def tp_decode_runner(ctx):
    # Runs inside each rank process: a module-level function, so it can be sent there.
    # Column/row-parallel projections with an all-reduce after o_proj and down; heads split by rank.
    return TinyDecodeRunner((1, 2, 4), device=ctx.device, tp_size=ctx.world_size, tp_rank=ctx.rank)


@pytest.mark.graph_capture_ranks(2)
def test_tensor_parallel_decode_graphs_match_goldens(graph_capture, golden):
    result = graph_capture(tp_decode_runner)
    assert sorted({key.rank for key in result.keys}) == [0, 1]
    golden.check(result)
