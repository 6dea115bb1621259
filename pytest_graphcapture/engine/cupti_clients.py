"""One CUPTI client per process: find another one before a capture profiles GPU kernels.

Only one CUPTI client can subscribe per process, and the torch profiler (Kineto) is one.
Another one present — and Kineto records no GPU activity: a profiled replay shows no
kernels, and a golden written from it would accept any later kernel set.  The clients
this knows, each probed without starting anything:

* a CUPTI injection library loaded through ``CUDA_INJECTION64_PATH`` (vLLM CI's kernel
  recorder is loaded this way; Nsight tools set it too);
* Triton's Proton with a session started (``triton.profiler.start``, which sets
  ``triton.profiler.flags``' ``profiling_on``), or a script run under the ``proton``
  command (``command_line``);
* torch's CUPTI-Python profiler backend (Cuspy, ``torch.profiler._cuspy``) holding a
  subscription — what ``torch.cuda.graph(enable_annotations=True,
  annotation_config={"backend": "cupti"})`` (or ``record_py_stacks=True``) brings up —
  probed with torch's own ``has_live_subscription()``, which creates nothing;
* the node-creation callbacks of that annotation backend registered
  (``torch.cuda._graph_node_callbacks``), which hold the subscription for a capture.

A bare ``cupti`` (cupti-python) import cannot be asked whether it subscribed without
subscribing, which would itself take CUPTI; it is named among the causes when a replay
then records nothing (:func:`suspected_clients`).  Modules are looked up in
``sys.modules`` only: nothing is imported, so nothing is initialised by the probe.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ..errors import GraphCaptureError

#: The environment variable through which CUDA loads a CUPTI injection library into the process.
INJECTION = "CUDA_INJECTION64_PATH"


@dataclass(frozen=True)
class CuptiClient:
    """Another CUPTI client in the process: what it is, and what to do about it."""

    name: str
    fix: str


class CuptiConflictError(GraphCaptureError):
    """Another CUPTI client is active where the gate's profiler must record GPU kernels; nothing is captured."""


def _proton_active(modules: Mapping[str, Any]) -> bool:
    flags_module = modules.get("triton.profiler.flags")
    if flags_module is None:
        return False
    flags = getattr(flags_module, "flags", flags_module)  # a flags object (newer Proton) or module globals
    return bool(getattr(flags, "profiling_on", False) or getattr(flags, "command_line", False))


def _cuspy_subscribed(modules: Mapping[str, Any]) -> bool:
    probe = getattr(modules.get("torch.profiler._cuspy.core"), "has_live_subscription", None)
    try:
        return bool(probe()) if callable(probe) else False
    except Exception:  # a probe that cannot answer names nothing
        return False


def _annotation_callbacks(modules: Mapping[str, Any]) -> bool:
    return getattr(modules.get("torch.cuda._graph_node_callbacks"), "_HANDLER", None) is not None


def active_clients(
    environ: Optional[Mapping[str, str]] = None, modules: Optional[Mapping[str, Any]] = None
) -> list[CuptiClient]:
    """The other CUPTI clients active in this process now (``environ`` and ``modules`` default to the process's)."""
    environ = os.environ if environ is None else environ
    modules = sys.modules if modules is None else modules
    found = []
    if environ.get(INJECTION):
        found.append(
            CuptiClient(
                f"a CUPTI injection library ({INJECTION}={environ[INJECTION]})",
                f"run the gate's tests without {INJECTION} (unset it for them; a kernel recorder loaded this way "
                f"is another CUPTI client)",
            )
        )
    if _proton_active(modules):
        found.append(
            CuptiClient(
                "Triton's Proton profiler (a triton.profiler session is active)",
                "call triton.profiler.finalize() before the capture, or run the gate without Proton",
            )
        )
    if _annotation_callbacks(modules):
        found.append(
            CuptiClient(
                "the cupti annotation backend of torch.cuda.graph(enable_annotations=True, "
                "annotation_config={'backend': 'cupti'})",
                "capture with annotation_config={'backend': 'edge_walk'} (or without annotations) under the gate",
            )
        )
    elif _cuspy_subscribed(modules):
        found.append(
            CuptiClient(
                "torch's CUPTI-Python profiler backend (torch.profiler._cuspy holds a CUPTI subscription; "
                "torch.cuda.graph(enable_annotations=True, annotation_config={'backend': 'cupti'}) and "
                "record_py_stacks=True bring it up)",
                "it keeps its subscription for the life of the process: capture in a process in which nothing "
                "brings it up (for a runner, @pytest.mark.graph_capture_isolated), with annotation_config="
                "{'backend': 'edge_walk'} where annotations are wanted",
            )
        )
    return found


def refuse_other_clients(what: str, environ: Optional[Mapping[str, str]] = None, modules: Any = None) -> None:
    """:class:`CuptiConflictError` naming the first other CUPTI client active, before ``what`` profiles GPU kernels."""
    clients = active_clients(environ, modules)
    if clients:
        client = clients[0]
        raise CuptiConflictError(
            f"{what}: another CUPTI client is active in this process: {client.name}; only one can subscribe per "
            f"process, so the torch profiler would record no GPU kernels and no golden could be trusted; "
            f"{client.fix}"
        )


def suspected_clients(environ: Optional[Mapping[str, str]] = None, modules: Any = None) -> list[str]:
    """What may have silenced the profiler: the active clients, and a cupti-python import (which cannot be asked)."""
    modules = sys.modules if modules is None else modules
    names = [client.name for client in active_clients(environ, modules)]
    if modules.get("cupti.cupti") is not None or modules.get("cupti") is not None:
        names.append("cupti-python is imported in this process (a subscriber it made holds CUPTI)")
    return names


__all__ = [
    "INJECTION",
    "CuptiClient",
    "CuptiConflictError",
    "active_clients",
    "refuse_other_clients",
    "suspected_clients",
]
