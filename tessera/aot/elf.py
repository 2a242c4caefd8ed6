"""The symbol table of an ELF64 object (CPU object code, a cubin), read in Python.

Ahead-of-time modules check what they hand to a linker or a driver against the file itself:
the undefined symbols of a CPU object (they must all be in libc, libm or the linker's own)
and the entry symbol of each cubin (it must be the one the runtime will look up). ``nm``
would do, but it is not everywhere a wheel is installed, and this is 60 lines.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

_SHT_SYMTAB = 2
_SHN_UNDEF = 0
_STB_LOCAL = 0


class Symbol(NamedTuple):
    name: str
    defined: bool
    local: bool


class ElfError(ValueError):
    """Not an ELF64 little-endian file, or one whose tables run past its end."""


def symbols(data: bytes) -> list[Symbol]:
    """Every named symbol of the object's ``.symtab`` sections, in table order."""
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    if data[4] != 2 or data[5] != 1:
        raise ElfError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    if shoff + shnum * shentsize > len(data):
        raise ElfError("section headers run past the end of the file")
    sections = [_section(data, shoff + k * shentsize) for k in range(shnum)]
    out = []
    for kind, offset, size, link, entsize in sections:
        if kind != _SHT_SYMTAB or entsize == 0:
            continue
        if link >= len(sections):
            raise ElfError("a symbol table names a missing string table")
        strings_at, strings_size = sections[link][1], sections[link][2]
        if offset + size > len(data) or strings_at + strings_size > len(data):
            raise ElfError("a symbol table runs past the end of the file")
        for at in range(offset, offset + size, entsize):
            name_at, info, _other, shndx = struct.unpack_from("<IBBH", data, at)
            if name_at == 0:
                continue
            start = strings_at + name_at
            end = data.index(b"\0", start)
            name = data[start:end].decode("utf-8", "replace")
            out.append(Symbol(name, shndx != _SHN_UNDEF, info >> 4 == _STB_LOCAL))
    return out


def _section(data: bytes, at: int) -> tuple[int, int, int, int, int]:
    """(type, offset, size, link, entry size) of the section header at ``at``."""
    _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize = struct.unpack_from(
        "<IIQQQQIIQQ", data, at
    )
    return kind, offset, size, link, entsize


def undefined(data: bytes) -> list[str]:
    """The symbols the object needs from elsewhere (what ``nm -u`` lists)."""
    return sorted({s.name for s in symbols(data) if not s.defined})


def defined_globals(data: bytes) -> list[str]:
    """The global symbols the object defines (a cubin's kernels among them)."""
    return sorted({s.name for s in symbols(data) if s.defined and not s.local})
