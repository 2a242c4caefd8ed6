"""What generated CUDA code calls at run time, and numba-cuda itself, imported on first use.

numba-cuda is an optional dependency, imported only here (and only when a CUDA launch or
inspection needs it). Under its simulator (``NUMBA_ENABLE_CUDASIM=1``) kernels run as
Python on the CPU, thread by thread; the names below then take the simulator's forms.
"""

from __future__ import annotations

import functools
import math
import types

import numpy as np

from ....errors import TesseraError
from .. import integers, own_math, semantics
from . import async_copy, atomics, mma, numpy_compat, printf, rounding, shared_memory, staging
from .device_helpers import device_helper

NOT_INSTALLED = (
    "numba-cuda is not installed: pip install 'tessera-kernels[cuda]' (from a checkout: "
    "python -m pip install -e '.[cuda]'; '[cuda12]' where the driver is CUDA 12)"
)


@functools.cache  # every CUDA launch asks: the import and the NumPy check run once
def cuda_module():
    """``numba.cuda``, imported on first use (it is an optional dependency). Without
    numba-cuda, ``numba.cuda`` is Numba's own retired copy, which fails on first use
    (``No module named 'numba.cuda.np'``): that is a TesseraError saying what to install."""
    try:
        from numba import cuda
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise TesseraError(NOT_INSTALLED) from exc
    if getattr(cuda, "implementation", None) == "Built-in":  # numba-cuda's is "NVIDIA"
        raise TesseraError(NOT_INSTALLED)
    if not simulating():  # the simulator compiles nothing
        numpy_compat.load_registrations()
    return cuda


def simulating() -> bool:
    """Whether numba-cuda's simulator is on in this process (numba's config module read
    each time, imported once: every op on device arrays asks)."""
    config = _NUMBA_CONFIG or _numba_config()
    return bool(getattr(config, "ENABLE_CUDASIM", False))


_NUMBA_CONFIG = None  # numba.config, imported on first use


def _numba_config():
    global _NUMBA_CONFIG
    from numba import config

    _NUMBA_CONFIG = config
    return config


def _simulator_math():
    """The simulator runs kernels as Python, where ``math.sqrt(-1.0)`` raises; on a GPU it
    is NaN. This stand-in gives the GPU's answers (NaN or inf), computed by NumPy."""
    shim = types.SimpleNamespace(**{n: getattr(math, n) for n in dir(math) if n[0] != "_"})
    for name, fn in semantics.NUMPY_MATH.items():
        setattr(shim, name, _quiet(fn))
    return shim


def _quiet(fn):
    """``fn`` with NumPy's floating-point warnings off (a GPU overflows to inf silently)."""

    def quiet(*args):
        with np.errstate(all="ignore"):
            return fn(*args)

    return quiet


@functools.cache
def _bf16_conversions(cuda, simulated: bool) -> dict:
    """``_b2f`` (uint16 bits → f32), ``_f2b`` (f32 → uint16 bits, the language's
    rounding) and ``_round_bf16`` (both) for generated CUDA code: device functions on
    the GPU (libdevice's bit casts), NumPy under the simulator, which runs kernels as
    Python."""
    if simulated:

        def b2f(bits):
            return (np.uint32(bits) << np.uint32(16)).view(np.float32)

        def f2b(value):
            return semantics.bf16_bits(np.float32(value).view(np.uint32))

        def round_bf16(value):
            return b2f(f2b(value))

        return {"_b2f": b2f, "_f2b": f2b, "_round_bf16": round_bf16}
    from numba.cuda import libdevice

    bits_of = semantics.jitted().bf16_bits

    @device_helper
    def b2f_device(bits):
        return libdevice.int_as_float(np.int32(np.uint32(bits) << np.uint32(16)))

    @device_helper
    def f2b_device(value):
        return bits_of(np.uint32(libdevice.float_as_int(np.float32(value))))

    @device_helper
    def round_bf16_device(value):
        return b2f_device(f2b_device(value))

    return {"_b2f": b2f_device, "_f2b": f2b_device, "_round_bf16": round_bf16_device}


