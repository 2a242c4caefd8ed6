"""What an array is and where it lives: NumPy arrays on the host, GPU arrays (CuPy,
PyTorch, numba-cuda device arrays: anything with ``__cuda_array_interface__``), and
arrays that speak only DLPack.
"""

from __future__ import annotations

import numpy as np

from .errors import LaunchError


def unwrap_dlpack(kernel: str, params: list, args: tuple) -> tuple:
    """Arrays that speak only DLPack become arrays Tessera can check: host tensors through
    ``numpy.from_dlpack`` (no copy), CUDA tensors through CuPy's ``from_dlpack`` (which
    gives them ``__cuda_array_interface__``; needs CuPy, not yet run on a GPU)."""
    out = list(args)
    for k, (p, a) in enumerate(zip(params, args)):
        if p.kind != "array" or isinstance(a, np.ndarray) or is_device_array(a):
            continue
        if not hasattr(a, "__dlpack__") or not hasattr(a, "__dlpack_device__"):
            continue
        device_type = int(a.__dlpack_device__()[0])
        if device_type == 1:  # kDLCPU
            out[k] = np.from_dlpack(a)
        elif device_type in (2, 3):  # kDLCUDA, kDLCUDAHost
            try:
                import cupy
            except ImportError:
                raise LaunchError(
                    kernel,
                    f"parameter '{p.name}' is a CUDA DLPack tensor; "
                    "wrapping it needs CuPy (pip install cupy-cuda12x)",
                ) from None
            out[k] = cupy.from_dlpack(a)
    return tuple(out)


def is_device_array(a: object) -> bool:
    """A GPU array: ``__cuda_array_interface__`` (CuPy, PyTorch, numba) or a numba-cuda
    device array (the simulator's carry no interface)."""
    return hasattr(a, "__cuda_array_interface__") or type(a).__name__ in DEVICE_ARRAY_TYPES


DEVICE_ARRAY_TYPES = ("DeviceNDArray", "FakeCUDAArray", "MappedNDArray", "ManagedNDArray")
