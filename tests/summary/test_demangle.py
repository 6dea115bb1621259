"""Kernel names are demangled as the profiler demangles them: by the C++ runtime's ``__cxa_demangle``.

The oracle is binutils' ``c++filt`` (libiberty, the same demangler libstdc++'s ``__cxa_demangle``
is built from): the recorded expectations below are its output (binutils 2.40), and the tests
that walk every mangled symbol of the real traces and of the graph-dump fixtures ask it live.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
from helpers import REPO_ROOT, real_traces_dir

from pytest_graphcapture.keys import CaptureKey
from pytest_graphcapture.summary import demangle as demangle_module
from pytest_graphcapture.summary import summarize_trace_file, with_graph
from pytest_graphcapture.summary.demangle import NoDemanglerWarning, demangle, mangled_base_name
from pytest_graphcapture.summary.dot import summarize_dot_file
from pytest_graphcapture.summary.graph import CapturedGraph, GraphNode, Launch
from pytest_graphcapture.summary.normalize import normalize_kernel_name

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
# which binutils 2.40 and GCC 12's libstdc++ do not read.
SGL = "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i"


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
# one, ``_Z1fDF16b`` → ``f(bool _Accum)``): what the runtime says is what the profiler there prints.
AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
AITER_NAME = (
    "void aiter::add_rmsnorm_quant_kernel<std::bfloat16_t, std::bfloat16_t, 256, 16, false, false, true, 1>"
    "(std::bfloat16_t*, std::bfloat16_t*, float*, std::bfloat16_t*, std::bfloat16_t*, std::bfloat16_t*, "
    "double, int, int, int, int, int, int, int, bool)"
)


def test_demangles_bfloat16_as_cxxfilt_does_where_the_runtime_reads_it() -> None:
    # the family does not depend on whether the runtime reads the symbol
    assert normalize_kernel_name(AITER, "family") == "aiter::add_rmsnorm_quant_kernel"
    probe = demangle("_Z1fDF16b")
    if probe != "f(std::bfloat16_t)":
        pytest.skip(
            f"this process's C++ runtime ({demangle_module._runtime_name()}) does not read DF16b (std::bfloat16_t): "
            f"_Z1fDF16b reads {probe!r}, as this machine's profiler prints it; libstdc++ from GCC 13 on reads it: "
            "run on such a runtime to compare with c++filt"
        )
    assert demangle(AITER) == AITER_NAME
    assert normalize_kernel_name(AITER, "name").endswith("true, 1>")


def _cxxfilt(symbols: list[str]) -> dict[str, str]:
    """c++filt's reading of each symbol; a symbol it cannot read comes back unchanged."""
    assert CXXFILT is not None
    lines = subprocess.run([CXXFILT], input="\n".join(symbols) + "\n", capture_output=True, text=True, check=True)
    out = lines.stdout.splitlines()
    assert len(out) == len(symbols)
    return dict(zip(symbols, out))


def _assert_like_cxxfilt(symbols: set[str]) -> set[str]:
    """Each symbol the runtime reads reads as c++filt prints it; one it does not stays as recorded.

    Returns the symbols c++filt reads and this process's runtime does not (an older libiberty).
    """
    assert symbols
    oracle = _cxxfilt(sorted(symbols))
    read = {symbol: demangle(symbol) for symbol in oracle if demangle(symbol) is not None}
    assert read == {symbol: oracle[symbol] for symbol in read}
    unread = set(oracle) - set(read)
    assert {symbol: normalize_kernel_name(symbol, "exact") for symbol in unread} == {s: s for s in unread}
    return {symbol for symbol in unread if oracle[symbol] != symbol}


def _skip_if_runtime_older(newer: set[str]) -> None:
    if newer:
        version = subprocess.run([CXXFILT, "--version"], capture_output=True, text=True).stdout.splitlines()[:1]
        pytest.skip(
            f"{len(newer)} symbol(s) that {' '.join(version) or 'c++filt'} reads are not read by this process's C++ "
            f"runtime ({demangle_module._runtime_name()}), an older demangler: they stay mangled, as this machine's "
            f"profiler spells them (e.g. {min(newer)}); run on a newer runtime to compare them too"
        )


_SYMBOL = re.compile(r"_Z[A-Za-z0-9_$]+")


@needs_cxxfilt
def test_every_mangled_symbol_of_the_graph_dump_fixtures_demangles_as_cxxfilt_does() -> None:
    symbols = {s for path in DUMPS.glob("*.dot") for s in _SYMBOL.findall(path.read_text(encoding="utf-8"))}
    assert DROPOUT in symbols
    assert _assert_like_cxxfilt(symbols) == set()  # plain C++11 symbols: every runtime reads them