@functools.cache
def _fp8_conversions(cuda, simulated: bool) -> dict:
    """``_e4m3_f32``/``_f32_e4m3``/``_round_e4m3`` and the same for e5m2: the 8-bit floats'
    codes (uint8) to and from f32 with the language's rounding (semantics.py), as device
    functions on the GPU, NumPy under the simulator."""
    names = {}
    jitted = semantics.jitted()
    for name, (ebits, mbits, finite) in semantics.F8_FORMATS.items():
        short = name[2:]
        if simulated:

            def to_f32(code, fmt=(ebits, mbits, finite)):
                return np.uint32(semantics.f8_value_bits(code, *fmt)).view(np.float32)

            def from_f32(value, fmt=(ebits, mbits, finite)):
                return semantics.f8_bits(np.float32(value).view(np.uint32), *fmt)

            def rounded(value, to_f32=to_f32, from_f32=from_f32):
                return to_f32(from_f32(value))

        else:
            to_f32, from_f32, rounded = _fp8_device(cuda, jitted, ebits, mbits, finite)
        names.update({f"_{short}_f32": to_f32, f"_f32_{short}": from_f32})
        names[f"_round_{short}"] = rounded
    return names


def _fp8_device(cuda, jitted, ebits: int, mbits: int, finite: bool):
    from numba.cuda import libdevice

    value_bits, code_of = jitted.f8_value_bits, jitted.f8_bits

    @device_helper
    def to_f32(code):
        return libdevice.int_as_float(np.int32(value_bits(code, ebits, mbits, finite)))

    @device_helper
    def from_f32(value):
        bits = np.uint32(libdevice.float_as_int(np.float32(value)))
        return code_of(bits, ebits, mbits, finite)

    @device_helper
    def rounded(value):
        return to_f32(from_f32(value))

    return to_f32, from_f32, rounded


@functools.cache  # one set of helpers a process: each is lowered once per signature
def _own_math(cuda, simulated: bool) -> dict:
    """The language's own math functions (own_math.py), with the target's bit casts and
    fused multiply-add (libdevice's ``fmaf``: ``fma.rn.f32``)."""
    if simulated:
        return own_math.functions(
            own_math.numpy_bits_f32, own_math.numpy_f32_bits, own_math.numpy_fma_f32, _quiet
        )
    from numba.cuda import libdevice

    @device_helper
    def bits_f32(bits):
        return libdevice.int_as_float(np.int32(bits))

    @device_helper
    def f32_bits(value):
        return np.uint32(libdevice.float_as_int(value))

    def compile_device(fn):  # products rounded on their own, as on every target
        fn = rounding.separate_products(fn, libdevice.fmul_rn)
        return device_helper(fn)

    return own_math.functions(bits_f32, f32_bits, libdevice.fmaf, compile_device)


@functools.cache
def _combiners(simulated: bool) -> dict:
    """The language's add and NaN-propagating max and min (semantics.py): device helpers
    on the GPU (a row's 32 held values take 32 ``max`` calls), Numba's under the
    simulator."""
    fns = {"_add": semantics.add, "_add_i64": semantics.add_i64}
    fns.update(_fmax=semantics.fmax, _fmin=semantics.fmin)
    if simulated:
        jitted = semantics.jitted()
        return {name: getattr(jitted, fn.__name__) for name, fn in fns.items()}
    return {name: device_helper(fn) for name, fn in fns.items()}


@functools.cache
def _integers(simulated: bool) -> dict:
    """The wrapping integer operations (integers.py): device helpers, or Python as they
    are under the simulator."""
    return integers.functions(lambda fn: fn if simulated else device_helper(fn))


def namespace(async_copies: bool) -> dict:
    """The names a generated kernel's source may use."""
    cuda = cuda_module()
    simulated = simulating()
    names = {
        "cuda": cuda,
        "np": np,
        "math": _simulator_math() if simulated else math,
        "_tree_reduce": semantics.jitted().tree_reduce,
        **_combiners(simulated),
    }
    names.update(_integers(simulated))
    names.update(_bf16_conversions(cuda, simulated))
    names.update(_fp8_conversions(cuda, simulated))
    names.update(_own_math(cuda, simulated))
    if not simulated:
        names.update(rounding.functions())
    names.update(atomics.namespace(simulated, names["_b2f"], names["_f2b"]))
    names.update(printf.namespace(simulated))
    names["_shaped"] = shared_memory.shaped_view(simulated)
    # dynamic shared arrays take dtype instances (the simulator needs .itemsize)
    for t in ("float16", "float32", "float64", "int8", "int16", "int32", "int64"):
        names[f"_dt_{t}"] = np.dtype(t)
    for t in ("uint8", "uint16", "uint32", "uint64", "bool"):
        names[f"_dt_{t}"] = np.dtype(t)
    if async_copies:
        names.update(async_copy.namespace())
    if not simulated:  # tensor-core tile.dot (mma.sync, inline PTX)
        names.update(mma.namespace())
        names.update(staging.namespace())
    return names
