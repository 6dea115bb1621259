"""Kernel names are demangled the same on every host, spelled as the profiler (Kineto, ``c++filt``) prints them.

The oracle is binutils' ``c++filt`` (libiberty, the demangler libstdc++'s ``__cxa_demangle`` is
built from): the recorded expectations below are its output (binutils 2.40), and the tests that
walk every mangled symbol of the real traces and of the graph-dump fixtures ask it live.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from helpers import REPO_ROOT, real_traces_dir

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import summarize_trace_file, with_graph
from pytest_graphcapture.summary.dot import summarize_dot_file
from pytest_graphcapture.summary.graph import CapturedGraph, GraphNode, Launch
from pytest_graphcapture.summary.normalize import demangle, mangled_base_name, normalize_kernel_name
from pytest_graphcapture.summary.replay import graph_node_records
from pytest_graphcapture.summary.scan import kernel_entries, replay_kernels_from_events, summarize_events
from pytest_graphcapture.summary.tracefile import trace_blocks

DUMPS = REPO_ROOT / "tests" / "data" / "graph_dumps"
CXXFILT = shutil.which("c++filt")
needs_cxxfilt = pytest.mark.skipif(
    CXXFILT is None, reason="c++filt not found: install binutils (apt-get install binutils) to compare with it"
)

# ATen's index_select kernel, mangled by g++ from its declaration; a kernel's parameter list
# names template parameters (T_, T0_, T1_) of the kernel, not of the TensorInfo argument.
INDEX_SELECT = (
    "_ZN2at6native12_GLOBAL__N_121indexSelectLargeIndexIN3c108BFloat16EljLi2ELi2ELin2ELb1EEEvNS_4cuda6detail"
    "10TensorInfoIT_T1_EENS7_IKS8_S9_EENS7_IKT0_S9_EEiiS9_S9_l"
)
INDEX_SELECT_NAME = (
    "void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int, 2, 2, -2, "
    "true>(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, at::cuda::detail::TensorInfo<c10::BFloat16 "
    "const, unsigned int>, at::cuda::detail::TensorInfo<long const, unsigned int>, int, int, unsigned int, "
    "unsigned int, long)"
)
# The fused-dropout kernel of tests/data/graph_dumps/cuda_verbose_two_branch.dot.
DROPOUT = (
    "_ZN2at6native43_GLOBAL__N__50f1b6c4_10_Dropout_cu_0e96ed3824fused_dropout_kernel_vecIffjLi1ELi4EbEEvNS_4cuda6"
    "detail10TensorInfoIKT_T1_EENS5_IS6_S8_EENS5_IT4_S8_EES8_T0_NS_15PhiloxCudaStateE"
)
DROPOUT_NAME = (
    "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>"
    "(at::cuda::detail::TensorInfo<float const, unsigned int>, at::cuda::detail::TensorInfo<float, unsigned int>, "
    "at::cuda::detail::TensorInfo<bool, unsigned int>, unsigned int, float, at::PhiloxCudaState)"
)
# vLLM's activation kernel: its second template argument is the address of a function template's
# specialization (``XadL_Z…EE``), as g++ mangles
# ``template <typename T, T (*ACT_FN)(const T&), bool act_first> void act_and_mul_kernel(T*, const T*, int)``.
ACT_AND_MUL = "_ZN4vllm18act_and_mul_kernelIN3c104HalfEXadL_ZNS_11silu_kernelIS2_EET_RKS4_EELb1EEEvPS4_PS5_i"
ACT_AND_MUL_NAME = (
    "void vllm::act_and_mul_kernel<c10::Half, &(c10::Half vllm::silu_kernel<c10::Half>(c10::Half const&)), true>"
    "(c10::Half*, c10::Half const*, int)"
)
# sglang's ROCm activation kernel (real trace): a C++20 ``Tn`` template-parameter declaration,
# which binutils 2.40 and GCC 12's libstdc++ do not read (libiberty reads it from GCC 14 on).
SGL = "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i"
# Its reading in libiberty's conventions (the function address as c++filt prints ACT_AND_MUL's); c++filt 2.40
# cannot say, so this is the one recorded expectation no live c++filt here checks.
SGL_NAME = (
    "void sgl_hip::activation::act_and_mul_kernel<__hip_bfloat16, &(__hip_bfloat16 silu<__hip_bfloat16>"
    "(__hip_bfloat16 const&))>(__hip_bfloat16*, __hip_bfloat16 const*, int)"
)


@pytest.mark.parametrize(
    "mangled, expected",
    [
        (INDEX_SELECT, INDEX_SELECT_NAME),
        (DROPOUT, DROPOUT_NAME),
        (ACT_AND_MUL, ACT_AND_MUL_NAME),
        (
            "_ZN4vllm18act_and_mul_kernelIN3c108BFloat16EXadL_ZNS_11silu_kernelIS2_EET_RKS4_EELb0EEEvPS4_PS5_i",
            "void vllm::act_and_mul_kernel<c10::BFloat16, &(c10::BFloat16 vllm::silu_kernel<c10::BFloat16>"
            "(c10::BFloat16 const&)), false>(c10::BFloat16*, c10::BFloat16 const*, int)",
        ),
        ("_Z3fooi", "foo(int)"),
        ("_Z6squarePfS_i", "square(float*, float*, int)"),
        ("_ZNK3foo3barEv", "foo::bar() const"),
        ("_Z5helloPKcRSt6vectorIiSaIiEE", "hello(char const*, std::vector<int, std::allocator<int> >&)"),
        (
            "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIlEESt5arrayIPcLm1EEEEviT0_T1_",
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<long>, std::array<char*, 1ul> >"
            "(int, at::native::FillFunctor<long>, std::array<char*, 1ul>)",
        ),
        # template parameter packs (CK/aiter kernels)
        ("_ZN2ns3fooIJifEEEvDpT_", "void ns::foo<int, float>(int, float)"),
        ("_ZN2ck6kernelIJNS_4gemmILi128EEEfEEEvDpT_", "void ck::kernel<ck::gemm<128>, float>(ck::gemm<128>, float)"),
        ("_Z3barIJEEvDpT_", "void bar<>()"),
        ("_ZN5aiter6kernelIJiiEEEvPKfDpT_", "void aiter::kernel<int, int>(float const*, int, int)"),
        ("_ZN2ns3fooIJiEEEvDpRKT_", "void ns::foo<int>(int const&)"),
    ],
)
def test_demangles_as_cxxfilt_does(mangled: str, expected: str) -> None:
    assert demangle(mangled) == expected
    assert normalize_kernel_name(mangled, "exact") == expected
    assert normalize_kernel_name(mangled + ".kd", "exact") == expected  # a ROCm code-object symbol


# aiter's RMSNorm kernel (real ROCm trace): ``DF16b`` is ``std::bfloat16_t``, read by binutils 2.40
# and libstdc++ from GCC 13 on; GCC 12's runtime cannot read this symbol (and misreads a shorter
# one, ``_Z1fDF16b`` → ``f(bool _Accum)``), so a runtime's reading would depend on the host.
AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
AITER_NAME = (
    "void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 256, 16, false, false, true, 1>"
    "(std::bfloat16_t*, std::bfloat16_t*, float*, std::bfloat16_t*, std::bfloat16_t*, std::bfloat16_t*, "
    "double, int, int, int, int, int, int, int, bool)"
)


@pytest.mark.parametrize(
    "mangled, expected",
    [(AITER, AITER_NAME), ("_Z1fDF16b", "f(std::bfloat16_t)"), (SGL, SGL_NAME)],
)
def test_names_a_host_runtime_may_not_read_demangle_the_same_everywhere(mangled: str, expected: str) -> None:
    """No skip for an older C++ runtime: the reading does not come from the host's runtime."""
    assert demangle(mangled) == expected
    assert normalize_kernel_name(mangled, "exact") == expected
    assert normalize_kernel_name(mangled, "family") == mangled_base_name(mangled)


