"""Kernel-symbol demangling that reads the same on every host, spelled as Kineto and binutils' ``c++filt`` print.

Why a library and not the C++ runtime's ``__cxa_demangle``: the runtime's reading depends on its
version (GCC 12's libstdc++ leaves a bf16 ``DF16b`` kernel mangled, GCC 13's reads it), so a golden
written on one machine would fail on another with a kernel change that is no change.  The
`demangle <https://pypi.org/project/demangle/>`_ package is pure Python (one wheel, no native
code, no runtime to find), so a trace gives the same names everywhere; its ``gnu`` style spells
names as libiberty (``c++filt``, libstdc++) does: ``char const*``, ``> >``, ``1ul``,
``(anonymous namespace)``, ``{lambda(float)#1}``.

Only a whole Itanium symbol (``_Z…``) is demangled; anything else (an ``extern "C"`` kernel,
a name the profiler already demangled, a mangled *type* such as ``i``) is a name, kept as
recorded.  A symbol the demangler cannot read is kept too: :func:`demangle` returns None.

:func:`mangled_base_name` reads the qualified name of a kernel entry point from the source
names of a mangled prefix, which needs no demangler: the ``family`` level then names a symbol
that cannot be read by the family its demangled name has.
"""

from __future__ import annotations

import functools
from typing import Optional

import demangle as _library

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
    """The readable spelling of an Itanium symbol (``_Z…``); None when ``name`` is not one or it cannot be read.

    Names recur across a graph and across batch sizes, so each is demangled once per process.
    """
    if not _is_symbol(name):
        return None
    return _demangle_symbol(name)


def mangled_base_name(name: str) -> Optional[str]:
    """The qualified name of a kernel entry point from its mangled prefix (``_ZN3foo3barI…`` → ``foo::bar``).

    A kernel is a namespace-scope function (CUDA and HIP have no member kernels), so its nested
    name is namespaces and the function's name, optionally followed by the function's template
    arguments (``I…``).  Only source names are read: a prefix that holds anything else
    (a substitution, an ABI tag, a cut-off name) gives None rather than a guess.
    """
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
