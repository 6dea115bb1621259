"""What your serving engine already has: a decode graph runner (the code under test).

``MiniEngineGraphRunner`` is written in the style of the decode graph runners of
sglang and vLLM, around the embedded decoder of pytest-graphcapture:

* static input/output buffers sized for the largest batch size, sliced per batch size;
* one graph per (batch size, variant) — here the plain greedy step and a
  ``logprobs`` step that also returns the log-probability of each chosen token;
* captured **largest batch size first**, every graph in **one shared memory pool**
  on a dedicated stream, after warmup forwards (so lazy allocations happen outside
  capture);
* on replay a batch is padded up to the smallest captured size that holds it.

Nothing here knows about pytest: the adapter (``adapter.py``) exposes
:meth:`MiniEngineGraphRunner.forward_decode` — the exact body the engine captures —
to the plugin, which captures it in the same order, with the same pool and variants.
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Optional, Sequence

import torch

from pytest_graphcapture.engine.decode_model import DecoderConfig, TinyDecoder

CAPTURE_BATCH_SIZES = (1, 2, 4, 8)
VARIANTS: tuple[Optional[str], ...] = (None, "logprobs")
WARMUPS = 2


class MiniEngineGraphRunner:
    """Decode graph runner of a (miniature) serving engine."""

    def __init__(
        self,
        *,
        device: torch.device | str = "cpu",
        config: Optional[DecoderConfig] = None,
        capture_bs: Sequence[int] = CAPTURE_BATCH_SIZES,
        variants: Sequence[Optional[str]] = VARIANTS,
    ) -> None:
        self.device = torch.device(device)
        self.config = config or DecoderConfig()
        self.capture_bs = sorted(set(int(bs) for bs in capture_bs))
        self.variants = tuple(variants)
        self.model = TinyDecoder(self.config).to(self.device)
        c, max_bs = self.config, self.capture_bs[-1]
        self.padding_slot = max_bs
        cache = (c.num_layers, max_bs + 1, c.max_seq_len, c.num_kv_heads, c.head_dim)
        self.k_cache = torch.zeros(cache, device=self.device)
        self.v_cache = torch.zeros(cache, device=self.device)
        # Static buffers: a captured graph reads and writes exactly these addresses on every replay.
        self.input_ids = torch.zeros(max_bs, dtype=torch.long, device=self.device)
        self.seq_lens = torch.ones(max_bs, dtype=torch.long, device=self.device)
        self.slots = torch.full((max_bs,), self.padding_slot, dtype=torch.long, device=self.device)
        self.next_tokens = torch.zeros(max_bs, dtype=torch.long, device=self.device)
        self.token_logprobs = torch.zeros(max_bs, device=self.device)
        self.graphs: dict[tuple[int, Optional[str]], Callable[[], None]] = {}

    # ------------------------------------------------------------------ the captured body

    @torch.inference_mode()
    def forward_decode(self, bs: int, variant: Optional[str]) -> None:
        """One decode step over the first ``bs`` rows of the static buffers (what a graph holds)."""
        logits = self.model(self.input_ids[:bs], self.seq_lens[:bs], self.slots[:bs], self.k_cache, self.v_cache)
        tokens = logits.argmax(dim=-1)
        self.next_tokens[:bs].copy_(tokens)
        if variant == "logprobs":
            logprobs = torch.log_softmax(logits, dim=-1)
            self.token_logprobs[:bs].copy_(logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1))
        elif variant is not None:
            raise KeyError(f"unknown decode variant {variant!r}; variants: {self.variants}")

    def capture_order(self) -> list[tuple[int, Optional[str]]]:
        """Largest batch size first (smaller graphs reuse the larger ones' pool), variants in order."""
        return [(bs, variant) for bs in reversed(self.capture_bs) for variant in self.variants]

    # ------------------------------------------------------------------ the engine's own start-up

    def capture(self, *, use_graphs: Optional[bool] = None, profiler: Optional[Any] = None) -> None:
        """The engine's own capture loop: CUDA graphs on a GPU (``use_graphs``), eager closures otherwise.

        ``profiler`` (a ``torch.profiler.profile`` on a per-step schedule, as the
        engine's capture profiling option passes) is stepped after each warmup and
        after each capture, never inside the graph.
        """
        if not (self.device.type == "cuda" if use_graphs is None else use_graphs):
            for bs, variant in self.capture_order():
                self.graphs[(bs, variant)] = lambda bs=bs, variant=variant: self.forward_decode(bs, variant)
            return
        pool, stream = torch.cuda.graph_pool_handle(), torch.cuda.Stream(self.device)
        for bs, variant in self.capture_order():
            for _ in range(WARMUPS):
                torch.cuda.synchronize(self.device)
                with torch.cuda.stream(stream):
                    self.forward_decode(bs, variant)
                if profiler is not None:
                    profiler.step()
            torch.cuda.synchronize(self.device)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, stream=stream):
                self.forward_decode(bs, variant)
            if profiler is not None:
                profiler.step()
            self.graphs[(bs, variant)] = graph.replay

    def padded_batch_size(self, n: int) -> int:
        index = bisect.bisect_left(self.capture_bs, n)
        if n < 1 or index == len(self.capture_bs):
            raise ValueError(f"batch of {n} does not fit the captured sizes {self.capture_bs}")
        return self.capture_bs[index]

    @torch.inference_mode()
    def decode(
        self, input_ids: torch.Tensor, seq_lens: torch.Tensor, variant: Optional[str] = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay the graph that fits this batch: (next tokens, their logprobs — zeros without the variant)."""
        n = int(input_ids.shape[0])
        bs = self.padded_batch_size(n)
        self.input_ids[:n].copy_(input_ids)
        self.seq_lens[:n].copy_(seq_lens)
        self.slots[:n].copy_(torch.arange(n, device=self.device))
        self.input_ids[n:bs].zero_()
        self.seq_lens[n:bs].fill_(1)
        self.slots[n:bs].fill_(self.padding_slot)
        self.token_logprobs.zero_()
        self.graphs[(bs, variant)]()
        return self.next_tokens[:n].clone(), self.token_logprobs[:n].clone()
