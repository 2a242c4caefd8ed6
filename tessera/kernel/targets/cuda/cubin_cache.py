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
``LOCK_WAIT_S``, then they compile too), so a node compiles each kernel once.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

from ... import disk_cache
from . import toolchain

LOCK_WAIT_S = 120.0  # a compile takes seconds; past this a waiting rank compiles itself
_POLL_S = 0.05

# the device runtime the generated code calls (the namespace of runtime.py), as files
RUNTIME_SOURCES = (
    "runtime.py",
    "async_copy.py",
    "atomics.py",
    "mma.py",
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


@contextlib.contextmanager
def compiling(cache_entry) -> Iterator[bool]:
    """Hold the entry's lock while compiling it. Yields whether this process waited for
    another one that held the lock (then read the entry again before compiling)."""
    lock = (
        None if cache_entry is None else cache_entry.path.with_name(cache_entry.path.name + ".lock")
    )
    fd, waited = _take(lock) if lock is not None else (None, False)
    try:
        yield waited
    finally:
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
                lock.unlink()


def _take(lock: Path) -> tuple[int | None, bool]:
    """Create ``lock`` exclusively: (its descriptor, whether this process waited first).
    While another process holds it, wait until it is gone (then ``(None, True)``: read
    the entry it wrote) or LOCK_WAIT_S has passed (``(None, True)`` too: the caller
    finds no entry and compiles). A lock older than LOCK_WAIT_S is left by a process that
    died: it is taken over. Where no lock file can be made, ``(None, False)``."""
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None, False
    deadline = time.monotonic() + LOCK_WAIT_S
    waited = False
    while True:
        try:
            return os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600), waited
        except FileExistsError:
            pass
        except OSError:
            return None, waited
        try:
            stale = time.time() - lock.stat().st_mtime > LOCK_WAIT_S
        except OSError:  # released between the two calls: the entry may be there now
            if waited:
                return None, True
            continue
        if stale:
            with contextlib.suppress(OSError):
                lock.unlink()
            continue
        if time.monotonic() > deadline:
            return None, True
        waited = True
        time.sleep(_POLL_S)
