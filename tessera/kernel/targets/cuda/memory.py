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
    """``allocate(size)``: a new owned block of device memory (numba-cuda's
    ``memalloc`` in the current context unless given)."""

    def __init__(self, limit: int = LIMIT_BYTES, allocate=None):
        self.limit = limit
        self.kept = 0  # bytes of all blocks the pool keeps
        self._blocks: dict[int, list] = {}  # size class → owned blocks (numba OwnedPointer)
        self._next: dict[int, int] = {}  # size class → the block to look at first
        self._allocate = allocate
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype) -> object:
        """A device array of ``shape`` and ``dtype`` (C order) on pooled memory."""
        array_type = _ARRAY_TYPE or _device_array_type()
        if type(dtype) is not np.dtype:
            dtype = np.dtype(dtype)
        shape = tuple([int(n) for n in shape])
        nbytes = dtype.itemsize
        for n in shape:
            nbytes *= n
        block = self._block(max(-(-nbytes // _GRANULE) * _GRANULE, _GRANULE))
        if block is None:  # past the limit: numba-cuda's own allocation
            return cuda_module().device_array(shape, dtype)
        strides = _c_strides(shape, dtype.itemsize)
        return array_type(shape, strides, dtype, gpu_data=block.view(0, nbytes))

    def _block(self, size: int):
        """A free block of ``size`` bytes. The blocks of a class are looked at in turn
        from the one after the last handed out (next fit): blocks taken in a row are freed
        in about that order, so the first looked at is usually free however many arrays
        of its size are alive (a scan from the first block would pass each live one)."""
        with self._lock:
            blocks = self._blocks.get(size)
            if blocks is None:
                blocks = self._blocks[size] = []
            count = len(blocks)
            start = self._next.get(size, 0)
            for k in range(count):
                i = start + k
                if i >= count:
                    i -= count
                block = blocks[i]
                if block._mem.refct == 1:  # _free(block), inline: the launch path
                    self._next[size] = i + 1
                    return block
            if self.kept + size > self.limit:
                return None
            allocate = self._allocate or cuda_module().current_context().memalloc
            block = allocate(size)
            blocks.append(block)
            self._next[size] = 0  # (every block was looked at: start again at the first)
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
                self._next[size] = 0
            self.kept -= released
        return released


_ARRAY_TYPE = None  # numba-cuda's DeviceNDArray, imported on first use


def _device_array_type():
    global _ARRAY_TYPE
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    _ARRAY_TYPE = DeviceNDArray
    return DeviceNDArray


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
