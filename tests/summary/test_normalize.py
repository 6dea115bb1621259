"""Kernel-name normalization levels: what each level keeps, and idempotence."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pytest_graphcapture.errors import UsageError
from pytest_graphcapture.summary.normalize import (
    GEMM_FAMILY,
    LEVELS,
    check_level,
    compile_patterns,
    matches_any,
    normalize_kernel_name,
    normalize_op_name,
)

AITER = "_ZN5aiter24add_rmsnorm_quant_kernelIDF16bDF16bLi256ELi16ELb0ELb0ELb1ELi1EEEvPT0_PT_PfS4_S4_S4_diiiiiiib"
# sglang's ROCm activation kernel (C++20 ``Tn``, which binutils 2.40 does not read); its family is its base name.
SGL = "_ZN7sgl_hip10activation18act_and_mul_kernelI14__hip_bfloat16TnPFT_RKS3_EXadL_Z4siluIS2_ES3_S5_EEEEvPS3_PS4_i"
#: A symbol cut inside its template arguments: no demangler reads it.
UNREADABLE = SGL[:60]
FILL = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIlEESt5arrayIPcLm1EEEEviT0_T1_"
ELEMENTWISE = (
    "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16tofloat32_copy_kernel_cuda"
    "(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, std::array<char*, 2ul> >(int, "
    "at::native::bfloat16tofloat32_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#1}, "
    "std::array<char*, 2ul>)"
)


def test_exact_level() -> None:
    assert normalize_kernel_name("my_kernel.kd", "exact") == "my_kernel"
    assert normalize_kernel_name("_Z3fooi.kd", "exact") == "foo(int)"
    assert normalize_kernel_name(ELEMENTWISE, "exact") == ELEMENTWISE
    assert normalize_kernel_name(UNREADABLE, "exact") == UNREADABLE  # not demangled: kept as recorded


def test_name_level() -> None:
    name = normalize_kernel_name(ELEMENTWISE, "name")
    assert name == (
        "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16tofloat32_copy_kernel_cuda"
        "(at::TensorIteratorBase&)::{lambda(c10::BFloat16)#?}, std::array<char*, 2ul> >"
    )
    assert normalize_kernel_name("kern(void*) [0x7f3a9c]", "name") == "kern(void*) [0x_]"
    assert normalize_kernel_name("void k<0x7f3a9c>(int)", "name") == "void k<0x_>"
    assert normalize_kernel_name("triton_poi_fused_add_mul_3", "name") == "triton_poi_fused_add_mul"
    assert normalize_kernel_name("triton_red_fused__to_copy_12_0", "name") == "triton_red_fused__to_copy"
    assert normalize_kernel_name("ns::_GLOBAL__N_1::k(int)", "name") == "ns::(anonymous namespace)::k"
    assert normalize_kernel_name("f<$_12>('lambda3'(int))", "name") == "f<$_>"
    assert normalize_kernel_name("S::operator()(int) const", "name") == "S::operator()"
    assert normalize_kernel_name(UNREADABLE, "name") == UNREADABLE
    assert normalize_kernel_name(FILL, "name").endswith("std::array<char*, 1ul> >")


@pytest.mark.parametrize(
    "kernel",
    [
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn",
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>(Params)",
        "nvjet_tst_64x8_64x16_4x1_v_bz_TNN",
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT64x32x256_MI16x16x1_SN_LDSB1",
        "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(Params)",
    ],
)
def test_family_folds_vendor_gemms(kernel: str) -> None:
    assert normalize_kernel_name(kernel, "family") == GEMM_FAMILY


def test_family_level() -> None:
    assert normalize_kernel_name(ELEMENTWISE, "family") == "at::native::vectorized_elementwise_kernel"
    assert normalize_kernel_name(AITER, "family") == "aiter::add_rmsnorm_quant_kernel"
    assert normalize_kernel_name(SGL, "family") == "sgl_hip::activation::act_and_mul_kernel"
    assert normalize_kernel_name(UNREADABLE, "family") == "sgl_hip::activation::act_and_mul_kernel"
    assert (
        normalize_kernel_name("void flash_fwd_kernel<Flash_kernel_traits<128> >(Params)", "family")
        == "flash_fwd_kernel"
    )
    # an aten elementwise kernel is not a GEMM even though it computes one element of something
    assert normalize_kernel_name("void at::native::reduce_kernel<512, 1>(R)", "family") == "at::native::reduce_kernel"


def test_levels_are_ordered_refinements() -> None:
    for name in (ELEMENTWISE, AITER, SGL, UNREADABLE, FILL, "triton_poi_fused_0", "Cijk_foo"):
        exact = normalize_kernel_name(name, "exact")
        assert normalize_kernel_name(exact, "name") == normalize_kernel_name(name, "name")
        assert normalize_kernel_name(normalize_kernel_name(name, "name"), "family") == normalize_kernel_name(
            name, "family"
        )


_PIECES = st.sampled_from(
    [
        "void ",
        "at::",
        "native::",
        "kernel",
        "<",
        ">",
        "(",
        ")",
        ", ",
        "int",
        "0x1f",
        "0xZ",
        "#3}",
        "{lambda(",
        "'lambda2'",
        "$_7",
        "_GLOBAL__N_1",
        "_Z",
        "N",
        "E",
        "3foo",
        "I",
        "i",
        "Li4E",
        ".kd",
        "triton_poi_",
        "_1",
        "_22",
        "gemm",
        "Cijk_",
        " const",
        "operator",
        "::",
        " ",
        "S_",
        "T_",
        "v",
    ]
)
_KERNELISH = st.lists(_PIECES, max_size=14).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_KERNELISH, st.text(max_size=40)), st.sampled_from(LEVELS))
def test_normalizing_twice_equals_once(name: str, level: str) -> None:
    once = normalize_kernel_name(name, level)
    assert normalize_kernel_name(once, level) == once


@settings(max_examples=200, deadline=None)
@given(_KERNELISH)
@example("void _GLOBAL__N_1")
@example("ns::{anonymous}")
def test_coarser_level_of_finer_result_is_stable(name: str) -> None:
    family = normalize_kernel_name(name, "family")
    assert normalize_kernel_name(normalize_kernel_name(name, "name"), "family") == family


# Regression: a trailing ``(anonymous namespace)`` was taken for a parameter list once
# ``_GLOBAL__N_1`` / ``{anonymous}`` had been rewritten to it, so ``name`` lost the namespace
# (``'void _GLOBAL__N_1'`` → ``'void'``) while ``family`` of the same name kept it.
@pytest.mark.parametrize(
    "recorded, name, family",
    [
        ("void _GLOBAL__N_1", "void (anonymous namespace)", "(anonymous namespace)"),
        ("void {anonymous}", "void (anonymous namespace)", "(anonymous namespace)"),
        ("ns::_GLOBAL__N_1", "ns::(anonymous namespace)", "ns::(anonymous namespace)"),
        ("void ns::(anonymous namespace)", "void ns::(anonymous namespace)", "ns::(anonymous namespace)"),
        ("void ns::_GLOBAL__N_1::k(int)", "void ns::(anonymous namespace)::k", "ns::(anonymous namespace)::k"),
        ("void k((anonymous namespace)::T)", "void k", "k"),
    ],
)
def test_anonymous_namespace_reads_the_same_at_every_level(recorded: str, name: str, family: str) -> None:
    assert normalize_kernel_name(recorded, "name") == name
    assert normalize_kernel_name(recorded, "family") == family
    assert normalize_kernel_name(name, "family") == family


def test_patterns_and_levels() -> None:
    patterns = compile_patterns([r"^Memset", "fill"])
    assert matches_any("Memset (Device)", patterns)
    assert matches_any("void at::native::FillFunctor_fill", patterns)
    assert not matches_any("gemm", patterns)
    with pytest.raises(UsageError, match=r"\[unclosed"):
        compile_patterns(["[unclosed"], what="kernel ignore pattern")
    assert check_level("family") == "family"
    with pytest.raises(UsageError, match="exact, name, family"):
        check_level("fuzzy")


@pytest.mark.parametrize(
    "recorded, kept",
    [
        ("Torch-Compiled Region: 0/2", "Torch-Compiled Region"),
        ("Torch-Compiled Region: 3/0_1", "Torch-Compiled Region"),
        (
            "## Call CompiledFxGraph f5sjvbnutb5oz6kzksdae46riv2nrwb7dhuuwxnu573p3xennopz ##",
            "## Call CompiledFxGraph ##",
        ),
        ("CompiledFunction [1/0]", "CompiledFunction [?/?]"),
        ("aten::mm", "aten::mm"),
        ("aten::div", "aten::div"),
    ],
)
def test_op_names_lose_compile_order_ids(recorded: str, kept: str) -> None:
    assert normalize_op_name(recorded) == kept