def _trace_kernel_names(path: Path) -> set[str]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        trace = json.load(handle)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = set()
    for event in events:
        names.add(event.get("name"))
        names.add((event.get("args") or {}).get("kernel"))  # ROCm launch events name their kernel
    return {name for name in names if isinstance(name, str)}


def _real_traces() -> list[Path]:
    paths = sorted(real_traces_dir().glob("*.json.gz"))
    if not paths:
        pytest.skip(f"no real traces in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES to the shared real_traces")
    return paths


@needs_cxxfilt
def test_every_mangled_symbol_of_the_real_traces_demangles_as_cxxfilt_does() -> None:
    symbols = {name for path in _real_traces() for name in _trace_kernel_names(path) if name.startswith("_Z")}
    assert SGL in symbols and AITER in symbols
    _skip_if_runtime_older(_assert_like_cxxfilt(symbols))


def test_names_equal_the_profilers() -> None:
    """The H100 trace's kernel name is Kineto's ``__cxa_demangle`` of the symbol; ours is the same text."""
    trace = real_traces_dir() / "tracelens_h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    if not trace.exists():
        pytest.skip(f"real trace {trace.name} not found in {real_traces_dir()}; set GRAPH_CAPTURE_REAL_TRACES")
    recorded = _trace_kernel_names(trace)
    assert INDEX_SELECT_NAME in recorded
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


def test_a_name_the_runtime_cannot_read_stays_mangled_and_keeps_its_family() -> None:
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


@pytest.fixture
def no_demangler(monkeypatch: pytest.MonkeyPatch):
    """A process with no C++ runtime demangler: every library the loader tries is absent."""
    monkeypatch.setattr(demangle_module, "_candidate_libraries", lambda: iter(["libno-such-runtime.so.0"]))
    demangle_module._reset()
    yield
    demangle_module._reset()


def test_without_a_platform_demangler_names_stay_mangled_and_it_is_said_once(no_demangler: None) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert demangle("triton_poi_fused_add_0") is None
        assert caught == []  # nothing to demangle, nothing said
        assert demangle(INDEX_SELECT) is None
        assert demangle(DROPOUT) is None
        assert normalize_kernel_name(ACT_AND_MUL, "exact") == ACT_AND_MUL
        assert normalize_kernel_name(ACT_AND_MUL, "name") == ACT_AND_MUL
        assert normalize_kernel_name(ACT_AND_MUL, "family") == "vllm::act_and_mul_kernel"
    said = [w for w in caught if issubclass(w.category, NoDemanglerWarning)]
    assert len(said) == 1
    message = str(said[0].message)
    assert "__cxa_demangle" in message and "mangled" in message and "libstdc++" in message


@pytest.mark.parametrize(
    "mangled",
    [
        "_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm_256x128_8x4_nt_align1EEvNT_6ParamsE",
        "_ZN2ck27kernel_gemm_xdl_cshuffle_v3INS_28GridwiseGemm_xdl_cshuffle_v3I",  # cut short: unreadable anywhere
        "_Z32Cijk_Alik_Bljk_BBS_BH_MT64x32x256v",
    ],
)
@pytest.mark.parametrize("runtime", ["present", "absent"])
def test_family_folds_gemms_whether_or_not_the_name_demangles(
    mangled: str, runtime: str, request: pytest.FixtureRequest
) -> None:
    if runtime == "absent":
        request.getfixturevalue("no_demangler")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoDemanglerWarning)
        assert normalize_kernel_name(mangled, "family") == "GEMM"


def _mapped_cxx_runtimes() -> set[str]:
    with open("/proc/self/maps", encoding="utf-8") as maps:
        paths = {line.split(maxsplit=5)[-1].strip() for line in maps if line.count(" ") >= 5}
    return {os.path.realpath(p) for p in paths if re.search(r"/lib(stdc\+\+|c\+\+(abi)?)\.so", p)}


def test_the_runtime_is_the_one_the_process_already_has() -> None:
    """With torch imported (as in every pytest run of the plugin), its libstdc++ demangles; no second one is loaded."""
    if not Path("/proc/self/maps").exists():
        pytest.skip("the loaded libraries are read from /proc/self/maps, which this platform has not (Linux has)")
    import torch  # noqa: F401  loads the C++ runtime the profiler uses

    before = _mapped_cxx_runtimes()
    assert before, "torch loaded no C++ runtime"
    demangle_module._reset()
    assert demangle("_Z3fooi") == "foo(int)"
    assert demangle_module._runtime_name() is not None
    assert _mapped_cxx_runtimes() == before
