"""Device memory for the arrays the CUDA target makes (``Target.empty``: the operator
layer's results and scratch), recycled instead of allocated per call.

numba-cuda allocates with ``cuMemAlloc`` and frees with ``cuMemFree``, which waits for the
whole device: an op on device arrays paid both on every call (about 150 µs on an H100,
more than a 1024 × 1024 softmax takes). Here each block of device memory is kept by the
pool once allocated. numba-cuda counts the references to a block (every array and view of
it holds one, and drops it when collected); an array is handed a counted view of a block,
so a block whose count is back to the pool's own is free for the next array of its size
class. Work on one stream is ordered, and a block reused on another named stream is
ordered by the streams' fence (streams.py), as any array is.

At most ``LIMIT_BYTES`` are kept; past that, arrays are allocated and freed by numba-cuda
as before. ``release()`` gives every free block back to the driver.
"""

from __future__ import annotations

import threading

import numpy as np

from .runtime import cuda_module

LIMIT_BYTES = 1 << 30  # kept by the pool, in use or free
_GRANULE = 512  # sizes are rounded up to a multiple of this (one class per rounded size)


class DevicePool:
    def __init__(self, limit: int = LIMIT_BYTES):
        self.limit = limit
        self.kept = 0  # bytes of all blocks the pool keeps
        self._blocks: dict[int, list] = {}  # size class → owned blocks (numba OwnedPointer)
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype) -> object:
        """A device array of ``shape`` and ``dtype`` (C order) on pooled memory."""
        from numba.cuda.cudadrv.devicearray import DeviceNDArray

        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        nbytes = dtype.itemsize
        for n in shape:
            nbytes *= n
        block = self._block(max(-(-nbytes // _GRANULE) * _GRANULE, _GRANULE))
        if block is None:  # past the limit: numba-cuda's own allocation
            return cuda_module().device_array(shape, dtype)
        strides = _c_strides(shape, dtype.itemsize)
        return DeviceNDArray(shape, strides, dtype, gpu_data=block.view(0, nbytes))

    def _block(self, size: int):
        with self._lock:
            blocks = self._blocks.setdefault(size, [])
            for block in blocks:
                if _free(block):
                    return block
            if self.kept + size > self.limit:
                return None
            block = cuda_module().current_context().memalloc(size)
            blocks.append(block)
            self.kept += size
            return block

    def release(self) -> int:
        """Give every free block back to the driver; returns the bytes released."""
        released = 0
        with self._lock:
            for size, blocks in self._blocks.items():
                keep = [b for b in blocks if not _free(b)]
                released += size * (len(blocks) - len(keep))
                blocks[:] = keep
            self.kept -= released
        return released


def _free(block) -> bool:
    """Whether only the pool holds ``block`` (numba-cuda's count of its owners is 1)."""
    return block._mem.refct == 1


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


POOL = DevicePool()
