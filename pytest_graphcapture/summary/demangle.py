"""Kernel-symbol demangling by the C++ runtime's ``__cxa_demangle``, the demangler the profiler uses.

Why the runtime's own: the kernel names a profiler records come from ``__cxa_demangle``
(Kineto and ``c10::demangle`` call it; binutils' ``c++filt`` is built from the same libiberty
code as libstdc++'s), so a symbol demangled here reads exactly as the profiler prints it, and a
graph dump's mangled kernel matches the replay's demangled one.  The runtime is the process's
own (reached through :mod:`ctypes`, no dependency, no subprocess): libstdc++ on Linux (the one
torch loaded, when it did), libc++/libc++abi on macOS and BSDs.

Only a whole Itanium symbol (``_Z…``) is demangled; anything else (an ``extern "C"`` kernel,
a name the profiler already demangled, a mangled *type* such as ``i``) is a name, kept as
recorded.  A symbol the runtime cannot read (status != 0) is kept too: :func:`demangle` returns
None.  Where the process has no ``__cxa_demangle`` at all, that is said once (a
:class:`NoDemanglerWarning`) and every symbol stays mangled; nothing is guessed.

:func:`mangled_base_name` reads the qualified name of a kernel entry point from the source
names of a mangled prefix, which needs no demangler: the ``family`` level then names a symbol
the runtime cannot read by the family its demangled name has.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import sys
import threading
import warnings
from typing import Callable, Iterator, Optional


class NoDemanglerWarning(UserWarning):
    """This process has no C++ runtime ``__cxa_demangle``: mangled kernel names stay mangled."""


NO_DEMANGLER = (
    "pytest-graphcapture: no C++ runtime demangler (__cxa_demangle) in this process, libstdc++, libc++ "
    "or libc++abi, so mangled kernel names (_Z…) are kept as recorded at the exact and name levels "
    "(family still reads their qualified names); goldens written here then spell those kernels "
    "mangled and differ from goldens written where a C++ runtime is installed"
)

#: Sonames of the C++ runtimes.  ``dlopen`` of a soname a library of the process already loaded
#: (torch loads libstdc++) returns that library, so the process's own runtime wins.
_SONAMES = {
    "darwin": ("libc++abi.dylib", "/usr/lib/libc++abi.dylib", "libc++.1.dylib"),
}.get(sys.platform, ("libstdc++.so.6", "libc++.so.1", "libc++abi.so.1"))

_Demangler = Callable[[str], Optional[str]]
_lock = threading.Lock()
_loaded: Optional[tuple[Optional[_Demangler], Optional[str]]] = None
_said_missing = False


def _candidate_libraries() -> Iterator[Optional[str]]:
    """Where ``__cxa_demangle`` may be, in order: the process's own symbols, runtime sonames, the linker's search."""
    yield None  # symbols already loaded into the global scope (a C++ host, a static runtime)
    yield from _SONAMES
    for name in ("stdc++", "c++", "c++abi"):
        path = ctypes.util.find_library(name)
        if path:
            yield path


def _bind(library: Optional[str]) -> Optional[_Demangler]:
    """A demangling function over ``__cxa_demangle`` of ``library`` (None: the process), or None."""
    try:
        cxa = ctypes.CDLL(library).__cxa_demangle
        free = ctypes.CDLL(None).free
    except (OSError, AttributeError, TypeError):
        return None
    cxa.restype = ctypes.c_void_p  # a malloc'd buffer we free, not a Python bytes copy
    cxa.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_int))
    free.restype = None
    free.argtypes = (ctypes.c_void_p,)

    def run(symbol: str) -> Optional[str]:
        status = ctypes.c_int(-1)
        buffer = cxa(symbol.encode("ascii"), None, None, ctypes.byref(status))
        if not buffer:
            return None
        try:
            text = ctypes.string_at(buffer)
        finally:
            free(buffer)
        return text.decode("utf-8", "replace") if status.value == 0 else None

    return run


def _runtime() -> Optional[_Demangler]:
    """The process's ``__cxa_demangle``, looked up once."""
    global _loaded
    if _loaded is None:
        with _lock:
            if _loaded is None:
                found: tuple[Optional[_Demangler], Optional[str]] = (None, None)
                for library in _candidate_libraries():
                    bound = _bind(library)
                    if bound is not None:
                        found = (bound, library or "the process")
                        break
                _loaded = found
    return _loaded[0]


def _runtime_name() -> Optional[str]:
    """Which library demangles (a soname or path; ``the process`` for its own symbols), None without one."""
    _runtime()
    assert _loaded is not None
    return _loaded[1]


def _reset() -> None:
    """Forget the runtime found and the names demangled (tests swap the runtime)."""
    global _loaded, _said_missing
    with _lock:
        _loaded = None
        _said_missing = False
    _demangle_symbol.cache_clear()


def _is_symbol(name: str) -> bool:
    return name.startswith("_Z") and len(name) > 2 and name.isascii() and "\x00" not in name


@functools.lru_cache(maxsize=16384)
def _demangle_symbol(name: str) -> Optional[str]:
    run = _runtime()
    if run is None:
        _say_missing()
        return None
    return run(name)


def _say_missing() -> None:
    global _said_missing
    if not _said_missing:
        _said_missing = True
        warnings.warn(NO_DEMANGLER, NoDemanglerWarning, stacklevel=4)


def demangle(name: str) -> Optional[str]:
    """The C++ runtime's reading of an Itanium symbol (``_Z…``); None when ``name`` is not one or it cannot be read.

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
