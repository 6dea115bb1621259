"""The embedded decode runner: a small Llama-style decoder in plain torch."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from ..keys import CaptureKey
from .backend import Backend
from .runner import Forward, GraphRunner, default_batch_sizes


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of the embedded decoder (small enough for CPU CI)."""

    vocab_size: int = 256
    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2
    intermediate_size: int = 128
    max_seq_len: int = 32
    rope_theta: float = 10000.0
    rms_eps: float = 1e-6
    seed: int = 0

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {self.num_kv_heads}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


def check_tensor_parallel(config: DecoderConfig, tp_size: int, tp_rank: int) -> None:
    """Raise ValueError unless ``config`` splits evenly over ``tp_size`` ranks and ``tp_rank`` is one of them."""
    if not isinstance(tp_size, int) or tp_size < 1:
        raise ValueError(f"tp_size must be a positive integer, got {tp_size!r}")
    if not isinstance(tp_rank, int) or not 0 <= tp_rank < tp_size:
        raise ValueError(f"tp_rank must be in [0, {tp_size}), got {tp_rank!r}")
    for name in ("num_heads", "num_kv_heads", "intermediate_size"):
        value = getattr(config, name)
        if value % tp_size:
            raise ValueError(f"{name} {value} does not split evenly over tp_size {tp_size}")


def _rows(weight: torch.Tensor, parts: Sequence[int], tp_size: int, tp_rank: int) -> torch.Tensor:
    """Column-parallel shard: of each consecutive block of ``parts`` rows, this rank's slice."""
    shards = []
    for block in weight.split(list(parts), dim=0):
        size = block.shape[0] // tp_size
        shards.append(block[tp_rank * size : (tp_rank + 1) * size])
    return torch.cat(shards, dim=0).contiguous()


def _columns(weight: torch.Tensor, tp_size: int, tp_rank: int) -> torch.Tensor:
    """Row-parallel shard: this rank's slice of the input columns."""
    size = weight.shape[1] // tp_size
    return weight[:, tp_rank * size : (tp_rank + 1) * size].contiguous()


