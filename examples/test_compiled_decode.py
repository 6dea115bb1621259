"""A ``torch.compile``d decode runner, as engines run their model with torch.compile enabled.

Dynamo numbers compilations in the order they happen (``Torch-Compiled Region: 0/2``);
the summary drops those numbers, so each batch size's golden holds only its own graph:
adding a batch size, or capturing in another order, leaves the other goldens as they are.
``dynamic=False`` compiles one static graph per batch size, as CUDA-graph runners do.

Inductor compiles C++ on CPU: without a compiler the test is skipped, saying so.
"""

import os
import shutil

import pytest
import torch

from pytest_graphcapture import DecoderConfig, TinyDecodeRunner
from pytest_graphcapture.plugin import graph_capture_config

# Importing inductor touches torch.jit.script_method, which torch itself deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")


class CompiledDecodeRunner(TinyDecodeRunner):
    """The embedded decoder with its model behind ``torch.compile`` (inductor)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.model = torch.compile(self.model, dynamic=False)


def needs_cpp_compiler(device: torch.device) -> None:
    """Skip with what to install when inductor has no C++ compiler to build CPU kernels with."""
    compiler = os.environ.get("CXX", "g++")
    if device.type == "cpu" and shutil.which(compiler) is None:
        pytest.skip(
            f"torch.compile (inductor) on CPU needs a C++ compiler; {compiler} not found: "
            "install one (apt-get install g++) or point CXX at it"
        )


@pytest.fixture
def compiled_runner(request):
    device = torch.device(graph_capture_config(request.config).device)
    needs_cpp_compiler(device)
    return CompiledDecodeRunner([1, 2], device=device, config=DecoderConfig(num_layers=1))


def test_compiled_decode_graphs_match_goldens(graph_capture, golden, compiled_runner):
    golden.check(graph_capture(compiled_runner))
