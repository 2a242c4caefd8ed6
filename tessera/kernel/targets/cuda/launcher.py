"""The direct launch path: one ``cuLaunchKernel`` per launch, no numba-cuda dispatcher.

Per compiled specialisation a :class:`DirectLauncher` holds the CUfunction, the block
shape, the shared bytes and a parameter block laid out as the kernel's argument ABI
(abi.py), built once. A launch reads each GPU array's pointer, shape and strides through
its type's cheapest accessor (``arrays.device_info``), writes the slots, and calls the
driver once. numba-cuda compiles (toolchain.py) and runs the simulator; it is not on this
path.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ....arrays import BF16, DeviceArg, device_info
from ....dtypes import FP8
from . import driver as driver_module
from .abi import COMPLEX, arg_layouts

_CTYPES = {
    "int8": ctypes.c_int8,
    "int16": ctypes.c_int16,
    "int32": ctypes.c_int32,
    "int64": ctypes.c_int64,
    "uint8": ctypes.c_uint8,
    "uint16": ctypes.c_uint16,
    "uint32": ctypes.c_uint32,
    "uint64": ctypes.c_uint64,
    "bool": ctypes.c_uint8,
    "float16": ctypes.c_uint16,  # its bits
    "float32": ctypes.c_float,
    "float64": ctypes.c_double,
}


class ParamBlock:
    """The ``void*[]`` that ``cuLaunchKernel`` reads: per PTX parameter the address of a
    place holding its value — an 8-byte cell of ``cells`` for an array's words, a ctypes
    value of the scalar's own C type for a scalar. Built once; launches only write."""

    def __init__(self, slots):
        count = max(len(slots), 1)
        self.cells = (ctypes.c_int64 * count)()
        base = ctypes.addressof(self.cells)
        self.scalars = {k: _CTYPES[s.kind]() for k, s in enumerate(slots) if s.kind}
        addresses = [
            ctypes.addressof(self.scalars[k]) if k in self.scalars else base + 8 * k
            for k in range(len(slots))
        ]
        self.pointers = (ctypes.c_void_p * count)(*addresses)
        self.address = ctypes.addressof(self.pointers)

    def read(self, k: int, size: int) -> bytes:
        """The ``size`` bytes the driver copies for parameter ``k``."""
        return ctypes.string_at(self.pointers[k], size)


