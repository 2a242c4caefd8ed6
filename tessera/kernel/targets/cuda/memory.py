"""Device memory for the arrays the CUDA target makes (``Target.empty``: the operator
layer's results and scratch), recycled instead of allocated per call.

numba-cuda allocates with ``cuMemAlloc`` and frees with ``cuMemFree``, which waits for the
whole device: an op on device arrays paid both on every call (about 150 µs on an H100,
more than a 1024 × 1024 softmax takes). Here each block of device memory is kept by the
pool once allocated. numba-cuda counts the references to a block (every counted view of it
holds one, and drops it when collected: a slice of an array makes one). The pool keeps one
counted view of each block, made once (making one costs about 3 µs) and handed to every
array it puts on the block: so a block is free for the next array of its size class when
numba-cuda's count is back to the pool's two (the block, its view) and nothing but the
pool holds that view (no array, no reshape of one: they share their array's view). Work
on one stream is ordered, and a block reused on another named stream is ordered by the
streams' fence (streams.py), as any array is.

:func:`copy` copies one device array into another of its shape and dtype with one
asynchronous driver call on the current stream (numba-cuda's ``copy_to_device`` spends
about 200 µs of Python a call working out the arrays' layouts: more than a captured step
of twenty kernels takes to replay).

At most ``LIMIT_BYTES`` are kept; past that, arrays are allocated and freed by numba-cuda
as before. ``release()`` gives every free block back to the driver.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from ....arrays import device_info, numba_array
from . import driver as driver_module
from .runtime import cuda_module
from .streams import current_stream, fence, fence_now, fencing_on, note_gpu_work

LIMIT_BYTES = 1 << 30  # kept by the pool, in use or free
_GRANULE = 512  # sizes are rounded up to a multiple of this (one class per rounded size)


class DevicePool:
    """``allocate(size)``: a new owned block of device memory (numba-cuda's
    ``memalloc`` in the current context unless given)."""

    def __init__(self, limit: int = LIMIT_BYTES, allocate=None):
        self.limit = limit
        self.kept = 0  # bytes of all blocks the pool keeps
        self._blocks: dict[int, list] = {}  # size class → its blocks' entries (_new_view)
        self._next: dict[int, int] = {}  # size class → the block to look at first
        self._allocate = allocate
        self._lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype) -> object:
        """A device array of ``shape`` and ``dtype`` (C order) on pooled memory."""
        array_type = _ARRAY_TYPE or _device_array_type()
        if type(dtype) is not np.dtype:
            dtype = np.dtype(dtype)
        layout = _LAYOUTS.get((shape, dtype)) if type(shape) is tuple else None
        if layout is None:
            layout = _layout(shape, dtype)
        shape, strides, nbytes = layout
        if not nbytes:  # (numba-cuda gives an empty array a null pointer of its own)
            return array_type(shape, strides, dtype, gpu_data=None)
        view = self._view(max(-(-nbytes // _GRANULE) * _GRANULE, _GRANULE), nbytes)
        if view is None:  # past the limit: numba-cuda's own allocation
            return cuda_module().device_array(shape, dtype)
        return numba_array(array_type, shape, strides, dtype, view)

    def _view(self, size: int, nbytes: int):
        """The counted view of ``nbytes`` of a free block of ``size`` bytes. The blocks of
        a class are looked at in turn from the one after the last handed out (next fit):
        blocks taken in a row are freed in about that order, so the first looked at is
        usually free however many arrays of its size are alive (a scan from the first
        block would pass each live one)."""
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
                entry = blocks[i]
                # _free(entry), inline (the launch path)
                if entry[0]._mem.refct == 2 and sys.getrefcount(entry[1]) == entry[2]:
                    self._next[size] = i + 1
                    if entry[3] != nbytes:
                        _new_view(entry, nbytes)
                    return entry[1]
            if self.kept + size > self.limit:
                return None
            allocate = self._allocate or cuda_module().current_context().memalloc
            entry = [allocate(size), None, 0, 0]
            _new_view(entry, nbytes)
            blocks.append(entry)
            self._next[size] = 0  # (every block was looked at: start again at the first)
            self.kept += size
            return entry[1]

    def release(self) -> int:
        """Give every free block back to the driver; returns the bytes released."""
        released = 0
        with self._lock:
            for size, blocks in self._blocks.items():
                keep = [e for e in blocks if not _free(e)]
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


_LAYOUTS: dict = {}  # (shape, dtype) → (shape as ints, C strides, bytes), worked out once


def _layout(shape, dtype: np.dtype) -> tuple:
    ints = tuple([int(n) for n in shape])
    nbytes = dtype.itemsize
    for n in ints:
        nbytes *= n
    layout = (ints, _c_strides(ints, dtype.itemsize), nbytes)
    if type(shape) is tuple:
        if len(_LAYOUTS) >= 4096:
            _LAYOUTS.clear()
        _LAYOUTS[shape, dtype] = layout
    return layout


# A block's entry: [block (numba-cuda's owned pointer), its counted view handed to arrays,
# sys.getrefcount of that view while only the entry holds it, the view's size in bytes]


def _new_view(entry: list, nbytes: int) -> None:
    """Give the entry of a free block a counted view of its first ``nbytes``."""
    entry[1] = None  # (the old view's count dropped first)
    entry[1] = entry[0].view(0, nbytes)
    entry[2] = sys.getrefcount(entry[1])  # (read as _free reads it)
    entry[3] = nbytes


def _free(entry: list) -> bool:
    """Whether only the pool holds the block of ``entry``: numba-cuda counts the block and
    its view, and nothing but the entry holds the view."""
    return entry[0]._mem.refct == 2 and sys.getrefcount(entry[1]) == entry[2]


def _c_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    strides, step = [], itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


POOL = DevicePool()


def copy(dst, src) -> None:
    """``dst[...] = src`` for device arrays of one shape and dtype. Where both are
    contiguous: one ``cuMemcpyDtoDAsync`` on the current stream, fenced as a launch is
    (ordered after other streams' work on either array); otherwise numba-cuda's copy."""
    to, of = device_info(dst), device_info(src)
    if to is None or of is None or to[1] != of[1] or to[3] != of[3]:
        dst.copy_to_device(src)
        return
    shape, itemsize = to[1], to[3].itemsize
    contiguous = _c_strides(shape, itemsize)
    nbytes = itemsize
    for n in shape:
        nbytes *= n
    if nbytes > itemsize and (to[2] != contiguous or of[2] != contiguous):
        dst.copy_to_device(src)  # strided: numba-cuda works the layouts out
        return
    if not nbytes:
        return
    stream = current_stream()
    if fencing_on[0] and fence_now():
        fence(stream, [to[0], of[0]])
    driver = driver_module.DRIVER
    ensure = getattr(driver, "ensure_context", None)  # (a recording stand-in has none)
    if ensure is not None:
        ensure()
    driver.copy_device(to[0], of[0], nbytes, driver.stream_handle(stream))
    note_gpu_work()
