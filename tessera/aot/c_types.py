"""ctypes mirrors of ``tessera_rt.h``'s structures, for calling a built module from Python
(tests, benchmarks, or a program that loads ``lib<name>.so`` with ctypes).

``tests/test_aot_python.py`` checks every size against the C compiler's ``sizeof``.
"""

from __future__ import annotations

import ctypes

import numpy as np

KDL_CPU, KDL_CUDA = 1, 2
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


class Tensor(ctypes.Structure):
    """``tsr_tensor_t`` (DLPack's ``DLTensor``), flattened: device and dtype inline."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]

    @classmethod
    def of(cls, a: np.ndarray) -> Tensor:
        """A tensor describing NumPy array ``a`` (its memory, shape and strides); keeps the
        shape and strides it points to alive as long as itself."""
        if a.dtype.name == "bfloat16":
            code = 4
        else:
            code = _CODES[a.dtype.kind]
        shape = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        strides = (ctypes.c_int64 * max(a.ndim, 1))(*(s // a.itemsize for s in a.strides))
        t = cls(a.ctypes.data, KDL_CPU, 0, a.ndim, code, a.itemsize * 8, 1, shape, strides, 0)
        t._keep = (shape, strides, a)
        return t


class Launch(ctypes.Structure):
    """``tsr_launch_t``."""

    _fields_ = [
        (name, ctypes.c_uint32)
        for name in ("grid_x", "grid_y", "grid_z", "block_x", "block_y", "block_z", "smem_bytes")
    ]


class ContextDesc(ctypes.Structure):
    """``tsr_context_desc_t``."""

    _fields_ = [
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("threads", ctypes.c_int32),
    ]


class Image(ctypes.Structure):
    """``tsr_image_t`` (a linked module: ``<name>_image``)."""

    _fields_ = [
        ("magic", ctypes.c_char * 4),
        ("abi_major", ctypes.c_uint32),
        ("bytes", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("entries", ctypes.c_void_p),
        ("nentries", ctypes.c_size_t),
    ]


def bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Declare the argument and result types of the runtime's functions in ``lib``."""
    p, size = ctypes.c_void_p, ctypes.c_size_t
    status = ctypes.c_int
    table = {
        "tsrCreateContext": [ctypes.POINTER(p)],
        "tsrCreateContextEx": [ctypes.POINTER(ContextDesc), ctypes.POINTER(p)],
        "tsrDestroyContext": [p],
        "tsrLoadModule": [p, p, size, ctypes.POINTER(p)],
        "tsrUnloadModule": [p],
        "tsrGetKernel": [p, ctypes.c_char_p, ctypes.POINTER(p)],
        "tsrLaunch": [p, p, Launch, p, size],
        "tsrStreamSynchronize": [p, ctypes.c_uint32],
    }
    for name, argtypes in table.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = argtypes, status
    lib.tsrGetLastError.restype = ctypes.c_char_p
    return lib
