"""TMA tensor maps as data: the arguments of ``cuTensorMapEncodeTiled`` and what a box
load (``cp.async.bulk.tensor``) puts in shared memory (CUDA driver API, "Tensor Map
Object Management"; PTX ISA, "Tensor copy": sm_90).

A tensor map describes a global array (rank 1-5, dims innermost first, strides in bytes
for every dim but the innermost) and the *box* one copy moves (at most 256 elements per
dim, its innermost extent a multiple of 16 bytes, and with a swizzle no wider than the
swizzle's span). :func:`tensor_map` checks a NumPy-ordered description against the
driver's documented rules and gives the encode call's arguments
(:meth:`TensorMap.encode_args`); :func:`box_load` is the copy's model: the box at given
coordinates, zero where it falls outside the array (what makes a TMA load a masked
block load), laid out in shared memory by the swizzle (isa/wgmma.py ``swizzle``).
tests/test_isa_hopper.py checks both; the driver call itself needs a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .wgmma import swizzle

# cuda.h's CUtensorMapDataType, by NumPy dtype name (bf16 as ml_dtypes names it)
DATA_TYPES = {
    "uint8": 0,
    "uint16": 1,
    "uint32": 2,
    "int32": 3,
    "uint64": 4,
    "int64": 5,
    "float16": 6,
    "float32": 7,
    "float64": 8,
    "bfloat16": 9,
}
SWIZZLES = {"none": 0, "32B": 1, "64B": 2, "128B": 3}  # CUtensorMapSwizzle
SPAN = {"none": None, "32B": 32, "64B": 64, "128B": 128}
MAX_BOX = 256
ALIGN = 16  # bytes: the global address and every stride


def load_ptx(rank: int, dst: str, tmap: str, coords: list[str], bar: str) -> str:
    """The PTX of one box load into shared memory completing on mbarrier ``bar``
    (coordinates innermost first, as the tensor map's dims)."""
    if len(coords) != rank or not 1 <= rank <= 5:
        raise ValueError(f"a {rank}-d box load takes {rank} coordinates")
    return (
        f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes "
        f"[{dst}], [{tmap}, {{{', '.join(coords)}}}], [{bar}];"
    )


FENCE_PROXY_ASYNC = "fence.proxy.async.shared::cta;"  # generic stores -> async-proxy reads


class TensorMapError(ValueError):
    """A description the driver would refuse (the message says which rule)."""


@dataclass(frozen=True)
class TensorMap:
    """A tiled tensor map, in the driver's order (innermost dim first)."""

    dtype: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, dims 1..rank-1
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str = "128B"
    oob_nan: bool = False  # out-of-bounds elements read as NaN instead of zero (floats)

    def encode_args(self, address: int) -> tuple:
        """The arguments of ``cuTensorMapEncodeTiled`` after the output pointer: data type,
        rank, address, dims, strides, box, element strides, interleave (none), swizzle, L2
        promotion (128 bytes) and out-of-bounds fill."""
        if address % ALIGN:
            raise TensorMapError(f"the global address must be {ALIGN}-byte aligned")
        return (
            DATA_TYPES[self.dtype],
            len(self.dims),
            address,
            self.dims,
            self.strides,
            self.box,
            self.element_strides,
            0,
            SWIZZLES[self.swizzle],
            2,
            int(self.oob_nan),
        )


def tensor_map(shape, strides_bytes, dtype, box, swizzle_mode: str = "128B") -> TensorMap:
    """The tensor map of an array of NumPy ``shape`` and byte ``strides_bytes`` whose
    copies move boxes of NumPy shape ``box``; raises TensorMapError where the driver
    would refuse it."""
    dtype = np.dtype(dtype)
    if dtype.name not in DATA_TYPES:
        raise TensorMapError(f"TMA has no {dtype.name} elements")
    shape, strides_bytes, box = tuple(shape), tuple(strides_bytes), tuple(box)
    if not 1 <= len(shape) <= 5 or len(box) != len(shape) or len(strides_bytes) != len(shape):
        raise TensorMapError("a tensor map has rank 1 to 5, with a box and strides per dim")
    item = dtype.itemsize
    if strides_bytes[-1] != item:
        raise TensorMapError("the innermost dim must be contiguous (its stride the element)")
    for n in shape:
        if not 1 <= n <= 1 << 32:
            raise TensorMapError(f"a dim of {n} elements is outside [1, 2^32]")
    for s in strides_bytes[:-1]:
        if s % ALIGN or not 0 < s < 1 << 40:
            raise TensorMapError(f"a stride of {s} bytes is not a multiple of 16 below 2^40")
    for b in box:
        if not 1 <= b <= MAX_BOX:
            raise TensorMapError(f"a box extent of {b} is outside [1, {MAX_BOX}]")
    inner = box[-1] * item
    if inner % ALIGN:
        raise TensorMapError(f"the box's rows are {inner} bytes, not a multiple of 16")
    span = SPAN[swizzle_mode]
    if span is not None and inner > span:
        raise TensorMapError(f"a {swizzle_mode} swizzle takes box rows of at most {span} bytes")
    return TensorMap(
        dtype.name,
        tuple(reversed(shape)),
        tuple(reversed(strides_bytes[:-1])),
        tuple(reversed(box)),
        (1,) * len(shape),
        swizzle_mode,
    )


def box_load(array: np.ndarray, tmap: TensorMap, coords) -> np.ndarray:
    """The bytes one copy of the box at NumPy ``coords`` (its first element's index; may
    be negative or past the end) leaves in shared memory: the box in row-major order,
    zero (or NaN) outside the array, with each row's 16-byte chunks swizzled."""
    box = tuple(reversed(tmap.box))
    out = np.zeros(box, array.dtype)
    if tmap.oob_nan:
        out[...] = np.nan
    src, dst = [], []
    for c, b, n in zip(coords, box, array.shape):
        lo, hi = max(c, 0), min(c + b, n)
        src.append(slice(lo, max(hi, lo)))
        dst.append(slice(lo - c, lo - c + max(hi - lo, 0)))
    out[tuple(dst)] = array[tuple(src)]
    raw = out.reshape(-1).view(np.uint8)
    if tmap.swizzle == "none":
        return raw.copy()
    placed = np.empty_like(raw)
    offsets = np.arange(raw.size)
    placed[[swizzle(int(o), tmap.swizzle) for o in offsets]] = raw
    return placed
