"""The vector width LLVM is asked to prefer for the CPU target's loops.

On a CPU with AVX-512, LLVM's x86 backend still prefers 256-bit vectors for the loops it
vectorises (its ``prefer-256-bit`` tuning: the first AVX-512 chips lowered their clock
for 512-bit code). A loop over the language's own ``exp`` then computes 8 f32 lanes per
instruction where the registers hold 16. So for a kernel that calls the own ``exp``,
``log``, ``tanh`` or ``erf`` (40 and more vector operations per element: bound by
arithmetic) the CPU target asks for 512 bits on an AVX-512 CPU; measured here, such loops
take 25-55 % less time, and softmax and attention kernels 10-45 % (bench/README.md).
Other kernels keep LLVM's choice: a loop bound by memory gains nothing from wider vectors,
and ``axpy`` measured 11 % slower with them. ``TESSERA_CPU_VECTOR_BITS`` (``auto``,
``256``, ``512``) overrides the choice for every kernel. The width changes no result:
vector lanes round each step as scalar code does, and no reduction is reordered (no
fast-math).

The preference is LLVM's ``prefer-vector-width`` function attribute, put on every
function Numba builds while it compiles a Tessera kernel (the kernel, its parallel body,
the helpers it inlines). Numba has no option for it, so for that window its code
library's ``add_ir_module`` adds the attribute, holding Numba's compiler lock so that no
other thread's Numba code is built meanwhile.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

from .... import config


@functools.cache
def host_has_avx512() -> bool:
    from llvmlite import binding

    try:
        return bool(binding.get_host_cpu_features().get("avx512f", False))
    except RuntimeError:  # LLVM cannot read this CPU's features
        return False


def preferred_bits(arithmetic_bound: bool) -> int | None:
    """The width to ask for a kernel (None: leave LLVM's own choice); ``auto`` widens
    only kernels whose loops are bound by arithmetic (see the module's docstring)."""
    value = config.get("cpu_vector_bits")
    if value == "auto":
        return 512 if arithmetic_bound and host_has_avx512() else None
    return int(value)


@functools.cache
def _attributes_class(bits: int):
    """llvmlite's function attributes, accepting the one string attribute we add."""
    from llvmlite.ir.values import FunctionAttributes

    attribute = f'"prefer-vector-width"="{bits}"'

    class WithVectorWidth(FunctionAttributes):
        _known = FunctionAttributes._known | {attribute}

    return WithVectorWidth, attribute


def _with_width(function, bits: int) -> None:
    cls, attribute = _attributes_class(bits)
    old = function.attributes
    new = cls(sorted(old))
    new.alignstack = old.alignstack
    new.personality = old.personality
    new.add(attribute)
    function.attributes = new


@contextlib.contextmanager
def preferring(bits: int | None) -> Iterator[None]:
    """Numba's CPU compiles inside the block prefer ``bits``-wide vectors."""
    if bits is None:
        yield
        return
    from numba.core import codegen
    from numba.core.compiler_lock import global_compiler_lock

    library = codegen.CPUCodeLibrary
    original = library.add_ir_module

    def add_ir_module(self, ir_module):
        for function in ir_module.functions:
            if function.blocks:  # a definition, not a declaration
                _with_width(function, bits)
        return original(self, ir_module)

    with global_compiler_lock:
        library.add_ir_module = add_ir_module
        try:
            yield
        finally:
            library.add_ir_module = original
