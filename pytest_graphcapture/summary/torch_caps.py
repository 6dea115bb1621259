"""What the running torch build offers the plugin: the one table of version-dependent profiler behaviour.

Torch releases differ in what their profiler hands back: the Kineto events of 2.13 say what they
are (``activity_type()``), give the shapes of list arguments (``structured_input_shapes()``) and
their metadata (``metadata_json()``); those of 2.8 have none of the three, those of 2.10 and 2.11
lack the first two, so there a live summary reads the cycle's Chrome trace instead
(docs/compatibility.md lists what each release probed has).  Every such difference the summary
and the engine depend on is a row of :data:`CAPABILITIES`, and is decided here, by probing the
objects themselves, never by comparing version strings: vendor builds backport and patch, and the
probe answers for the build that runs.  No torch import: the objects are passed in (a Kineto
event, the ``torch`` module), so the summary layer stays torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional


@dataclass(frozen=True)
class Capability:
    """One version-dependent thing the plugin uses: where it is probed, and what is done without it."""

    name: str
    #: The object and member probed (``_KinetoEvent.activity_type``).
    probe: str
    #: What the plugin does on builds without it.
    without: str


#: Every torch capability the plugin consults, in the order docs/compatibility.md lists them.
CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        "event kinds",
        "_KinetoEvent.activity_type",
        "a live summary reads the cycle's Chrome trace (its events' kinds are guessed from their names "
        "otherwise, which takes runtime calls and [memory] records for ops)",
    ),
    Capability(
        "list shapes",
        "_KinetoEvent.structured_input_shapes",
        "a live summary reads the cycle's Chrome trace (shapes() records [] for list arguments such as "
        "aten::cat's tensors)",
    ),
    Capability(
        "event metadata",
        "_KinetoEvent.metadata_json",
        "a live summary reads the cycle's Chrome trace, which carries kernels' grid, block and graph node ids",
    ),
    # With ``_capture_end_hook`` and ``_instantiate_hook`` beside it (:func:`graph_hooks`).
    Capability(
        "graph lifecycle hooks",
        "torch.cuda.graphs.register_graph_capture_start_hook",
        "the engine-loop gate observes captures by wrapping torch.cuda.CUDAGraph.capture_begin and capture_end "
        "for the capture function's duration, and reads no engine graph's nodes (its kernels come from the "
        "profiled replay)",
    ),
    # Probed on its payload (:func:`graph_data_has_launches`): each node's grid_dim, block_dim,
    # shared_mem_bytes and an edges list.
    Capability(
        "graph data with launch shapes",
        "CUDAGraph.get_graph_data",
        "a captured graph's nodes are read through cuda-bindings (engine/graph_readout.py), else its kernels "
        "come from the profiled replay",
    ),
    Capability(
        "driver version",
        "torch.cuda.driver_version",
        "the environment of a GPU capture names no driver version (informational only)",
    ),
)


@dataclass(frozen=True)
class EventCaps:
    """What one build's Kineto events answer (see :data:`CAPABILITIES`)."""

    activity_type: bool
    structured_input_shapes: bool
    metadata_json: bool

    @property
    def readable(self) -> bool:
        """Whether a live summary can be built from the events alone (else it reads the Chrome trace).

        All three are needed: without kinds runtime calls pass for ops, without list shapes
        ``aten::cat`` loses its inputs, without metadata kernels lose grid, block and graph node ids.
        """
        return self.activity_type and self.structured_input_shapes and self.metadata_json


def event_caps(event: Any) -> EventCaps:
    """The capabilities of Kineto events like ``event`` (probed on the instance, so wrappers answer too)."""
    return EventCaps(
        activity_type=callable(getattr(event, "activity_type", None)),
        structured_input_shapes=callable(getattr(event, "structured_input_shapes", None)),
        metadata_json=callable(getattr(event, "metadata_json", None)),
    )


def has_driver_version(torch: Any) -> bool:
    """Whether ``torch`` (the module) can report the GPU driver version (``torch.cuda.driver_version``)."""
    return callable(getattr(getattr(torch, "cuda", None), "driver_version", None))


#: The three global capture hooks the engine-loop gate registers, as ``torch.cuda.graphs`` names them.
GRAPH_HOOKS = (
    "register_graph_capture_start_hook",
    "register_graph_capture_end_hook",
    "register_graph_instantiate_hook",
)


def graph_hooks(torch: Any) -> Optional[tuple[Callable[..., Any], ...]]:
    """torch's registration functions of :data:`GRAPH_HOOKS` (start, end, instantiate), or None without all three.

    Probed on ``torch.cuda.graphs`` itself: where all three exist, every graph's capture
    (an engine's, inductor's, a library's) is seen without wrapping ``CUDAGraph``.
    """
    graphs = getattr(getattr(torch, "cuda", None), "graphs", None)
    found = tuple(getattr(graphs, name, None) for name in GRAPH_HOOKS)
    return found if all(callable(f) for f in found) else None  # type: ignore[return-value]


#: The fields a node of ``CUDAGraph.get_graph_data()`` must carry for its kernels to be read with launch shapes.
GRAPH_DATA_NODE_FIELDS = ("index", "node_type", "kernel_name", "grid_dim", "block_dim", "shared_mem_bytes")


def graph_data_has_launches(payload: Any) -> bool:
    """Whether a ``get_graph_data()`` payload is the form with launch shapes and edges (torch 2.15's).

    Probed on the payload, never on the version: the older form (torch 2.13/2.14) lists
    nodes with ``kernel_name`` and dependencies only, so its kernels would lose grid,
    block and shared memory and compare unequal to the same graph read another way.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("nodes"), list):
        return False
    if not isinstance(payload.get("edges"), list):
        return False
    return all(isinstance(n, dict) and all(f in n for f in GRAPH_DATA_NODE_FIELDS) for n in payload["nodes"])
