"""The CUDA target's disk cache: cubins beside the CPU target's machine code.

Same files, same trust model as the CPU cache (``kernel/disk_cache.py``, docs/targets.md):
sealed entries, the whole key repeated in the header and checked, atomic renames, refused
when foreign. An entry's key covers the generated source, the argument types, the
architecture (``sm_90a`` apart from ``sm_90``), the launch bound, the sources of the
device runtime the generated code calls, and the versions of Tessera, numba-cuda, NVVM and
nvJitLink (toolchain.py). A warm process loads the cubin with the driver and launches it
without compiling anything.

Under MPI several ranks of one node often reach the same kernel at once. The first to
take the entry's lock file compiles; the others wait for its entry (at most
``disk_cache.LOCK_WAIT_S``, then they compile too), so a node compiles each kernel once
(:func:`compiling`, the disk cache's lock, shared with the CPU target).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from ... import disk_cache
from . import toolchain

compiling = disk_cache.compiling  # one process of a node compiles an entry; the others wait

# the device runtime the generated code calls (the namespace of runtime.py), as files
RUNTIME_SOURCES = (
    "runtime.py",
    "async_copy.py",
    "atomics.py",
    "mma.py",
    "staging.py",
    "printf.py",
    "rounding.py",
    "numpy_compat.py",
    "toolchain.py",
    "abi.py",
    "../semantics.py",
    "../integers.py",
    "../own_math.py",
)


@functools.cache
def runtime_digest() -> str:
    """A hash of :data:`RUNTIME_SOURCES`, read as files."""
    digest = hashlib.sha256()
    for name in RUNTIME_SOURCES:
        digest.update(name.encode())
        digest.update((Path(__file__).parent / name).read_bytes())
    return digest.hexdigest()


def entry(kernel: str, source: str, argtypes: tuple, arch: str, bound: int, defined: str):
    """The cache entry of one compiled specialisation, or None (the cache is off)."""
    if not disk_cache.enabled():
        return None
    parts = (
        "cuda",
        hashlib.sha256(source.encode()).hexdigest(),
        tuple(str(t) for t in argtypes),
        arch,
        ("launch bound", bound),
        toolchain.versions(),
        runtime_digest(),
    )
    return disk_cache.Entry("cuda", kernel, parts, {"variant": arch, "defined": defined})


def pack(entry_name: str, cubin: bytes) -> bytes:
    """An entry's payload: the entry symbol on the first line, then the cubin."""
    return entry_name.encode() + b"\n" + cubin


def unpack(payload: bytes) -> tuple[str, bytes] | None:
    """(entry symbol, cubin) of a payload, or None if it is not one."""
    name, sep, cubin = payload.partition(b"\n")
    if not sep or not cubin.startswith(b"\x7fELF") or not name.isascii():
        return None
    return name.decode(), cubin
