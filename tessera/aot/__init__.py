"""Ahead-of-time modules: Tessera kernels called from C, C++ or Fortran without Python.

::

    from tessera import aot

    cpu = aot.compile(block_sum, target="cpu")
    gpu = aot.compile(block_sum, target="cuda", arch=["sm_80", "sm_90"], ptx=True)
    mm = aot.compile(linear_relu, target="cpu", constexprs=dict(BM=64, BN=64, BK=32))
    aot.write_c([cpu, gpu, mm], "build", name="blocksum")
    # build/: blocksum.h blocksum.c blocksum_cpu.o tessera_rt.h tessera_rt.c ... dlpack.h

A C program includes ``blocksum.h``, creates a context, loads ``&blocksum_image`` and
launches kernels with ``tsrLaunch`` (docs/embedding.md; the ABI in ABI.md). The C runtime
(``runtime_dir()``) is plain C99 built by the user's compiler; the module's CPU code is an
object file that needs libc and libm alone, and its CUDA code cubins (and PTX) for the
architectures named, run through the driver the runtime opens itself.

* :func:`compile` ``(kernel, *, target, arch=None, ptx=False, constexprs=None,
  config=None, layouts=("contiguous", "strided"), dtypes=None, cpu=None)`` → :class:`Image`
* :func:`write_c` ``(images, outdir, name, cmake=False)`` → the files written
* :func:`save` ``(images, path)``: the serialized module (``.tsrm``: CUDA code, loadable
  from bytes)
* :func:`build_library` ``(outdir, name)``: ``lib<name>.a`` built with ``$CC`` or ``cc``
"""

from __future__ import annotations

from ..errors import AOTError
from .build import Image, compile
from .c_files import build_library, runtime_dir, save, write_c

__all__ = ["AOTError", "Image", "build_library", "compile", "runtime_dir", "save", "write_c"]
