"""Generated source → PTX (numba-cuda's front end and NVVM) → a cubin (nvJitLink).

The same two steps serve every use: ``k.inspect("ptx" | "cubin" | "meta")`` without a GPU,
and the launch path, which loads the cubin with the driver itself (driver.py) instead of
going through numba-cuda's dispatcher. :func:`versions` names what decides the code, for
the cubin cache's key (read from the installed packages' metadata: no library is loaded).
"""

from __future__ import annotations

import functools
from importlib import metadata

from ....errors import TesseraError
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


def ptx_codes(function, argtypes: tuple, cc: tuple[int, int], launch_bounds: int) -> list:
    """PTX of the kernel ``function`` for ``argtypes`` and compute capability ``cc``, plus
    anything it links (numba-cuda's own helper libraries): the first item is the kernel's."""
    from numba.cuda.compiler import compile_all

    cuda_module()  # numba-cuda's registrations (and the NumPy shim) before compiling
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
