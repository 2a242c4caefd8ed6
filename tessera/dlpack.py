"""bf16 through DLPack: the one host type ``numpy.from_dlpack`` refuses that a kernel takes.

NumPy has no bf16 dtype, so it refuses DLPack's bfloat type code ("Unsupported dtype in
DLTensor"). This reads the capsule's ``DLManagedTensor`` itself (the ABI of dlpack.h)
and makes an ``ml_dtypes.bfloat16`` view of the tensor's memory — no copy, so a kernel's
writes land in the producer's tensor. The view owns the capsule's tensor: the producer's
deleter runs when the last view of it is gone, as it does for ``numpy.from_dlpack``.
"""

from __future__ import annotations

import ctypes

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)
KDL_CPU = 1  # DLDeviceType: host memory
KDL_BFLOAT = 4  # DLDataTypeCode: bfloat (with bits 16, lanes 1: bf16)


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),  # in elements; NULL: C-contiguous
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _Deleter)]


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _Owner:
    """Holds a consumed ``DLManagedTensor``; calls its producer's deleter when freed."""

    def __init__(self, managed: _Managed, address: int):
        self.managed, self.address = managed, address

    def __del__(self):
        if self.managed.deleter:
            self.managed.deleter(self.address)


def bf16_view(a) -> np.ndarray | None:
    """A NumPy view (dtype ``ml_dtypes.bfloat16``) of the bf16 host tensor ``a``, read from
    its DLPack capsule; None when the capsule holds anything else (the capsule is then
    left to free itself)."""
    capsule = a.__dlpack__()
    address = _get_pointer(capsule, b"dltensor")
    managed = _Managed.from_address(address)
    t = managed.dl_tensor
    dtype = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
    if dtype != (KDL_BFLOAT, 16, 1) or t.device.device_type != KDL_CPU:
        return None
    shape = tuple(t.shape[k] for k in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[k] * BF16.itemsize for k in range(t.ndim))
    else:
        strides = tuple(int(s) for s in np.empty(shape, BF16).strides)  # C order
    if any(s < 0 for s in strides):
        return None  # a view with negative strides: left to NumPy's error
    _set_name(capsule, b"used_dltensor")  # consumed: its memory is the owner's now
    owner = _Owner(managed, address)
    if 0 in shape or not t.data:
        return np.empty(shape, BF16)  # no memory to share (the owner frees the capsule's)
    span = sum((n - 1) * s for n, s in zip(shape, strides)) + BF16.itemsize
    memory = (ctypes.c_char * span).from_address(t.data + t.byte_offset)
    memory.owner = owner  # the view's base holds the owner: the tensor lives as long
    return np.lib.stride_tricks.as_strided(np.frombuffer(memory, BF16), shape, strides)
