"""A small best-effort Itanium C++ demangler for kernel symbols, with no dependency and no subprocess.

It covers what kernel symbols use: nested names, templates, literals,
substitutions, pointers/references/cv-qualifiers, builtin types incl.
``DF16b``/``Dh`` and template parameter packs (``J…E`` with ``Dp`` expansions,
common in CK/aiter kernels), spelled as binutils' ``c++filt`` spells them.  :func:`demangle` returns None for what it cannot read, and
:func:`mangled_base_name` then still reads the qualified base name from the
mangled prefix.
"""

from __future__ import annotations

import re
from typing import Optional

from ._itanium import _BUILTIN, _D_BUILTIN, _LITERAL_SUFFIX, _OPERATORS, _STD_SUBS


class _DemangleError(Exception):
    pass


class _Pack(str):
    """A template argument pack (``J…E``): reads as its elements joined, and keeps them for ``Dp`` expansion."""

    items: tuple = ()

    @classmethod
    def of(cls, items: list[str]) -> "_Pack":
        pack = cls(", ".join(i for i in items if i))
        pack.items = tuple(items)
        return pack


class _Demangler:
    """Recursive-descent parser for the subset of the Itanium C++ ABI kernels use."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.subs: list[str] = []
        self.template_args: list[str] = []
        #: Packs referenced inside the ``Dp`` pack expansion being read (None outside one).
        self.expanding: Optional[list] = None

    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def take(self, token: str) -> bool:
        if self.s.startswith(token, self.i):
            self.i += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.take(token):
            raise _DemangleError(f"expected {token!r} at {self.i}")

    def number(self) -> int:
        start = self.i
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        if start == self.i:
            raise _DemangleError("number expected")
        return int(self.s[start : self.i])

    def seq_id(self, terminator: str) -> int:
        if self.take(terminator):
            return 0
        start = self.i
        while self.i < len(self.s) and (self.s[self.i].isdigit() or self.s[self.i].isupper()):
            self.i += 1
        digits = self.s[start : self.i]
        self.expect(terminator)
        if not digits:
            raise _DemangleError("bad seq-id")
        value = 0
        for ch in digits:
            value = value * 36 + (int(ch) if ch.isdigit() else ord(ch) - 55)
        return value + 1

    # ---- top level
    def encoding(self) -> str:
        name, is_template, is_ctor = self.name()
        if self.i >= len(self.s) or self.peek() in ("E", "."):
            return name
        ret = ""
        if is_template and not is_ctor:
            ret = self.type() + " "
        params = self.bare_function_params()
        return f"{ret}{name}({params})"

    def bare_function_params(self) -> str:
        params = []
        while self.i < len(self.s) and self.peek() not in ("E", "."):
            param = self.type()
            if param:  # an expanded empty pack adds no parameter
                params.append(param)
        if params == ["void"]:
            return ""
        return ", ".join(params)

    # ---- names: return (text, ends with template args, is ctor/dtor)
    def name(self) -> tuple[str, bool, bool]:
        if self.peek() == "N":
            return self.nested_name()
        if self.peek() == "Z":
            return self.local_name()
        if self.take("St"):
            text = "std::" + self.unqualified_name()[0]
        elif self.peek() == "S":
            text = self.substitution()
            if self.peek() != "I":
                raise _DemangleError("unscoped substitution without template args")
        else:
            text = self.unqualified_name()[0]
        if self.peek() == "I":
            self.subs.append(text)
            args = self.template_args_list()
            self.template_args = args
            return text + _targs(args), True, False
        return text, False, False

    def local_name(self) -> tuple[str, bool, bool]:
        self.expect("Z")
        saved = self.template_args
        outer = self.encoding()
        self.template_args = saved
        self.expect("E")
        if self.take("s"):
            inner, is_template, is_ctor = "string literal", False, False
        else:
            inner, is_template, is_ctor = self.name()
        if self.take("_"):
            if self.take("_"):
                self.number()
                self.expect("_")
            else:
                self.number()
        return f"{outer}::{inner}", is_template, is_ctor

    def nested_name(self) -> tuple[str, bool, bool]:
        self.expect("N")
        quals = ""
        while self.peek() in ("r", "V", "K"):
            quals += self.s[self.i]
            self.i += 1
        self.take("R") or self.take("O")
        parts: list[str] = []
        is_template = False
        is_ctor = False
        last_name = ""
        while not self.take("E"):
            if self.i >= len(self.s):
                raise _DemangleError("unterminated nested name")
            ch = self.peek()
            if ch == "I":
                if not parts:
                    raise _DemangleError("template args without a name")
                args = self.template_args_list()
                self.template_args = args
                parts[-1] += _targs(args)
                is_template = True
                if self.peek() != "E":
                    self.subs.append("::".join(parts))
                continue
            if ch == "S" and self.peek(2) != "St":
                parts = [self.substitution()]
                is_template = False
                continue
            if self.take("St"):
                parts.append("std")
                continue
            if ch == "T":
                parts.append(self.template_param())
            elif ch == "D" and self.peek(2) in ("Dt", "DT"):
                raise _DemangleError("decltype prefix")
            else:
                text, is_ctor = self.unqualified_name(last_name)
                parts.append(text)
                last_name = text
            is_template = False
            if self.peek() != "E":
                self.subs.append("::".join(parts))
        if not parts:
            raise _DemangleError("empty nested name")
        return "::".join(parts), is_template, is_ctor

    def unqualified_name(self, enclosing: str = "") -> tuple[str, bool]:
        ch = self.peek()
        if ch.isdigit():
            length = self.number()
            text = self.s[self.i : self.i + length]
            if len(text) != length:
                raise _DemangleError("short source name")
            self.i += length
            if text.startswith("_GLOBAL__N"):
                text = "(anonymous namespace)"
            return text, False
        if ch in ("C", "D") and self.peek(2) in ("C1", "C2", "C3", "C4", "C5", "D0", "D1", "D2", "D4", "D5"):
            kind = self.s[self.i]
            self.i += 2
            base = re.sub(r"<.*>$", "", enclosing)
            return (base if kind == "C" else "~" + base), True
        if ch == "U" and self.peek(2) == "Ut":
            self.i += 2
            num = self.seq_id("_") + 1
            return f"{{unnamed type#{num}}}", False
        if ch == "U" and self.peek(2) == "Ul":
            self.i += 2
            params = self.bare_function_params()
            self.expect("E")
            num = self.seq_id("_") + 1
            return f"{{lambda({params})#{num}}}", False
        if ch == "L":
            self.i += 1
            return self.unqualified_name(enclosing)
        two = self.peek(2)
        if two in _OPERATORS:
            self.i += 2
            return "operator" + _OPERATORS[two], False
        if two == "cv":
            self.i += 2
            return "operator " + self.type(), False
        raise _DemangleError(f"unsupported name at {self.i}")

    def substitution(self) -> str:
        two = self.peek(2)
        if two in _STD_SUBS:
            self.i += 2
            return _STD_SUBS[two]
        self.expect("S")
        index = self.seq_id("_")
        if index >= len(self.subs):
            raise _DemangleError("substitution out of range")
        return self.subs[index]

    def template_param(self) -> str:
        self.expect("T")
        index = self.seq_id("_")
        if index >= len(self.template_args):
            raise _DemangleError("template parameter out of range")
        value = self.template_args[index]
        if isinstance(value, _Pack) and self.expanding is not None:
            self.expanding.append(value)
            return f"\x01{len(self.expanding) - 1}\x01"  # filled in per element by pack_expansion
        return value

    def template_args_list(self) -> list[str]:
        self.expect("I")
        args = []
        while not self.take("E"):
            if self.i >= len(self.s):
                raise _DemangleError("unterminated template args")
            args.append(self.template_arg())
        return args

    def template_arg(self) -> str:
        ch = self.peek()
        if ch == "L":
            return self.literal()
        if ch == "J":
            self.i += 1
            items = []
            while not self.take("E"):
                if self.i >= len(self.s):
                    raise _DemangleError("unterminated pack")
                items.append(self.template_arg())
            return _Pack.of(items)
        if ch == "X":
            raise _DemangleError("expression template argument")
        return self.type()

    def literal(self) -> str:
        self.expect("L")
        if self.take("_Z"):
            saved = self.template_args
            text = self.encoding()
            self.template_args = saved
            self.expect("E")
            return "&" + re.sub(r"\(.*\)$", "", text)
        type_code = self.peek()
        if type_code in _BUILTIN:
            self.i += 1
            negative = self.take("n")
            value = self.number()
            self.expect("E")
            if type_code == "b":
                return "true" if value else "false"
            sign = "-" if negative else ""
            if type_code in ("i",):
                return f"{sign}{value}"
            if type_code in _LITERAL_SUFFIX:
                return f"{sign}{value}{_LITERAL_SUFFIX[type_code]}"
            return f"({_BUILTIN[type_code]}){sign}{value}"
        type_text = self.type()
        negative = self.take("n")
        value = self.number()
        self.expect("E")
        return f"({type_text}){'-' if negative else ''}{value}"

    def pack_expansion(self) -> str:
        """``Dp <type>``: the type once per element of the pack it names (``DpRKT_`` → ``int const&, float const&``)."""
        self.i += 2
        saved, self.expanding = self.expanding, []
        first_sub = len(self.subs)
        try:
            pattern = self.type()
            packs = self.expanding
        finally:
            self.expanding = saved
        if not packs:
            return pattern + "..."
        count = len(packs[0].items)
        if any(len(p.items) != count for p in packs):
            raise _DemangleError("packs of different lengths in one expansion")

        def element(k: int) -> str:
            text = pattern
            for slot, pack in enumerate(packs):
                text = text.replace(f"\x01{slot}\x01", pack.items[k])
            return text

        whole = ", ".join(element(k) for k in range(count))
        for n in range(first_sub, len(self.subs)):  # substitutions name the whole expansion
            for slot, pack in enumerate(packs):
                self.subs[n] = self.subs[n].replace(f"\x01{slot}\x01", str(pack))
        return whole

    def type(self) -> str:
        ch = self.peek()
        if not ch:
            raise _DemangleError("type expected")
        if ch in _BUILTIN:
            self.i += 1
            return _BUILTIN[ch]
        for code, text in _D_BUILTIN.items():
            if self.take(code):
                return text
        if ch in ("P", "R", "O"):
            self.i += 1
            inner = self.type()
            result = inner + {"P": "*", "R": "&", "O": "&&"}[ch]
            self.subs.append(result)
            return result
        if ch in ("K", "V", "r"):
            quals = []
            while self.peek() in ("K", "V", "r"):
                quals.append({"K": "const", "V": "volatile", "r": "restrict"}[self.s[self.i]])
                self.i += 1
            inner = self.type()
            result = f"{inner} {' '.join(reversed(quals))}"
            self.subs.append(result)
            return result
        if ch == "T":
            text = self.template_param()
            self.subs.append(text)
            if self.peek() == "I":
                args = self.template_args_list()
                text = text + _targs(args)
                self.subs.append(text)
            return text
        if ch == "F":
            self.i += 1
            ret = self.type()
            params = self.bare_function_params()
            self.expect("E")
            result = f"{ret} ({params})"
            self.subs.append(result)
            return result
        if ch == "A":
            self.i += 1
            size = str(self.number()) if self.peek().isdigit() else ""
            self.expect("_")
            result = f"{self.type()} [{size}]"
            self.subs.append(result)
            return result
        if self.peek(2) == "Dp":
            return self.pack_expansion()
        if ch == "S" and self.peek(2) not in ("St",):
            text = self.substitution()
            if self.peek() == "I":
                args = self.template_args_list()
                text = text + _targs(args)
                self.subs.append(text)
            return text
        if ch == "N" or ch.isdigit() or self.peek(2) == "St" or ch == "Z":
            text = self.name()[0]
            self.subs.append(text)
            return text
        raise _DemangleError(f"unsupported type at {self.i}")


def _targs(args: list[str]) -> str:
    """``<a, b>`` spelled like GNU c++filt (``> >`` rather than ``>>``); an empty pack adds nothing."""
    inner = ", ".join(a for a in args if a)
    return f"<{inner} >" if inner.endswith(">") else f"<{inner}>"


_MANGLED = re.compile(r"^_Z[A-Za-z0-9_$]+$")


def demangle(name: str) -> Optional[str]:
    """Demangle an Itanium ``_Z…`` symbol; ``None`` when it is not mangled or not understood."""
    if not _MANGLED.match(name):
        return None
    parser = _Demangler(name)
    parser.i = 2
    try:
        text = parser.encoding()
    except (_DemangleError, IndexError, ValueError, RecursionError):
        return None
    if parser.i != len(name) or not text or text.startswith("_Z"):
        return None
    return text


_BASE_PART = re.compile(r"(\d+)")


def mangled_base_name(name: str) -> Optional[str]:
    """Qualified base name read from a mangled prefix (``_ZN3foo3barI…`` → ``foo::bar``)."""
    if not name.startswith("_Z"):
        return None
    i = 2
    nested = name.startswith("_ZN")
    if nested:
        i = 3
        while i < len(name) and name[i] in "rVKRO":
            i += 1
    parts = []
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        length = int(name[i:j])
        part = name[j : j + length]
        if len(part) != length or not length:
            return None
        parts.append("(anonymous namespace)" if part.startswith("_GLOBAL__N") else part)
        i = j + length
        if not nested:
            break
    return "::".join(parts) if parts else None
