"""Generated source → PTX (numba-cuda's front end and NVVM) → a cubin (nvJitLink).

The same two steps serve every use: ``k.inspect("ptx" | "cubin" | "meta")`` without a GPU,
and the launch path, which loads the cubin with the driver itself (driver.py) instead of
going through numba-cuda's dispatcher. :func:`versions` names what decides the code, for
the cubin cache's key (read from the installed packages' metadata: no library is loaded).
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from importlib import metadata

from ....errors import TesseraError
from .device_helpers import SAME_LOWERING_FROM
from .runtime import cuda_module

# the installed distributions whose versions decide the code made from a kernel's source
TOOLCHAIN_PACKAGES = (
    "numba-cuda",
    "numba",
    "llvmlite",
    "cuda-bindings",
    "cuda-toolkit",
    "nvidia-nvvm",
    "nvidia-nvjitlink",
    "nvidia-cuda-nvcc",
    "nvidia-cuda-nvcc-cu12",
    "nvidia-nvjitlink-cu12",
)


LOWERED_KEPT = 16  # kernels whose lowered LLVM IR a process keeps for other architectures
_lowered: OrderedDict = OrderedDict()  # (key, argtypes, launch bound) -> numba-cuda library
_LOWERED_LOCK = threading.RLock()


def ptx_codes(
    function, argtypes: tuple, cc: tuple[int, int], launch_bounds, key: object = None
) -> list:
    """PTX of the kernel ``function`` for ``argtypes`` and compute capability ``cc``, plus
    anything it links (numba-cuda's own helper libraries): the first item is the kernel's.

    numba-cuda's front end (typing, lowering: most of a compile) gives the same LLVM IR for
    every architecture from ``device_helpers.SAME_LOWERING_FROM`` on, so with a ``key`` —
    what besides
    ``argtypes`` and the launch bound decides that IR: the generated source and its
    names — a kernel already lowered in this process is only compiled again by NVVM for
    another ``cc`` (``k.inspect("ptx", arch=...)`` for a second architecture, an
    ahead-of-time image of several)."""
    cuda_module()  # numba-cuda's registrations (and the NumPy shim) before compiling
    lower = _lowering()
    if key is None or lower is None:
        return _compiled(function, argtypes, cc, launch_bounds)
    entry = (key, argtypes, launch_bounds, cc >= SAME_LOWERING_FROM)
    with _LOWERED_LOCK:  # (threads may compile at once)
        library = _lowered.get(entry)
        if library is None:
            library, _ = lower(
                function, argtypes, device=False, abi="numba", cc=cc, launch_bounds=launch_bounds
            )
            if library._linking_files:  # code numba-cuda links in: its own path does it
                return _compiled(function, argtypes, cc, launch_bounds)
            _lowered[entry] = library
            while len(_lowered) > LOWERED_KEPT:
                _lowered.popitem(last=False)
        else:
            _lowered.move_to_end(entry)
        return list(library.get_asm_strs(cc=cc))


def _compiled(function, argtypes: tuple, cc: tuple[int, int], launch_bounds) -> list:
    from numba.cuda.compiler import compile_all

    codes, _ = compile_all(
        function,
        argtypes,
        device=False,
        abi="numba",
        output="ptx",
        cc=cc,
        launch_bounds=launch_bounds,
    )
    return codes


@functools.cache
def _lowering():
    """numba-cuda's step before NVVM (lower a kernel to a code library, launch bounds
    set), which ``compile_all`` runs; None where this numba-cuda has no such step (then
    every architecture is lowered again)."""
    from numba.cuda import compiler

    return getattr(compiler, "_compile_pyfunc_with_fixup", None)


def link(codes: list, arch: str) -> tuple[bytes, str]:
    """A cubin for ``arch`` from ``codes`` (PTX text or numba-cuda linkable code) and
    ptxas's report; a failure raises with the error log."""
    from cuda.bindings import nvjitlink

    handle = nvjitlink.create(2, [f"-arch={arch}", "-verbose"])
    try:
        try:
            for k, code in enumerate(codes):
                data, kind, name = _input(nvjitlink, code, k)
                nvjitlink.add_data(handle, kind, data, len(data), name)  # (compiles PTX)
            nvjitlink.complete(handle)
        except TesseraError:
            raise
        except Exception as exc:
            raise TesseraError(
                f"ptxas failed for {arch}: {_log(nvjitlink, handle, error=True)}"
            ) from exc
        cubin = bytearray(nvjitlink.get_linked_cubin_size(handle))
        nvjitlink.get_linked_cubin(handle, cubin)
        return bytes(cubin), _log(nvjitlink, handle)
    finally:
        nvjitlink.destroy(handle)


def _input(nvjitlink, code, k: int) -> tuple[bytes, object, str]:
    if isinstance(code, str):
        return code.encode(), nvjitlink.InputType.PTX, f"kernel{k}.ptx"
    if isinstance(code, bytes):
        return code, nvjitlink.InputType.PTX, f"kernel{k}.ptx"
    kinds = {
        "ptx": nvjitlink.InputType.PTX,
        "cubin": nvjitlink.InputType.CUBIN,
        "fatbin": nvjitlink.InputType.FATBIN,
        "o": nvjitlink.InputType.OBJECT,
        "a": nvjitlink.InputType.LIBRARY,
        "ltoir": nvjitlink.InputType.LTOIR,
    }
    kind = kinds.get(str(getattr(code, "kind", "")))
    if kind is None:
        raise TesseraError(f"cannot link numba-cuda code of kind {getattr(code, 'kind', code)!r}")
    data = code.data
    return (data.encode() if isinstance(data, str) else bytes(data)), kind, code.name or f"lib{k}"


def _log(nvjitlink, handle, error: bool = False) -> str:
    size = (nvjitlink.get_error_log_size if error else nvjitlink.get_info_log_size)(handle)
    text = bytearray(size)
    if size:
        (nvjitlink.get_error_log if error else nvjitlink.get_info_log)(handle, text)
    text = text.decode(errors="replace").rstrip("\x00")
    if error and not text.strip():  # some failures only write the info log
        return _log(nvjitlink, handle)
    return text


@functools.cache
def versions() -> tuple:
    """(distribution, version) of every installed toolchain package (TOOLCHAIN_PACKAGES)."""
    found = []
    for name in TOOLCHAIN_PACKAGES:
        try:
            found.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    return tuple(found)
