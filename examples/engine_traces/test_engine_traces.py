"""The gate over the capture traces engines write themselves: sglang's and vLLM's layouts.

``make_traces.py`` lays out the shared real sglang capture (an MI300X decode graph) the
way each engine writes its capture traces; in an engine's repo the CI job points the
same check at the folder the engine wrote (docs/engines/).  Goldens live under
``goldens/rocm-gfx942/engine_traces/...``; the platform comes from the traces.
"""

import pytest
from make_traces import build, source_trace


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    try:
        source = source_trace()
    except FileNotFoundError as exc:
        pytest.skip(f"{exc}: set GRAPH_CAPTURE_REAL_TRACES to the folder holding the shared real traces")
    folder = tmp_path_factory.mktemp("engine_traces")
    for layout in ("vllm", "sglang-single"):
        build(layout, folder / layout, sizes=(4, 2), piecewise=(4, 3), source=source)
    return folder


def test_vllm_capture_traces(golden, traces):
    # vLLM (capture_torch_profiler): one capture_{bs}_{mode} range per shape; PIECEWISE holds a graph per piece.
    golden.check_traces(traces / "vllm" / "capture_traces")


def test_sglang_single_capture_trace(golden, traces):
    # sglang (SGLANG_ENABLE_CUDA_GRAPH_CAPTURE_TRACE): one trace, its windows largest batch size first.
    golden.check_traces(traces / "sglang-single" / "graph_capture_profile", batch_sizes=[4, 2])
