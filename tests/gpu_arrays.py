"""numba-cuda's own device arrays over made-up addresses (nothing reads or writes them):
what an op's lowering or a launch's checks see of GPU arrays, without a GPU."""

from __future__ import annotations

import numpy as np


def made_up_gpu_array(shape, dtype=np.float32):
    from numba.cuda.cudadrv import driver
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    pointer = driver.binding.CUdeviceptr(1 << 40)
    memory = driver.AutoFreePointer(None, pointer, nbytes, finalizer=lambda: None)
    return DeviceNDArray(shape, np.empty(shape, dtype).strides, dtype, gpu_data=memory.own())
