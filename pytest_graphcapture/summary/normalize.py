"""Kernel-name levels (exact, name, family) and ignore patterns: a golden changes only when the kernel set does."""

from __future__ import annotations

import functools
import re
from typing import Iterable, Optional, Sequence

import demangle as _library

from ..errors import UsageError

#: libiberty's spelling (``c++filt``, libstdc++'s ``__cxa_demangle``, so Kineto's), not LLVM's.
_STYLE = "gnu"


def _is_symbol(name: str) -> bool:
    return name.startswith("_Z") and len(name) > 2 and name.isascii() and "\x00" not in name


@functools.lru_cache(maxsize=16384)
def _demangle_symbol(name: str) -> Optional[str]:
    try:
        text = _library.demangle_strict(name, language="itanium", style=_STYLE)
    except _library.DemanglingError:
        return None
    return text if text != name else None


def demangle(name: str) -> Optional[str]:
    """The readable spelling of an Itanium symbol (``_Z…``); None when ``name`` is not one or it cannot be read."""
    return _demangle_symbol(name) if _is_symbol(name) else None


def mangled_base_name(name: str) -> Optional[str]:
    """The qualified name of a kernel entry point from its mangled prefix (``_ZN3foo3barI…`` → ``foo::bar``)."""
    if not name.startswith("_Z"):
        return None
    i = 2
    nested = name.startswith("_ZN")
    if nested:
        i = 3
        while i < len(name) and name[i] in "rVKRO":  # cv- and ref-qualifiers of a member: skipped
            i += 1
    parts = []
    while True:
        if name.startswith("L", i):  # internal linkage (a static kernel)
            i += 1
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        if j == i:
            break
        length = int(name[i:j])
        part = name[j : j + length]
        if len(part) != length or not length:
            return None
        parts.append("(anonymous namespace)" if part.startswith("_GLOBAL__N") else part)
        i = j + length
        if not nested:
            break
    following = name[i : i + 1]
    if not parts or not following or following == "B" or (nested and following not in "IE"):
        return None
    return "::".join(parts)


LEVELS = ("exact", "name", "family")

DEFAULT_LEVEL = "name"

GEMM_FAMILY = "GEMM"

_RANK = {level: i for i, level in enumerate(LEVELS)}


def check_level(level: str, *, what: str = "level") -> str:
    """Return ``level`` if valid, else raise UsageError naming the valid choices."""
    if level not in _RANK:
        raise UsageError(f"{what}: unknown normalization level {level!r}; use one of {', '.join(LEVELS)}")
    return level


def is_coarser_or_equal(target: str, source: str) -> bool:
    """True when names at ``source`` level can be normalized to ``target``."""
    return _RANK[check_level(target)] >= _RANK[check_level(source)]


_HEX = re.compile(r"0x[0-9a-fA-F]+")

_HASH_NUM = re.compile(r"#\d+\}")

_QUOTED_LAMBDA = re.compile(r"'(lambda|unnamed)\d+'")

_DOLLAR = re.compile(r"\$_\d+")

_ANON = re.compile(r"_GLOBAL__N_\d+|\{anonymous\}|`anonymous namespace'")

_ANON_NAMESPACE = "(anonymous namespace)"

_GENERATED = re.compile(r"^((?:triton|cpp|fused|cutedsl|helion)_\w*?[A-Za-z]\w*?)(?:_\d+)+$")

#: A CUTLASS kernel template (``cutlass::Kernel2<…>``) as its mangled prefix spells it.
_MANGLED_CUTLASS = re.compile(r"^_ZN7cutlass\d+Kernel\d*I")

_GEMM = re.compile(
    r"gemm|xmma|^(?:void )?nvjet|^(?:void )?Cijk_|cutlass_\d+_\w*tensorop|cutlass::Kernel\d*<|cublas|hipblaslt|tensile",
    re.IGNORECASE,
)


def _strip_kd(name: str) -> str:
    while name.endswith(".kd"):
        name = name[:-3]
    return name


def _exact_step(name: str) -> str:
    name = _strip_kd(name.strip())
    demangled = demangle(name)
    return demangled if demangled is not None else name


def _strip_params(name: str) -> str:
    """Remove trailing balanced ``(...)`` groups (the parameter list), keeping ``operator()``."""
    while True:
        stripped = name.rstrip()
        if stripped.endswith(" const"):
            stripped = stripped[: -len(" const")].rstrip()
        if not stripped.endswith(")"):
            return name
        depth = 0
        for pos in range(len(stripped) - 1, -1, -1):
            ch = stripped[pos]
            if ch == ")":
                depth += 1
            elif ch == "(":
                depth -= 1
                if depth == 0:
                    break
        else:
            return name
        head = stripped[:pos]
        if pos == 0 or head.endswith("operator") or not head.strip():
            return name
        if stripped[pos:] == _ANON_NAMESPACE:  # a namespace (``ns::(anonymous namespace)``), not parameters
            return name
        name = head.rstrip()