class TinyDecoder(torch.nn.Module):
    """The decoder itself: a pure function of weights, KV cache and inputs."""

    def __init__(self, config: DecoderConfig, *, tp_size: int = 1, tp_rank: int = 0, tp_group: Any = None) -> None:
        super().__init__()
        check_tensor_parallel(config, tp_size, tp_rank)
        self.config = config
        self.tp_size, self.tp_rank, self.tp_group = tp_size, tp_rank, tp_group
        generator = torch.Generator().manual_seed(config.seed)

        def weight(*shape: int) -> torch.Tensor:
            # The full weight on every rank (same draws in the same order), sharded below.
            return torch.randn(*shape, generator=generator) * 0.02

        def param(tensor: torch.Tensor) -> torch.nn.Parameter:
            return torch.nn.Parameter(tensor, requires_grad=False)

        c = config
        kv_dim = c.num_kv_heads * c.head_dim
        self.local_heads = c.num_heads // tp_size
        self.local_kv_heads = c.num_kv_heads // tp_size
        self.local_intermediate = c.intermediate_size // tp_size
        self.embed = param(weight(c.vocab_size, c.hidden_size))
        self.layers = torch.nn.ModuleList()
        for _ in range(c.num_layers):
            layer = torch.nn.Module()
            layer.attn_norm = torch.nn.Parameter(torch.ones(c.hidden_size), requires_grad=False)
            qkv = weight(c.hidden_size + 2 * kv_dim, c.hidden_size)
            o_proj = weight(c.hidden_size, c.hidden_size)
            layer.mlp_norm = torch.nn.Parameter(torch.ones(c.hidden_size), requires_grad=False)
            gate_up = weight(2 * c.intermediate_size, c.hidden_size)
            down = weight(c.hidden_size, c.intermediate_size)
            if tp_size > 1:
                qkv = _rows(qkv, (c.hidden_size, kv_dim, kv_dim), tp_size, tp_rank)
                o_proj = _columns(o_proj, tp_size, tp_rank)
                gate_up = _rows(gate_up, (c.intermediate_size, c.intermediate_size), tp_size, tp_rank)
                down = _columns(down, tp_size, tp_rank)
            layer.qkv, layer.o_proj = param(qkv), param(o_proj)
            layer.gate_up, layer.down = param(gate_up), param(down)
            self.layers.append(layer)
        self.final_norm = torch.nn.Parameter(torch.ones(c.hidden_size), requires_grad=False)
        self.lm_head = param(weight(c.vocab_size, c.hidden_size))
        inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        angles = torch.outer(torch.arange(c.max_seq_len, dtype=torch.float32), inv_freq)
        self.register_buffer("rope_cos", angles.cos(), persistent=False)
        self.register_buffer("rope_sin", angles.sin(), persistent=False)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.config.rms_eps) * weight

    def rotary(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: [bs, heads, head_dim]; rotate pairs (first half, second half).
        cos = self.rope_cos[positions].unsqueeze(1)
        sin = self.rope_sin[positions].unsqueeze(1)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    def reduce(self, partial: torch.Tensor) -> torch.Tensor:
        """Sum a row-parallel projection's partial results over the ranks (no-op on one rank)."""
        if self.tp_size > 1:
            torch.distributed.all_reduce(partial, group=self.tp_group)
        return partial

    def forward(
        self,
        input_ids: torch.Tensor,
        seq_lens: torch.Tensor,
        slots: torch.Tensor,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        """One decode step: the logits of the next token of each sequence."""
        c = self.config
        bs = input_ids.shape[0]
        positions = seq_lens - 1
        key_index = torch.arange(c.max_seq_len, device=input_ids.device)
        invisible = key_index.unsqueeze(0) >= seq_lens.unsqueeze(1)  # [bs, max_seq]
        group = c.num_heads // c.num_kv_heads
        heads, kv_heads = self.local_heads, self.local_kv_heads
        x = torch.nn.functional.embedding(input_ids, self.embed)
        for index, layer in enumerate(self.layers):
            h = self.rms_norm(x, layer.attn_norm)
            qkv = torch.nn.functional.linear(h, layer.qkv)
            q, k, v = qkv.split([heads * c.head_dim, kv_heads * c.head_dim, kv_heads * c.head_dim], dim=-1)
            q = self.rotary(q.reshape(bs, heads, c.head_dim), positions)
            k = self.rotary(k.reshape(bs, kv_heads, c.head_dim), positions)
            k_cache[index].index_put_((slots, positions), k)
            v_cache[index].index_put_((slots, positions), v.reshape(bs, kv_heads, c.head_dim))
            keys = k_cache[index][slots].repeat_interleave(group, dim=2)  # [bs, max_seq, heads, hd]
            values = v_cache[index][slots].repeat_interleave(group, dim=2)
            scores = torch.einsum("bhd,bshd->bhs", q, keys) * (c.head_dim**-0.5)
            scores = scores.masked_fill(invisible.unsqueeze(1), float("-inf"))
            attn = torch.einsum("bhs,bshd->bhd", scores.softmax(dim=-1), values)
            x = x + self.reduce(torch.nn.functional.linear(attn.reshape(bs, heads * c.head_dim), layer.o_proj))
            h = self.rms_norm(x, layer.mlp_norm)
            gate, up = torch.nn.functional.linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + self.reduce(torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, layer.down))
        return torch.nn.functional.linear(self.rms_norm(x, self.final_norm), self.lm_head)


class TinyDecodeRunner(GraphRunner):
    """Decode graph runner for :class:`TinyDecoder` with static, sliced buffers."""

    def __init__(
        self,
        batch_sizes: Optional[Sequence[int]] = None,
        *,
        device: torch.device | str = "cpu",
        config: Optional[DecoderConfig] = None,
        dtype: torch.dtype = torch.float32,
        max_batch_size: int = 32,
        tp_size: int = 1,
        tp_rank: int = 0,
        tp_group: Any = None,
    ) -> None:
        self.config = config or DecoderConfig()
        check_tensor_parallel(self.config, tp_size, tp_rank)
        self.tp_size, self.tp_rank = tp_size, tp_rank
        if tp_size > 1:
            self.runner_name = f"{type(self).__name__}-tp{tp_size}"
        sizes = sorted(set(int(bs) for bs in (batch_sizes or default_batch_sizes(max_batch_size))))
        if not sizes or sizes[0] < 1:
            raise ValueError(f"batch sizes must be positive integers, got {batch_sizes!r}")
        self._batch_sizes = sizes
        self.device = torch.device(device)
        self.dtype = dtype
        self.model = TinyDecoder(self.config, tp_size=tp_size, tp_rank=tp_rank, tp_group=tp_group).to(
            device=self.device, dtype=dtype
        )
        max_bs, c = sizes[-1], self.config
        self.padding_slot = max_bs
        cache_shape = (c.num_layers, max_bs + 1, c.max_seq_len, self.model.local_kv_heads, c.head_dim)
        self.k_cache = torch.zeros(cache_shape, device=self.device, dtype=dtype)
        self.v_cache = torch.zeros(cache_shape, device=self.device, dtype=dtype)
        # Static input/output buffers: captured kernels read and write these addresses.
        self.input_ids = torch.zeros(max_bs, dtype=torch.long, device=self.device)
        self.seq_lens = torch.ones(max_bs, dtype=torch.long, device=self.device)
        self.slots = torch.full((max_bs,), self.padding_slot, dtype=torch.long, device=self.device)
        self.logits = torch.zeros(max_bs, c.vocab_size, device=self.device, dtype=dtype)
        self.next_tokens = torch.zeros(max_bs, dtype=torch.long, device=self.device)
        self._graphs: dict[int, Any] = {}
        self._backend: Optional[Backend] = None

    def batch_sizes(self) -> Sequence[int]:
        return list(self._batch_sizes)

    def forward_for(self, key: CaptureKey) -> Forward:
        bs = key.batch_size
        if bs not in self._batch_sizes:
            raise KeyError(f"{self.name} has no static buffers for bs={bs}; batch sizes: {self._batch_sizes}")

        @torch.inference_mode()
        def forward() -> None:
            logits = self.model(self.input_ids[:bs], self.seq_lens[:bs], self.slots[:bs], self.k_cache, self.v_cache)
            self.logits[:bs].copy_(logits)
            self.next_tokens[:bs].copy_(logits.argmax(dim=-1))

        return forward

    def use_graphs(self, result: Any, backend: Backend) -> None:
        """Serve :meth:`decode` from the graphs of a capture ``result`` on ``backend``."""
        self._graphs = {kr.key.batch_size: kr.graph for kr in result if kr.key.variant is None}
        self._backend = backend

    def padded_batch_size(self, n: int) -> int:
        """The smallest captured batch size that holds ``n`` sequences."""
        sizes = sorted(self._graphs) if self._graphs else self._batch_sizes
        index = bisect.bisect_left(sizes, n)
        if n < 1 or index == len(sizes):
            raise ValueError(f"batch of {n} does not fit the captured sizes {sizes}")
        return sizes[index]

    @torch.inference_mode()
    def decode(
        self, input_ids: torch.Tensor, seq_lens: torch.Tensor, slots: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay the graph that fits this batch; return (next tokens, logits) of the real rows."""
        if not self._graphs or self._backend is None:
            raise RuntimeError("no graphs to replay: capture first, then call use_graphs(result, backend)")
        n = int(input_ids.shape[0])
        bs = self.padded_batch_size(n)
        slots = torch.arange(n, device=self.device) if slots is None else slots
        self.input_ids[:n].copy_(input_ids)
        self.seq_lens[:n].copy_(seq_lens)
        self.slots[:n].copy_(slots)
        self.input_ids[n:bs].zero_()
        self.seq_lens[n:bs].fill_(1)
        self.slots[n:bs].fill_(self.padding_slot)
        self._backend.replay(self._graphs[bs])
        return self.next_tokens[:n].clone(), self.logits[:n].clone()

    @torch.inference_mode()
    def eager_decode(
        self, input_ids: torch.Tensor, seq_lens: torch.Tensor, slots: Optional[torch.Tensor] = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The same decode step without graphs or padding: the reference for replay."""
        n = int(input_ids.shape[0])
        slots = torch.arange(n, device=self.device) if slots is None else slots
        logits = self.model(
            input_ids.to(self.device), seq_lens.to(self.device), slots.to(self.device), self.k_cache, self.v_cache
        )
        return logits.argmax(dim=-1), logits