class DirectLauncher:
    """Launch one compiled kernel with ``cuLaunchKernel``.

    ``argtypes`` is the numba signature it was compiled for (arrays, scalars, symbols,
    grid extents, alignment flags: the codegen's order); ``function`` its CUfunction;
    ``names`` label the parameter slots in errors and tests.
    """

    def __init__(self, name: str, function, argtypes, names=None):
        self.name = name
        self.function = function
        self.layouts, self.slots = arg_layouts(argtypes, names)
        self.block = ParamBlock(self.slots)
        self.driver = driver_module.DRIVER
        self._launch, self._ok = self.driver.launcher()
        # a thread's first launch makes the context current there (numba-cuda's dispatcher
        # did so on every call; a launch from a worker thread needs it too)
        self._ensure_context = getattr(self.driver, "ensure_context", None)
        self._shared_allowed = 48 * 1024
        # per array argument (shape, strides, bytes) its slots hold: a launch writes an
        # array's shape words only when they change (its pointer every time)
        self._held: list = [None] * len(self.layouts)
        self.array_bytes = [0]  # the bytes of the arrays the block holds, summed
        # what pack() walks: arrays (position, first slot, dims), plain scalars (position,
        # their ctypes value, its conversion), and f16 and complex scalars (position, writer)
        self._array_at, self._plain, self._special = [], [], []
        for k, lay in enumerate(self.layouts):
            if lay.kind == "array":
                self._array_at.append((k, lay.first, lay.ndim))
            elif lay.kind in COMPLEX or lay.kind == "float16":
                self._special.append((k, self._writer(lay)))
            else:
                convert = float if lay.kind.startswith("float") else int
                self._plain.append((k, self.block.scalars[lay.first], convert))

    def _writer(self, lay):
        cell = self.block.scalars[lay.first]
        if lay.kind in COMPLEX:
            imag = self.block.scalars[lay.first + 1]

            def write_complex(value):
                cell.value, imag.value = value.real, value.imag

            return write_complex

        def write_half(value):
            cell.value = int(np.float16(value).view(np.uint16))

        return write_half

    def pack(self, args) -> None:
        """Write the cells of one launch's arguments: each array's pointer, its shape
        words where they changed, and each scalar (the launch path: written for speed)."""
        cells, held = self.block.cells, self._held
        for k, first, ndim in self._array_at:
            a = args[k]
            if type(a) is DeviceArg:  # read by the launch's check
                pointer, shape, strides, dtype, _ = a
            else:
                info = device_info(a)
                if info is None:
                    raise TypeError(f"argument {k} is not a GPU array")
                pointer, shape, strides, dtype = info
            cells[first + 4] = pointer
            last = held[k]
            if last is None or last[0] != shape or last[1] != strides:
                self._write_shape(k, first, ndim, shape, strides, dtype.itemsize)
        for k, cell, convert in self._plain:
            cell.value = convert(args[k])
        for k, write in self._special:
            write(args[k])

    def _write_shape(self, k: int, first: int, ndim: int, shape, strides, itemsize: int):
        """Write an array's words other than its pointer: its items, item size, shape and
        strides."""
        cells = self.block.cells
        nitems = 1
        for d in range(ndim):
            cells[first + 5 + d] = shape[d]
            cells[first + 5 + ndim + d] = strides[d]
            nitems *= shape[d]
        cells[first + 2] = nitems
        cells[first + 3] = itemsize
        last = self._held[k]
        self.array_bytes[0] += nitems * itemsize - (0 if last is None else last[2])
        self._held[k] = (shape, strides, nitems * itemsize)

    def allow_shared(self, nbytes: int) -> None:
        """Opt in to ``nbytes`` of dynamic shared memory (once per size above 48 KiB)."""
        if nbytes > self._shared_allowed:
            self.driver.allow_dynamic_shared(self.function, nbytes)
            self._shared_allowed = nbytes

    def launch(self, args, blocks: int, threads: int, shared: int, stream) -> None:
        """Pack ``args`` and launch ``blocks`` blocks of ``threads`` on ``stream`` (a
        numba-cuda stream or 0): one driver call."""
        self.pack(args)
        self.launch_packed(blocks, threads, shared, stream)

    def launch_packed(self, blocks: int, threads: int, shared: int, stream) -> None:
        """Launch with the arguments :meth:`pack` wrote."""
        if self._ensure_context is not None:
            self._ensure_context()
        handle = 0 if stream == 0 else stream_handle(stream, self.driver)
        err = self._launch(
            self.function, blocks, 1, 1, threads, 1, 1, shared, handle, self.block.address, 0
        )
        if err[0] != self._ok:
            raise self.driver.launch_failed(err[0], self.name)


def stream_handle(stream, driver) -> int:
    """The CUstream of a numba-cuda stream, read once and kept on the stream object."""
    handle = getattr(stream, "_tessera_handle", None)
    if handle is None:
        handle = driver.stream_handle(stream)
        try:
            stream._tessera_handle = handle
        except AttributeError:  # a stream type that takes no attributes: read every time
            pass
    return handle


FP8_DTYPES = tuple(d.np_dtype for d in FP8)


def storage_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel's code sees for a GPU array of ``dtype`` (bf16 and the 8-bit
    floats as their bits)."""
    if dtype in FP8_DTYPES:
        return np.dtype(np.uint8)
    return np.dtype(np.uint16) if dtype == BF16 else dtype