def _strip_templates(name: str) -> str:
    """Remove all balanced ``<...>`` groups (template arguments); keep ``operator<``-like names."""
    out = []
    depth = 0
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == "<":
            if depth == 0 and name[:i].endswith(("operator", "operator<")):
                out.append(ch)
            else:
                depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    if depth != 0:  # unbalanced: leave the name alone rather than guess
        return name
    return "".join(out).strip()


def _name_step(name: str) -> str:
    name = _exact_step(name)
    if name.startswith("_Z"):  # could not demangle: keep the mangled spelling
        return name
    name = _strip_params(name)
    name = _HEX.sub("0x_", name)
    name = _HASH_NUM.sub("#?}", name)
    name = _QUOTED_LAMBDA.sub(r"'\1'", name)
    name = _DOLLAR.sub("$_", name)
    name = _ANON.sub(_ANON_NAMESPACE, name)
    match = _GENERATED.match(name)
    if match:
        name = match.group(1)
    return name


def _family_step(name: str) -> str:
    name = _name_step(name)
    if name.startswith("_Z"):  # not demangled: the family is read from the mangled prefix
        if _MANGLED_CUTLASS.match(name):
            return GEMM_FAMILY
        base = mangled_base_name(name)
        name = base if base else name
    if _GEMM.search(name):
        return GEMM_FAMILY
    stripped = _strip_templates(name)
    if stripped.startswith("void "):
        stripped = stripped[5:].lstrip()
    return stripped or name


_STEPS = {"exact": _exact_step, "name": _name_step, "family": _family_step}

_COMPILE_ORDER = (
    (re.compile(r"^(Torch-Compiled Region): \d+/\d+(?:_\d+)?$"), r"\1"),
    (re.compile(r"^(## Call CompiledFxGraph) \w+ (##)$"), r"\1 \2"),
    (re.compile(r"\[\d+/\d+(?:_\d+)?\]"), "[?/?]"),
)


def normalize_op_name(name: str) -> str:
    """``name`` without identifiers that number compilations in capture order (summary op names)."""
    if "/" not in name and "CompiledFxGraph" not in name:
        return name  # the common case: an aten op, no compile ids
    for pattern, replacement in _COMPILE_ORDER:
        name = pattern.sub(replacement, name)
    return name


def normalize_kernel_name(name: str, level: str = DEFAULT_LEVEL) -> str:
    """Normalize one kernel name to ``level`` (``exact``, ``name`` or ``family``); idempotent."""
    step = _STEPS[check_level(level)]
    current = name
    for _ in range(16):
        following = step(current)
        if following == current:
            return current
        current = following
    return current


#: A memset's one entry name, whatever the profiler mode shows: Kineto's ``Memset (Device)``, torch 2.15 Cuspy's
#: ``Memset``, a capture window's ``cudaMemsetAsync``, CUPTI instrumentation mode's kernel ``memset32``.
MEMSET = "Memset"
#: The driver's memset as an instrumented kernel: the whole name only, so no user kernel (``fused_memset_x``) is taken.
_MEMSET_KERNEL = re.compile(r"memset\d*")


def gpu_work(kind: str, name: str) -> tuple[str, str]:
    """``(kind, name)`` of a GPU record or entry, every memset form as ``("memset", MEMSET)``: goldens hold one."""
    if kind == "memset" or (kind == "kernel" and name.startswith("memset") and _MEMSET_KERNEL.fullmatch(name)):
        return "memset", MEMSET
    return kind, name


def compile_patterns(patterns: Iterable[str], *, what: str = "ignore pattern") -> list["re.Pattern[str]"]:
    """Compile regular expressions; raise UsageError naming the bad pattern."""
    compiled = []
    for pattern in patterns:
        if isinstance(pattern, re.Pattern):
            compiled.append(pattern)
            continue
        try:
            compiled.append(re.compile(pattern))
        except re.error as exc:
            raise UsageError(f"{what} {pattern!r} is not a valid regular expression: {exc}") from None
    return compiled


def matches_any(name: str, patterns: Sequence["re.Pattern[str]"]) -> bool:
    """True when any compiled pattern is found (``re.search``) in ``name``."""
    return any(p.search(name) for p in patterns)
