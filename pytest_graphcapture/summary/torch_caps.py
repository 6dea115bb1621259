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
from typing import Any


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
