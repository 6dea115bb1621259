"""pytest-graphcapture: guard LLM inference engines against silent CUDA-graph regressions.

Public names are imported lazily, so loading the pytest plugin does not import torch until a capture runs.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "CaptureKey": "keys",
    "safe_name": "keys",
    "GraphRunner": "engine.runner",
    "default_batch_sizes": "engine.runner",
    "TinyDecodeRunner": "engine.decode_model",
    "DecoderConfig": "engine.decode_model",
    "Backend": "engine.backend",
    "CudaGraphBackend": "engine.backend",
    "EagerBackend": "engine.backend",
    "make_backend": "engine.backend",
    "CaptureSettings": "engine.capture",
    "capture_runner": "engine.capture",
    "CaptureResult": "result",
    "KeyResult": "result",
    "trace_dir": "naming",
    "Expect": "golden.expect",
    "GraphCaptureError": "errors",
    "CaptureError": "errors",
    "TraceFormatError": "errors",
    "GoldenError": "errors",
    "UsageError": "errors",
}

__all__ = sorted(_PUBLIC) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'pytest_graphcapture' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


def __dir__() -> list[str]:
    return __all__
