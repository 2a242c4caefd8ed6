"""A kernel's CPU code as object code that links with libc alone (ABI.md §4).

The CPU target already makes every grouped kernel a ``_chunk(c, args..., grid..., nchunks)``
function that runs chunk ``c`` of its groups; an ahead-of-time module asks for that form
for flat kernels too (``CpuProgram(chunked=True)``: chunks of the outermost loop). Numba
compiles it as the CPU target does for a launch (same source, same settings), so the
machine code is the one a Python launch runs. Then, from Numba's final LLVM module:

* every definition but the chunk function is made internal and the chunk function is given
  the entry name the image records (Numba's mangled names change from compile to compile);
* what nothing calls any more (the Python wrapper, Numba's C-callable wrapper, the
  reference-counting helpers they use) is deleted;
* what is still declared must be in libc or libm (:data:`ALLOWED`): anything else is an
  :class:`~tessera.errors.AOTError` naming the symbols and the feature that needs them.

:func:`object_code` links the modules of several kernels and emits one relocatable object
(position-independent: it links into executables and shared libraries alike).
"""

from __future__ import annotations

import functools

from ..errors import AOTError, SourceLoc

# What an ahead-of-time CPU object may leave to the linker: libc, libm, the compiler's own
# support routines that every C program links (libgcc / compiler-rt) and the linker's.
_LIBC = "memcpy memmove memset memcmp abort"
_LIBM_DOUBLE = (
    "sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 expm1 log "
    "log2 log10 log1p pow sqrt cbrt hypot fmod remainder floor ceil trunc round rint "
    "nearbyint lround llround fabs copysign fmin fmax fma erf erfc tgamma lgamma ldexp frexp "
    "modf sincos"
)
_LIBM = _LIBM_DOUBLE.split() + [f + "f" for f in _LIBM_DOUBLE.split()]
_RUNTIME = (
    "__extendhfsf2 __truncsfhf2 __truncdfhf2 __extendbfsf2 __truncsfbf2 __truncdfbf2 "
    "__powisf2 __powidf2 __divti3 __udivti3 __modti3 __umodti3 __muloti4 __mulodi4 "
    "__fixsfti __fixdfti __fixunssfti __fixunsdfti __floattisf __floattidf __floatuntisf "
    "__floatuntidf __gnu_h2f_ieee __gnu_f2h_ieee __stack_chk_fail"
)
ALLOWED = frozenset(_LIBC.split() + _LIBM + _RUNTIME.split() + ["_GLOBAL_OFFSET_TABLE_"])

# LLVM's argument types → the slot kinds the image records (image_format.SLOT_KINDS)
_SLOT_OF_LLVM = {
    "ptr": "ptr",
    "i64": "i64",
    "i32": "i32",
    "i16": "i16",
    "i8": "i8",
    "i1": "b1",
    "float": "f32",
    "double": "f64",
}


def feature_of(symbol: str) -> str:
    """What in a kernel makes its code call ``symbol`` (for the error message)."""
    if symbol.startswith("NRT_"):
        return (
            "an allocation on the heap (np.empty in the body, a tshared.dynamic array, or "
            "tiles too large for the stack)"
        )
    if symbol.startswith(("numba_gil", "Py", "_Py")):
        return "Python (print, or a call back into the interpreter)"
    if symbol.startswith("numba_"):
        return "Numba's C helpers (its Python runtime)"
    return "a function outside libc and libm"


def entry_module(cres, entry_symbol: str, kernel: str, loc: SourceLoc | None):
    """Numba's module of ``cres`` with the chunk function renamed ``entry_symbol`` and
    everything else internal or gone; (its bitcode, the slot kinds of the entry's
    arguments after Numba's return and exception pointers). Raises AOTError when it still
    needs a symbol outside :data:`ALLOWED`."""
    import llvmlite.binding as llb

    module = llb.parse_bitcode(cres.library._final_module.as_bitcode())
    original = cres.fndesc.llvm_func_name
    for function in module.functions:
        if not function.is_declaration and function.name != original:
            function.linkage = "internal"
    for variable in module.global_variables:
        if not variable.is_declaration:
            variable.linkage = "internal"
    entry = module.get_function(original)
    entry.name = entry_symbol
    _delete_unused(module)
    needed = sorted(
        {
            symbol.name
            for symbol in (*module.functions, *module.global_variables)
            if symbol.is_declaration and not symbol.name.startswith("llvm.")
        }
        - ALLOWED
    )
    if needed:
        raise unsupported(kernel, needed, loc)
    kinds = []
    for argument in list(entry.arguments)[2:]:  # after the return and exception pointers
        text = str(argument.type)
        kind = _SLOT_OF_LLVM.get(text)
        if kind is None:
            raise AOTError(
                kernel,
                f"its compiled code takes an argument of LLVM type {text}, which the "
                "C runtime cannot pass",
                loc,
            )
        kinds.append(kind)
    return module.as_bitcode(), kinds


def unsupported(kernel: str, symbols: list[str], loc: SourceLoc | None) -> AOTError:
    by_feature: dict[str, list[str]] = {}
    for s in symbols:
        by_feature.setdefault(feature_of(s), []).append(s)
    what = "; ".join(f"{', '.join(names)} ({why})" for why, names in by_feature.items())
    return AOTError(
        kernel,
        f"its CPU code needs symbols that an ahead-of-time object may not use: {what}. "
        "AOT code links with libc and libm alone",
        loc,
    )


def _delete_unused(module) -> None:
    """Drop the internal definitions and the declarations nothing uses."""
    import llvmlite.binding as llb

    tm = _target_machine(None)
    options = llb.create_pipeline_tuning_options(speed_level=0)
    builder = llb.create_pass_builder(tm, options)
    passes = llb.create_new_module_pass_manager()
    passes.add_global_dead_code_eliminate_pass()
    passes.add_strip_dead_prototype_pass()
    passes.run(module, builder)


@functools.cache
def _target_machine(cpu: str | None):
    """The machine code's target: this machine's CPU and features (Numba's choice for the
    same kernel, so the object runs the instructions a Python launch runs), or ``cpu``
    (an LLVM CPU name such as ``x86-64-v3``) with that CPU's own features."""
    import llvmlite.binding as llb

    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    target = llb.Target.from_default_triple()
    if cpu is None:
        name, features = llb.get_host_cpu_name(), llb.get_host_cpu_features().flatten()
    else:
        name, features = cpu, ""
    return target.create_target_machine(
        cpu=name, features=features, opt=2, reloc="pic", codemodel="default"
    )


def object_code(bitcodes: list[bytes], cpu: str | None = None) -> bytes:
    """One relocatable object holding the entry functions of ``bitcodes`` (modules made by
    :func:`entry_module`; their internal names may repeat: linking renames them)."""
    import llvmlite.binding as llb

    if not bitcodes:
        raise ValueError("no CPU code to emit")
    module = llb.parse_bitcode(bitcodes[0])
    for code in bitcodes[1:]:
        module.link_in(llb.parse_bitcode(code))
    tm = _target_machine(cpu)
    module.triple = tm.triple
    return tm.emit_object(module)