def test_a_bf16_kernel_reads_the_same_with_and_without_the_cxx_runtime_loaded() -> None:
    """A Python that never loaded a C++ runtime (no torch) demangles as this one, which did."""
    import torch  # noqa: F401  loads libstdc++ here, as in every pytest run of the plugin

    code = (
        "import sys; from pytest_graphcapture.summary.normalize import demangle; print(demangle(sys.argv[1])); "
        "print(any('libstdc++' in line or 'libc++' in line for line in open('/proc/self/maps')))"
    )
    if not Path("/proc/self/maps").exists():
        pytest.skip("the loaded libraries are read from /proc/self/maps, which this platform has not (Linux has)")
    done = subprocess.run([sys.executable, "-c", code, AITER], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [AITER_NAME, "False"]
    assert demangle(AITER) == AITER_NAME


def _cxxfilt(symbols: list[str]) -> dict[str, str]:
    """c++filt's reading of each symbol; a symbol it cannot read comes back unchanged."""
    assert CXXFILT is not None
    lines = subprocess.run([CXXFILT], input="\n".join(symbols) + "\n", capture_output=True, text=True, check=True)
    out = lines.stdout.splitlines()
    assert len(out) == len(symbols)
    return dict(zip(symbols, out))


def _assert_like_cxxfilt(symbols: set[str]) -> None:
    """Each symbol c++filt reads reads exactly as c++filt prints it; the others only where recorded above."""
    assert symbols
    oracle = _cxxfilt(sorted(symbols))
    ours = {symbol: demangle(symbol) or symbol for symbol in oracle}
    newer = {symbol for symbol in oracle if oracle[symbol] == symbol and ours[symbol] != symbol}
    assert newer <= {SGL}, f"read here, not by c++filt: {sorted(newer)}"
    assert {s: ours[s] for s in oracle if s not in newer} == {s: oracle[s] for s in oracle if s not in newer}
    assert {s: normalize_kernel_name(s, "exact") for s in oracle} == ours


_SYMBOL = re.compile(r"_Z[A-Za-z0-9_$]+")


@needs_cxxfilt
def test_every_mangled_symbol_of_the_graph_dump_fixtures_demangles_as_cxxfilt_does() -> None:
    symbols = {s for path in DUMPS.glob("*.dot") for s in _SYMBOL.findall(path.read_text(encoding="utf-8"))}
    assert DROPOUT in symbols
    _assert_like_cxxfilt(symbols)


_QUOTED_SYMBOL = re.compile(rb'"(_Z[^"\\]*)"')


def _trace_symbols(path: Path) -> set[str]:
    """Every JSON string of the trace that is a mangled symbol (any field), read in blocks."""
    found, tail = set(), b""
    for block in trace_blocks(path, limit=1 << 40):
        data = tail + block
        found.update(m.group(1).decode("ascii", "replace") for m in _QUOTED_SYMBOL.finditer(data))
        tail = data[-65536:]  # a symbol cut by a block boundary is found whole with the next block
    return found


def _real_traces() -> list[Path]:
    paths = sorted(real_traces_dir().glob("*.json.gz"))
    if not paths:
        pytest.skip(f"no real traces in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES to the shared real_traces")
    return paths


@needs_cxxfilt
def test_every_mangled_symbol_of_the_real_traces_demangles_as_cxxfilt_does() -> None:
    symbols = set().union(*map(_trace_symbols, _real_traces()))
    assert SGL in symbols and AITER in symbols
    _assert_like_cxxfilt(symbols)


def test_a_bf16_trace_summarizes_to_the_names_cxxfilt_gives() -> None:
    """The summary (what a golden holds) of the sglang MI300X capture names aiter's bf16 kernels demangled."""
    trace = real_traces_dir() / "tracelens_sglang_decode_capture__bs_32_rank0.json.gz"
    if not trace.exists():
        pytest.skip(f"real trace {trace.name} not found in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES")
    names = {k["name"] for k in summarize_trace_file(trace, key=CaptureKey("Decode", 32), level="exact").kernels}
    assert AITER_NAME in names and SGL_NAME in names
    assert not [name for name in names if name.startswith("_Z")]


def test_names_equal_the_profilers() -> None:
    """The H100 trace's kernel name is Kineto's ``__cxa_demangle`` of the symbol; ours is the same text."""
    trace = real_traces_dir() / "tracelens_h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    if not trace.exists():
        pytest.skip(f"real trace {trace.name} not found in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES")
    assert INDEX_SELECT_NAME.encode() in b"".join(trace_blocks(trace, limit=1 << 40))
    for level in ("exact", "name", "family"):
        assert normalize_kernel_name(INDEX_SELECT, level) == normalize_kernel_name(INDEX_SELECT_NAME, level)


def test_dump_summary_spells_kernels_as_the_profiler_does() -> None:
    kernels = summarize_dot_file(DUMPS / "cuda_verbose_two_branch.dot", level="exact").kernels
    assert DROPOUT_NAME in {k["name"] for k in kernels}
    name = summarize_dot_file(DUMPS / "cuda_verbose_two_branch.dot", level="name").kernels
    assert (
        "void at::native::(anonymous namespace)::fused_dropout_kernel_vec<float, float, unsigned int, 1, 4, bool>"
        in {k["name"] for k in name}
    )


@pytest.mark.parametrize("level", ["exact", "name"])
def test_a_graphs_mangled_kernels_equal_the_replays_demangled_ones(level: str) -> None:
    """The graph (a dump, or read in process) names kernels by symbol; the profiled replay by Kineto's demangling."""
    capture = summarize_trace_file(
        REPO_ROOT / "tests" / "data" / "cuda-sm90" / "TinyDecodeRunner_bs_1_rank0.json.gz",
        key=CaptureKey("TinyDecodeRunner", 1),
        level=level,
    )
    kinds = [kind for kind, _ in capture.launch_ops]
    symbols = [(INDEX_SELECT, INDEX_SELECT_NAME), (DROPOUT, DROPOUT_NAME), (ACT_AND_MUL, ACT_AND_MUL_NAME)]
    nodes, replay = [], []
    for i, kind in enumerate(kinds):
        if kind == "kernel":
            symbol, printed = symbols[i % len(symbols)]
            nodes.append(GraphNode(str(i), "kernel", symbol, Launch((8, 1, 1), (256, 1, 1), 0)))
            replay.append({"name": printed, "kind": "kernel"})
        else:
            nodes.append(GraphNode(str(i), kind, "DtoD" if kind == "memcpy" else ""))
            replay.append({"name": "DtoD" if kind == "memcpy" else "", "kind": kind})
    assert len(replay) > len(symbols)
    graph = CapturedGraph(nodes, [(i, i + 1) for i in range(len(nodes) - 1)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no KernelEvidenceWarning: the cross-check agrees
        result = with_graph(capture, graph, replay_kernels=replay)
    assert result.complete and result.incomplete_reason is None
    names = {k["name"] for k in result.kernels if k["kind"] == "kernel"}
    assert names == {normalize_kernel_name(printed, level) for _, printed in symbols}


@pytest.mark.parametrize("level", ["exact", "name"])
def test_one_mangled_kernel_reads_the_same_on_every_route(level: str) -> None:
    """The fused-dropout symbol as a capture window's launch (ROCm), a replay record left mangled or demangled by
    the profiler, a graph node read in process and a graph dump's node: one name in each summary."""

    def event(cat: str, name: str, ts: int, **args: object) -> dict:
        return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": 1, "args": args}

    window = [
        event("hip_runtime", "hipStreamBeginCapture", 1, correlation=1),
        event("hip_runtime", "hipLaunchKernel", 2, correlation=2, kernel=DROPOUT, grid=[8, 1, 1], block=[256, 1, 1]),
        event("hip_runtime", "hipStreamEndCapture", 3, correlation=3),
    ]
    replay = [event("cuda_runtime", "cudaGraphLaunch", 4, correlation=4)]
    replay += [event("kernel", name, 5 + i, correlation=4) for i, name in enumerate((DROPOUT, DROPOUT_NAME))]
    routes = {
        "capture window": summarize_events(window, key=CaptureKey("R", 1), platform="rocm-gfx942", level=level).kernels,
        "replay": kernel_entries(replay_kernels_from_events(replay), level),
        "readout": kernel_entries(graph_node_records(CapturedGraph([GraphNode("0", "kernel", DROPOUT)])), level),
        "dot": summarize_dot_file(DUMPS / "cuda_verbose_two_branch.dot", level=level).kernels,
    }
    expected = normalize_kernel_name(DROPOUT_NAME, level)
    assert {route: {k["name"] for k in kernels if "dropout" in k["name"]} for route, kernels in routes.items()} == {
        route: {expected} for route in routes
    }


def test_levels_read_a_function_address_template_argument() -> None:
    assert normalize_kernel_name(ACT_AND_MUL, "name") == (
        "void vllm::act_and_mul_kernel<c10::Half, &(c10::Half vllm::silu_kernel<c10::Half>(c10::Half const&)), true>"
    )
    assert normalize_kernel_name(ACT_AND_MUL, "family") == "vllm::act_and_mul_kernel"
    assert normalize_kernel_name(INDEX_SELECT, "family") == "at::native::(anonymous namespace)::indexSelectLargeIndex"


@pytest.mark.parametrize(
    "name",
    [
        "not_mangled",
        "i",  # an extern "C" kernel named like a type code is a name, not the type int
        "St6vectorIiSaIiEE",  # a mangled type, not a symbol
        "triton_poi_fused_add_0",
        "void at::native::reduce_kernel<512, 1>(R)",  # already demangled
        "_Z",
        "_ZN3foo",  # cut short
        "_Z3foo\u00e9",
        "_Z3fo\x00o",
    ],
)
def test_names_that_are_not_mangled_symbols_stay_as_recorded(name: str) -> None:
    assert demangle(name) is None
    assert normalize_kernel_name(name, "exact") == name.strip()


def test_a_name_that_cannot_be_read_stays_mangled_and_keeps_its_family() -> None:
    cut = SGL[:60]  # the symbol cut inside its template arguments: no demangler reads it
    assert demangle(cut) is None
    assert normalize_kernel_name(cut, "exact") == cut
    assert normalize_kernel_name(cut, "name") == cut
    # family reads the qualified name from the mangled prefix: the same family the demangled name has
    assert normalize_kernel_name(cut, "family") == "sgl_hip::activation::act_and_mul_kernel"
    assert normalize_kernel_name(SGL, "family") == "sgl_hip::activation::act_and_mul_kernel"


@pytest.mark.parametrize(
    "mangled, base",
    [
        (INDEX_SELECT, "at::native::(anonymous namespace)::indexSelectLargeIndex"),
        (DROPOUT, "at::native::(anonymous namespace)::fused_dropout_kernel_vec"),
        (ACT_AND_MUL, "vllm::act_and_mul_kernel"),
        ("_Z6kernelPf", "kernel"),
        ("_ZNK3foo3barEv", "foo::bar"),
        ("_ZL6kernelPf", "kernel"),  # internal linkage (a static kernel)
        ("_ZN2ns12_GLOBAL__N_1L6kernelEv", "ns::(anonymous namespace)::kernel"),
        ("_ZNSt6vectorIiSaIiEE9push_backERKi", None),  # a substitution in the prefix
        ("_ZN3foo3barB5cxx11Ev", None),  # an ABI tag
        ("_ZN3foo", None),
        ("foo", None),
    ],
)
def test_mangled_base_name_reads_only_what_the_prefix_says(mangled: str, base: str | None) -> None:
    assert mangled_base_name(mangled) == base
    if base is not None and demangle(mangled) is not None:
        assert normalize_kernel_name(mangled, "family") == base


@pytest.mark.parametrize(
    "mangled",
    [
        "_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm_256x128_8x4_nt_align1EEvNT_6ParamsE",
        "_ZN2ck27kernel_gemm_xdl_cshuffle_v3INS_28GridwiseGemm_xdl_cshuffle_v3I",  # cut short: unreadable anywhere
        "_Z32Cijk_Alik_Bljk_BBS_BH_MT64x32x256v",
    ],
)
def test_family_folds_gemms_whether_or_not_the_name_demangles(mangled: str) -> None:
    assert normalize_kernel_name(mangled, "family") == "GEMM"
