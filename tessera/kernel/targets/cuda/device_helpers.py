"""Device helpers compiled once per signature and called, inlined by NVVM.

Generated CUDA code calls helpers: the language's own exp, log, tanh and erf, the 8- and
16-bit float conversions, the narrow atomics' compare-and-swap loops, the integer
operations with the language's wrapping. numba-cuda's ``inline="always"`` inlines a
helper's *Numba IR* at every call site, so each call is typed and lowered again with the
kernel: a kernel that calls ``math.exp`` four times paid for four copies of exp in
Numba's Python frontend (a flat f8 kernel took 7 s to PTX). A helper made by
:func:`device_helper` is typed and lowered once per signature in a process (its LLVM IR
kept by the helper and linked into every kernel that calls it) and carries LLVM's
``alwaysinline``, so NVVM inlines it: the machine code is what Numba-level inlining gave.

numba-cuda compiles a device function for the current GPU's compute capability, which
needs a GPU (``k.inspect("ptx")`` must not). A helper is compiled for
:data:`HELPER_CC` instead: its LLVM IR is the same for every architecture from
:data:`SAME_LOWERING_FROM` on, and NVVM compiles it with the kernel, for the kernel's
architecture.
"""

from __future__ import annotations

import functools
import inspect

# numba-cuda lowers Python to the same LLVM IR for every compute capability from this one on
# (before it, f64 atomics are a compare-and-swap loop; fastmath's tanh, which Tessera
# never asks for, waits for 7.5): what lets a helper, or a kernel (toolchain.ptx_codes),
# lowered once serve every architecture
SAME_LOWERING_FROM = (6, 0)
HELPER_CC = (7, 0)  # the compute capability a helper is lowered for (see above)


def device_helper(fn):
    """``fn`` as a device function that kernels call and NVVM inlines (see above); with a
    numba-cuda that lacks what this needs, inlined by Numba at every call as before."""
    helper = _helper_class()
    if helper is None:
        from numba import cuda

        return cuda.jit(device=True, inline="always")(fn)
    return helper(fn, targetoptions=_OPTIONS)


_OPTIONS = {
    "device": True,
    "forceinline": True,
    "inline": "never",
    "opt": True,
    "debug": False,
    "lineinfo": False,
    "fastmath": False,
}


@functools.cache
def _helper_class():
    """The helper dispatcher class, or None where numba-cuda has no ``compile_cuda`` taking
    ``forceinline`` (its pieces are internal: a release may move them)."""
    try:
        from numba.cuda.compiler import compile_cuda
        from numba.cuda.dispatcher import CUDADispatcher
    except ImportError:
        return None
    if "forceinline" not in inspect.signature(compile_cuda).parameters:
        return None

    class Helper(CUDADispatcher):
        """A device function lowered for :data:`HELPER_CC`, not the current GPU's."""

        def compile_device(self, args, return_type=None):
            found = self.overloads.get(args)
            if found is not None:
                return found
            with self._compiling_counter:
                result = compile_cuda(
                    self.py_func,
                    return_type,
                    args,
                    forceinline=True,
                    nvvm_options={"opt": 3},
                    cc=HELPER_CC,
                )
                self.overloads[args] = result
                result.target_context.insert_user_function(
                    result.entry_point, result.fndesc, [result.library]
                )
            return result

    return Helper
