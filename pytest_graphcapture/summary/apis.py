"""Which runtime calls a summary reads, and what each one is: launch, copy, fill, capture begin/end, graph launch.

The CUDA, driver and HIP API names that launch kernels, copy or fill memory, begin
or end a stream capture and launch a graph, with CUPTI's version suffixes
(``_v7000``, ``_ptsz``) dropped; and the trace categories of runtime calls and GPU
events.  :func:`classify_runtime` is the one place a runtime call name is sorted.
"""

from __future__ import annotations

import re

KERNEL_LAUNCH_APIS = frozenset(
    {
        "cudaLaunchKernel",
        "cudaLaunchKernelExC",
        "cudaLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "cudaLaunchCooperativeKernelMultiDevice",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cuLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
        "hipExtLaunchKernel",
        "hipLaunchCooperativeKernel",
        "hipModuleLaunchCooperativeKernel",
        "hipLaunchKernelExC",
        "hipExtLaunchKernelGGL",
        "hipHccModuleLaunchKernel",
    }
)

_MEMCPY_API = re.compile(r"^(?:cuda|cu|hip)Memcpy\w*Async$|^hipMemcpyWithStream$")

_MEMSET_API = re.compile(r"^(?:cuda|cu|hip)Memset\w*Async$")

_API_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")

_BEGIN_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamBeginCapture")

_END_CAPTURE = re.compile(r"^(?:cuda|cu|hip)StreamEndCapture")

_GRAPH_LAUNCH = re.compile(r"^(?:cuda|cu|hip)GraphLaunch(?:_v\d+|_ptsz|_spt)*$")

_RUNTIME_CATS = frozenset({"cuda_runtime", "cuda_driver", "hip_runtime", "hip_driver"})

_GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}

_INTERESTING_RUNTIME = re.compile(
    r"^(?:cuda|cu|hip)(?:Launch|ExtLaunch|ModuleLaunch|ExtModuleLaunch|HccModuleLaunch|"
    r"Memcpy|Memset|StreamBeginCapture|StreamEndCapture|GraphLaunch)"
)

_SKIP = ("skip", None)


def api_base(name: str) -> str:
    return _API_SUFFIX.sub("", name)


def classify_runtime(name: str) -> tuple:
    """(role, base API) of a runtime call name; role ``skip`` for calls a summary ignores."""
    if not _INTERESTING_RUNTIME.match(name):
        return _SKIP
    if _BEGIN_CAPTURE.match(name):
        return ("begin", None)
    if _END_CAPTURE.match(name):
        return ("end", None)
    if _GRAPH_LAUNCH.match(name):
        return ("graph", None)
    api = api_base(name)
    if api in KERNEL_LAUNCH_APIS:
        return ("kernel", api)
    if _MEMCPY_API.match(api):
        return ("memcpy", api)
    if _MEMSET_API.match(api):
        return ("memset", api)
    return _SKIP
