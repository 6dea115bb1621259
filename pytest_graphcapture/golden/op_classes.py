"""Which ops a reviewer reads first: compute ops lead a failure, view and metadata ops are summed up.

A widened layer changes the shape of every op on its path, and most of those ops
are views (``as_strided``, ``t``, ``reshape``…) that launch nothing.  A failure
therefore lists its op lines by class — compute ops (:data:`COMPUTE_CLASSES`, in
that order: GEMMs first), then the other ops, then view and metadata ops
(:data:`VIEW_OPS`) — and collapses the view/metadata lines into one summary line
when anything else changed (they stay in the per-batch-size diff file).

Both lists are globs (fnmatch) over the op name, matched with and without its
namespace (``aten::mm`` and ``mm``); a project adds its own with the
``golden_view_ops`` and ``golden_compute_ops`` settings.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

#: Compute ops by class, in the order a failure lists them.
COMPUTE_CLASSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "gemm",
        (
            "mm",
            "addmm",
            "bmm",
            "baddbmm",
            "matmul",
            "linear",
            "addmv",
            "mv",
            "dot",
            "einsum",
            "_scaled_mm",
            "_int_mm",
            "*gemm*",
            "conv*",
            "_convolution",
        ),
    ),
    ("attention", ("*attention*", "*attn*", "_flash_*", "_efficient_*", "*sdpa*")),
    ("norm", ("*norm*",)),
    (
        "activation",
        (
            "silu",
            "silu_",
            "gelu",
            "gelu_",
            "relu",
            "relu_",
            "*softmax*",
            "sigmoid",
            "tanh",
            "*glu*",
            "mish",
            "hardswish",
        ),
    ),
    ("embedding", ("embedding*", "*rotary*", "rope*", "*_rope*")),
    (
        "collective",
        (
            "c10d::*",
            "_c10d_functional::*",
            "*all_reduce*",
            "*allreduce*",
            "*all_gather*",
            "*allgather*",
            "*reduce_scatter*",
            "*all_to_all*",
            "*alltoall*",
            "broadcast*",
        ),
    ),
    ("fused", ("triton_*", "*fused*", "*moe*")),
)

#: View and metadata ops: they change how a tensor is seen or allocate it, and launch no work.
VIEW_OPS: tuple[str, ...] = (
    "as_strided",
    "as_strided_",
    "view",
    "view_as",
    "_unsafe_view",
    "_reshape_alias",
    "reshape",
    "reshape_as",
    "flatten",
    "unflatten",
    "t",
    "t_",
    "transpose",
    "transpose_",
    "swapaxes",
    "movedim",
    "permute",
    "expand",
    "expand_as",
    "slice",
    "select",
    "narrow",
    "split",
    "split_with_sizes",
    "unsafe_split",
    "chunk",
    "unbind",
    "unsqueeze",
    "unsqueeze_",
    "squeeze",
    "squeeze_",
    "diagonal",
    "alias",
    "lift_fresh",
    "resolve_conj",
    "resolve_neg",
    "_conj",
    "_neg_view",
    "detach",
    "detach_",
    "empty",
    "empty_like",
    "empty_strided",
    "new_empty",
    "new_empty_strided",
    "resize_",
    "result_type",
    "size",
    "stride",
    "sym_*",
)

COMPUTE, OTHER, VIEW = 0, 1, 2


def _compile(patterns: Iterable[str]) -> re.Pattern:
    parts = [fnmatch.translate(p) for p in patterns if p]
    return re.compile("|".join(parts) if parts else r"(?!)")


def parse_globs(text: str) -> tuple[str, ...]:
    """Globs from a setting's text: separated by commas, spaces or newlines."""
    return tuple(p for p in re.split(r"[,\s]+", text or "") if p)


@dataclass(frozen=True)
class OpClasses:
    """The built-in op classes plus a project's own compute and view/metadata globs."""

    extra_view: tuple[str, ...] = ()
    extra_compute: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        compute = [(name, _compile(globs)) for name, globs in COMPUTE_CLASSES]
        # A project's own compute ops rank with the GEMMs: it named them because they matter.
        compute.insert(0, ("project", _compile(self.extra_compute)))
        object.__setattr__(self, "_compute", tuple(compute))
        object.__setattr__(self, "_project_view", _compile(self.extra_view))
        object.__setattr__(self, "_view", _compile(VIEW_OPS))

    def rank(self, name: str) -> tuple[int, int]:
        """``(tier, class)``: tier :data:`COMPUTE`, :data:`OTHER` or :data:`VIEW`; ``class`` orders compute ops.

        A project's own lists decide first (its compute ops, then its view ops), then the built-in ones.
        """
        names = (name, name.rsplit("::", 1)[-1])
        compute = self._compute  # type: ignore[attr-defined]
        if any(compute[0][1].fullmatch(n) for n in names):
            return COMPUTE, 0
        if any(self._project_view.fullmatch(n) for n in names):  # type: ignore[attr-defined]
            return VIEW, 0
        for index, (_, pattern) in enumerate(compute[1:], 1):
            if any(pattern.fullmatch(n) for n in names):
                return COMPUTE, index
        if any(self._view.fullmatch(n) for n in names):  # type: ignore[attr-defined]
            return VIEW, 0
        return OTHER, 0

    def is_view(self, name: str) -> bool:
        """A view/metadata op: its lines fold into one in a failure."""
        return self.rank(name)[0] == VIEW

    def kind(self, name: str) -> str:
        """The class an op is of: ``gemm``, ``attention``, … ``project`` (the settings), ``other`` or ``view``."""
        tier, index = self.rank(name)
        return self._compute[index][0] if tier == COMPUTE else ("view" if tier == VIEW else "other")  # type: ignore[attr-defined]


DEFAULT_CLASSES = OpClasses()


def op_classes(view: Sequence[str] = (), compute: Sequence[str] = ()) -> OpClasses:
    """The classes with a project's extra globs (the built-in :data:`DEFAULT_CLASSES` without any)."""
    if not view and not compute:
        return DEFAULT_CLASSES
    return OpClasses(tuple(view), tuple(compute))
