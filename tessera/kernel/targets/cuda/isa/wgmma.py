"""``wgmma.mma_async`` as data: shapes, shared-memory matrix descriptors and swizzles
(PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate", sm_90a).

One ``wgmma.mma_async.sync.aligned.m64nNkK`` computes ``D = A @ B + D`` for a warpgroup
(4 warps, 128 threads): A is 64 x K, B is K x N, D (the accumulator, in registers) 64 x N.
A and B are read from shared memory through 64-bit *matrix descriptors*:

===========  =====================================================================
bits 0-13    the matrix's start address in shared memory, ``(addr & 0x3FFFF) >> 4``
bits 16-29   the leading dimension byte offset, ``>> 4``
bits 32-45   the stride dimension byte offset, ``>> 4``
bits 49-51   the base offset (the address's bits 7-9 when a swizzle pattern does not
             start on its repeat boundary; 0 otherwise)
bits 62-63   the swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte
===========  =====================================================================

The swizzles permute 16-byte chunks within rows of 32, 64 or 128 bytes: byte offset ``o``
goes to ``o ^ (((o >> 7) & m) << 4)`` with ``m`` 1, 3 or 7 (CuTe's ``Swizzle<1|2|3, 4,
3>``): in the 128-byte mode, chunk ``c`` of row ``r`` (rows of 128 bytes) lands in chunk
``c ^ (r % 8)``, so the 8 rows a warp's quarter reads column-wise fall in 8 different
16-byte bank groups. A K-major operand tile of 128-byte rows is stored as *atoms* of 8 rows
x 128 bytes (1 KiB): the stride byte offset steps from one 8-row atom to the next along
M (or N), the leading byte offset is unused (ignored) for swizzled K-major layouts.

The accumulator's register layout is ``layout.wgmma_acc`` (kernel/layout.py): each warp of
the group owns 16 rows, laid as ``mma.sync``'s m16n8 accumulator repeated N/8 times along
the columns. tests/test_isa_hopper.py checks all of this against NumPy models written from
the ISA's wording; the instructions' use in generated code is still to come (GPU.md §4).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SWIZZLE_MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}  # the descriptor's bits 62-63
SWIZZLE_BYTES = {"none": 16, "32B": 32, "64B": 64, "128B": 128}  # a swizzled row's span
_SWIZZLE_MASK = {"none": 0, "32B": 1, "64B": 3, "128B": 7}
ATOM_ROWS = 8  # rows of one swizzle atom

# K per instruction by input type, and the accumulator types each may use
K_OF = {"f16": 16, "bf16": 16, "tf32": 8, "e4m3": 32, "e5m2": 32, "s8": 32, "u8": 32}
ACCUMULATORS = {
    "f16": ("f16", "f32"),
    "bf16": ("f32",),
    "tf32": ("f32",),
    "e4m3": ("f16", "f32"),
    "e5m2": ("f16", "f32"),
    "s8": ("s32",),
    "u8": ("s32",),
}


def valid_n(n: int, dtype: str) -> bool:
    """Whether ``n`` is an N of ``wgmma`` for inputs of ``dtype``: multiples of 8 from 8 to
    256 for floating-point inputs; 8, 16, 24 and then multiples of 16 up to 256 for the
    8-bit integers."""
    if dtype in ("s8", "u8"):
        return n in (8, 16, 24) or (32 <= n <= 256 and n % 16 == 0)
    return 8 <= n <= 256 and n % 8 == 0


def swizzle(offset: int, mode: str) -> int:
    """Where byte ``offset`` of a tile (rows of the mode's span) goes in shared memory."""
    return offset ^ (((offset >> 7) & _SWIZZLE_MASK[mode]) << 4)


@dataclass(frozen=True)
class Descriptor:
    """A wgmma matrix descriptor's fields (byte values; :meth:`encode` packs them)."""

    address: int  # the matrix's start in the shared window (bytes)
    leading_bytes: int = 0  # leading dimension byte offset
    stride_bytes: int = 0  # stride dimension byte offset
    base_offset: int = 0
    swizzle: str = "128B"

    def encode(self) -> int:
        for name, value in (
            ("address", self.address),
            ("leading_bytes", self.leading_bytes),
            ("stride_bytes", self.stride_bytes),
        ):
            if value % 16 or not 0 <= value < 1 << 18:
                raise ValueError(
                    f"a descriptor's {name} must be a multiple of 16 below 256 KiB, not {value}"
                )
        if not 0 <= self.base_offset < 8:
            raise ValueError(f"base_offset {self.base_offset} is 3 bits")
        return (
            (self.address & 0x3FFFF) >> 4
            | ((self.leading_bytes & 0x3FFFF) >> 4) << 16
            | ((self.stride_bytes & 0x3FFFF) >> 4) << 32
            | self.base_offset << 49
            | SWIZZLE_MODES[self.swizzle] << 62
        )

    @classmethod
    def decode(cls, bits: int) -> Descriptor:
        modes = {v: k for k, v in SWIZZLE_MODES.items()}
        return cls(
            address=(bits & 0x3FFF) << 4,
            leading_bytes=(bits >> 16 & 0x3FFF) << 4,
            stride_bytes=(bits >> 32 & 0x3FFF) << 4,
            base_offset=bits >> 49 & 7,
            swizzle=modes[bits >> 62 & 3],
        )

    def advance(self, nbytes: int) -> Descriptor:
        """The descriptor of the matrix ``nbytes`` further on (the next K step within a
        swizzled row moves the start address; the swizzle stays the atom's)."""
        return Descriptor(
            self.address + nbytes,
            self.leading_bytes,
            self.stride_bytes,
            self.base_offset,
            self.swizzle,
        )


def k_major(address: int, rows: int, row_bytes: int, swizzle_mode: str = "128B") -> Descriptor:
    """The descriptor of a K-major operand tile (``rows`` of M or N, each ``row_bytes`` of
    K) stored as swizzle atoms of 8 rows at ``address``: the stride byte offset is one
    atom (8 rows of the swizzle's span)."""
    span = SWIZZLE_BYTES[swizzle_mode]
    if row_bytes != span:
        raise ValueError(f"a {swizzle_mode} K-major tile has rows of {span} bytes, not {row_bytes}")
    if rows % ATOM_ROWS:
        raise ValueError(f"{rows} rows are not whole atoms of {ATOM_ROWS}")
    if swizzle_mode != "none" and address % (ATOM_ROWS * span):
        raise ValueError(f"a swizzled tile starts on a {ATOM_ROWS * span}-byte boundary")
    return Descriptor(address, 16, ATOM_ROWS * span, 0, swizzle_mode)


def stored_offset(row: int, k_byte: int, mode: str = "128B") -> int:
    """Where byte ``k_byte`` of row ``row`` of a K-major tile in ``mode``'s atoms lives,
    from the tile's start: the atom, then the swizzled offset within it."""
    span = SWIZZLE_BYTES[mode]
    atom, r = divmod(row, ATOM_ROWS)
    return atom * ATOM_ROWS * span + swizzle(r * span + k_byte, mode)


def instruction(
    n: int, dtype: str, acc: str, scale_d: str = "p", trans_a: int = 0, trans_b: int = 0
) -> str:
    """The PTX of one ``wgmma`` with both operands from descriptors (``{d...}`` stands
    for the N/2 accumulator registers the code generator names); ``trans_a``/``trans_b``
    (16-bit inputs only): 1 for an MN-major operand, 0 for K-major."""
    if dtype not in K_OF:
        raise ValueError(f"wgmma has no {dtype} inputs; it takes {', '.join(K_OF)}")
    if acc not in ACCUMULATORS[dtype]:
        raise ValueError(f"wgmma of {dtype} accumulates in {', '.join(ACCUMULATORS[dtype])}")
    if not valid_n(n, dtype):
        raise ValueError(f"N={n} is not a wgmma N for {dtype}")
    k = K_OF[dtype]
    head = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{acc}.{dtype}.{dtype}"
    if dtype in ("s8", "u8"):
        tail = ""
    elif dtype in ("tf32", "e4m3", "e5m2"):
        tail = ", 1, 1"
    else:
        tail = f", 1, 1, {trans_a}, {trans_b}"
    return f"{head} {{d...}}, descA, descB, {scale_d}{tail};"


def operand(smem, desc: Descriptor, rows: int, k: int, dtype):
    """The ``rows`` x ``k`` matrix a K-major descriptor reads from shared memory (a byte
    array): row ``r``'s ``j``-th element is at the swizzle of ``address + (r // 8) *
    stride_bytes + (r % 8) * span + j * itemsize`` (the swizzle is a function of the
    address, which is why a swizzled tile starts on its repeat boundary)."""
    dtype = np.dtype(dtype)
    span = SWIZZLE_BYTES[desc.swizzle]
    out = np.empty((rows, k), dtype)
    for r in range(rows):
        start = desc.address + (r // ATOM_ROWS) * desc.stride_bytes + (r % ATOM_ROWS) * span
        for j in range(k):
            at = swizzle(start + j * dtype.itemsize, desc.swizzle)
            out[r, j] = smem[at : at + dtype.itemsize].view(dtype)[0]
    return out


def execute(smem, desc_a: Descriptor, desc_b: Descriptor, n: int, dtype):
    """What one ``wgmma.m64nNk16`` (16-bit inputs, both K-major) adds to its accumulator:
    A (64 x 16, from ``desc_a``) times B (16 x N, stored as N rows of K, from ``desc_b``),
    in f32: the model the code generator's use of descriptors is checked against."""
    k = 16
    a = operand(smem, desc_a, 64, k, dtype).astype(np.float32)
    b = operand(smem, desc_b, n, k, dtype).astype(np.float32)
    return a @ b.T
