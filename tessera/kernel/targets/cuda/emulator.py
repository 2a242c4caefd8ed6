"""A lockstep emulator of one CUDA block for register-tile code, in NumPy (no GPU).

Register-tile code (mainloop.py) has block-uniform control flow: every branch and loop
bound is the same for all threads, and what differs between threads is index arithmetic.
So one block runs as *one* Python execution of the generated source in which every
per-thread value is a NumPy vector over the block's threads (``_lane`` is
``arange(threads)``). The inline-PTX intrinsics get NumPy twins written from the PTX ISA
tables (isa/mma_sync.py, isa/ldmatrix.py), not from the generated code's index math, so
a run checks the fragment layouts, the swizzles and the pipeline:

* shared memory is a byte array; ``cp.async`` copies land when ``cp.async.wait_group``
  lets them (``eager=False``) or at once (``eager=True``), so a read that relies on
  timing finds stale bytes in one of the two runs;
* a shadow state per 16-byte chunk flags reads of data in flight or not yet behind a
  barrier (RAW), and writes into a chunk read since the last barrier (WAR);
* the bank model (isa/banks.py) counts extra wavefronts of every ``ldmatrix``, 16-byte
  ``cp.async`` and shared 4- or 8-byte load (``stats``);
* global memory is the registered NumPy arrays: every access is bounds- and
  alignment-checked.

:func:`run_mainloop` runs one main loop of a plan on NumPy arrays.
"""

from __future__ import annotations

import functools
import types

import ml_dtypes
import numpy as np

from ...layout import WARP
from . import mma
from .isa import banks
from .isa.ldmatrix import Ldmatrix
from .isa.mma_sync import M8N8K4_F64, M16N8K16_BF16, M16N8K16_F16
from .mainloop import Operands, emit

CHUNK = 16
NEVER, IN_FLIGHT, DONE = 0, 1, 2


class EmulatorError(AssertionError):
    """A hazard or an invalid access the hardware would not forgive."""


class _Local:
    """``cuda.local.array(n, dtype)``: one row per element, one column per thread."""

    def __init__(self, n: int, dtype, threads: int):
        self.data = np.zeros((n, threads), dtype=dtype)

    def __getitem__(self, i):
        return self.data[i].copy()

    def __setitem__(self, i, value):
        self.data[i] = value


def _owner(arr: np.ndarray) -> np.ndarray:
    while isinstance(arr.base, np.ndarray):
        arr = arr.base
    if not arr.flags.c_contiguous:
        raise EmulatorError("global arrays must be views of contiguous NumPy arrays")
    return arr


class BlockEmulator:
    """One block of ``threads`` threads with ``smem_bytes`` of shared memory starting at
    shared address ``smem_base`` (a misaligned base tests the code's rounding up)."""

    def __init__(self, threads: int, smem_bytes: int, eager: bool = False, smem_base: int = 48):
        if threads % WARP:
            raise ValueError("a block of whole warps")
        self.threads, self.eager, self.smem_base = threads, eager, smem_base
        self.smem = np.zeros(smem_base + smem_bytes, np.uint8)
        chunks = len(self.smem) // CHUNK + 1
        self.state = np.zeros(chunks, np.int8)
        self.done_epoch = np.full(chunks, -1, np.int64)
        self.read_epoch = np.full(chunks, -1, np.int64)
        self.epoch = 0
        self.open_group: list = []
        self.groups: list[list] = []
        self.owners: list[np.ndarray] = []
        self.stats = dict.fromkeys(
            (
                "ldmatrix",
                "ldmatrix_conflicts",
                "lds128",
                "lds128_conflicts",
                "lds64",
                "lds64_conflicts",
                "lds32",
                "lds32_conflicts",
                "cp16",
                "cp16_conflicts",
                "mma",
                "st16",
                "st32",
                "st64",
            ),
            0,
        )

    # ------------------------------------------------------------------ global memory
    def _base(self, k: int) -> int:
        return ((k + 1) << 40) + self.owners[k].ctypes.data % 256

    def gaddr(self, arr: np.ndarray) -> int:
        owner = _owner(arr)
        k = next((i for i, o in enumerate(self.owners) if o is owner), None)
        if k is None:
            self.owners.append(owner)
            k = len(self.owners) - 1
        return self._base(k) + (arr.ctypes.data - owner.ctypes.data)

    def _global(self, addr, size: int, active) -> tuple[np.ndarray, np.ndarray]:
        """(owner bytes, byte offsets) of the active accesses of ``size`` bytes."""
        addr = np.broadcast_to(np.asarray(addr, np.int64), (self.threads,))[active]
        if not addr.size:
            return np.zeros(0, np.uint8), addr
        k = addr >> 40
        if np.any(k != k[0]) or not 1 <= k[0] <= len(self.owners):
            raise EmulatorError("a global access outside the registered arrays")
        k = int(k[0]) - 1
        off = addr - self._base(k)
        data = self.owners[k].reshape(-1).view(np.uint8)
        if np.any(off < 0) or np.any(off + size > data.size):
            raise EmulatorError(f"global access out of bounds ({off.min()}..{off.max()})")
        if np.any((addr % size) != 0):
            raise EmulatorError(f"misaligned {size}-byte global access")
        return data, off

    # ------------------------------------------------------------------ shared memory
    def saddr(self, arr) -> int:
        return self.smem_base

    def _chunks(self, addr: np.ndarray) -> np.ndarray:
        if np.any(addr < self.smem_base) or np.any(addr >= len(self.smem)):
            raise EmulatorError("a shared access outside the block's shared memory")
        return addr // CHUNK

    def _read_check(self, chunks: np.ndarray) -> None:
        if np.any(self.state[chunks] != DONE):
            raise EmulatorError("ldmatrix reads shared bytes still in flight or never written")
        if np.any(self.done_epoch[chunks] >= self.epoch):
            raise EmulatorError("ldmatrix reads shared bytes written since the last barrier")
        self.read_epoch[chunks] = self.epoch

    def _write_check(self, chunks: np.ndarray, what: str) -> None:
        if np.any(self.read_epoch[chunks] == self.epoch):
            raise EmulatorError(f"{what} into shared bytes read since the last barrier (WAR)")

    # ------------------------------------------------------------------ intrinsics
    def cp16(self, dst, src, nbytes) -> None:
        dst = np.broadcast_to(np.asarray(dst, np.int64), (self.threads,))
        nbytes = np.broadcast_to(np.asarray(nbytes, np.int64), (self.threads,))
        if np.any(dst % CHUNK) or np.any((nbytes != 0) & (nbytes != 16)):
            raise EmulatorError("cp.async of 16 bytes to a misaligned address or size")
        data, off = self._global(src, CHUNK, nbytes > 0)
        values = np.zeros((self.threads, CHUNK), np.uint8)
        values[nbytes > 0] = data[off[:, None] + np.arange(CHUNK)]
        chunks = self._chunks(dst)
        self._write_check(chunks, "cp.async")
        self.state[chunks] = IN_FLIGHT
        for w in range(self.threads // WARP):
            lanes = slice(w * WARP, (w + 1) * WARP)
            self.stats["cp16_conflicts"] += banks.extra_wavefronts(dst[lanes], CHUNK)
        self.stats["cp16"] += 1
        self.open_group.append((dst.copy(), values))
        if self.eager:
            self.smem[dst[:, None] + np.arange(CHUNK)] = values

    def commit(self) -> None:
        self.groups.append(self.open_group)
        self.open_group = []

    def wait(self, pending: int) -> None:
        if self.open_group:
            raise EmulatorError("cp.async.wait_group with copies never committed")
        landing = self.groups[: len(self.groups) - pending] if pending else self.groups
        for group in landing:
            for dst, values in group:
                self.smem[dst[:, None] + np.arange(CHUNK)] = values
                chunks = dst // CHUNK
                self.state[chunks] = DONE
                self.done_epoch[chunks] = self.epoch
        self.groups = self.groups[len(landing) :]

    def syncthreads(self) -> None:
        self.epoch += 1

    def ld16(self, src, ok) -> np.ndarray:
        ok = np.broadcast_to(np.asarray(ok, bool), (self.threads,))
        data, off = self._global(src, 2, ok)
        out = np.zeros(self.threads, np.uint32)
        out[ok] = data[off].astype(np.uint32) | (data[off + 1].astype(np.uint32) << 8)
        return out

    def ld8(self, src, ok) -> np.ndarray:
        ok = np.broadcast_to(np.asarray(ok, bool), (self.threads,))
        data, off = self._global(src, 1, ok)
        out = np.zeros(self.threads, np.uint32)
        out[ok] = data[off]
        return out

    def st8(self, dst, bits) -> None:
        dst = np.broadcast_to(np.asarray(dst, np.int64), (self.threads,))
        chunks = self._chunks(dst)
        self._write_check(chunks, "st.shared")
        bits = np.broadcast_to(np.asarray(bits, np.uint32), (self.threads,))
        self.smem[dst] = (bits & 0xFF).astype(np.uint8)
        self.state[chunks] = DONE
        self.done_epoch[chunks] = self.epoch

    def lds32(self, addr) -> np.ndarray:
        addr = np.broadcast_to(np.asarray(addr, np.int64), (self.threads,))
        if np.any(addr % 4):
            raise EmulatorError("misaligned 4-byte shared load")
        self._read_check(self._chunks(addr))
        for w in range(self.threads // WARP):
            lanes = slice(w * WARP, (w + 1) * WARP)
            self.stats["lds32_conflicts"] += banks.extra_wavefronts(addr[lanes], 4)
        self.stats["lds32"] += 1
        return self.smem[addr[:, None] + np.arange(4)].copy().view(np.uint32)[:, 0]

    def ld_wide(self, src, ok, dtype) -> np.ndarray:
        """``_ld32``/``_ld64``: an element of ``dtype``'s width (its bits) where ``ok``."""
        ok = np.broadcast_to(np.asarray(ok, bool), (self.threads,))
        n = np.dtype(dtype).itemsize
        data, off = self._global(src, n, ok)
        out = np.zeros(self.threads, dtype)
        out[ok] = data[off[:, None] + np.arange(n)].copy().view(dtype)[:, 0]
        return out

    def st_wide(self, dst, bits, dtype) -> None:
        """``_st32``/``_st64``: ``st.shared`` of an element of ``dtype``'s width."""
        dst = np.broadcast_to(np.asarray(dst, np.int64), (self.threads,))
        n = np.dtype(dtype).itemsize
        if np.any(dst % n):
            raise EmulatorError(f"misaligned {n}-byte shared store")
        chunks = self._chunks(dst)
        self._write_check(chunks, "st.shared")
        bits = np.broadcast_to(np.asarray(bits, dtype), (self.threads,)).copy()
        self.smem[dst[:, None] + np.arange(n)] = bits.view(np.uint8).reshape(-1, n)
        self.state[chunks] = DONE
        self.done_epoch[chunks] = self.epoch
        self.stats[f"st{8 * n}"] += 1

    def lds_f32(self, addr, count: int) -> tuple:
        """``ld.shared.v4.f32`` / ``.v2.f32``: ``count`` f32 values a lane."""
        addr = np.broadcast_to(np.asarray(addr, np.int64), (self.threads,))
        nbytes = 4 * count
        if np.any(addr % nbytes):
            raise EmulatorError(f"misaligned {nbytes}-byte shared load")
        self._read_check(self._chunks(addr))
        for w in range(self.threads // WARP):
            lanes = slice(w * WARP, (w + 1) * WARP)
            self.stats[f"lds{8 * nbytes}_conflicts"] += banks.extra_wavefronts(addr[lanes], nbytes)
        self.stats[f"lds{8 * nbytes}"] += 1
        values = self.smem[addr[:, None] + np.arange(nbytes)].copy().view(np.float32)
        return tuple(values[:, i] for i in range(count))

    def lds64(self, addr) -> np.ndarray:
        addr = np.broadcast_to(np.asarray(addr, np.int64), (self.threads,))
        if np.any(addr % 8):
            raise EmulatorError("misaligned 8-byte shared load")
        self._read_check(self._chunks(addr))
        for w in range(self.threads // WARP):
            lanes = slice(w * WARP, (w + 1) * WARP)
            self.stats["lds64_conflicts"] += banks.extra_wavefronts(addr[lanes], 8)
        self.stats["lds64"] += 1
        return self.smem[addr[:, None] + np.arange(8)].copy().view(np.float64)[:, 0]

    def mma_f64(self, a, b, c0, c1) -> tuple:
        isa = M8N8K4_F64
        vals = [np.broadcast_to(np.asarray(x, np.float64), (self.threads,)) for x in (a, b)]
        c_vals = np.stack(
            [np.broadcast_to(np.asarray(x, np.float64), (self.threads,)) for x in (c0, c1)], 1
        )
        d = np.zeros((self.threads, 2), np.float64)
        for w in range(self.threads // WARP):
            lanes = slice(w * WARP, (w + 1) * WARP)
            a_mat = _matrix(isa.a, vals[0][lanes, None])
            b_mat = _matrix(isa.b, vals[1][lanes, None])
            result = a_mat @ b_mat + _matrix(isa.c, c_vals[lanes])
            rows, cols = _positions(isa.c)
            d[lanes] = result[rows, cols]
        self.stats["mma"] += 1
        return d[:, 0], d[:, 1]

    def st16(self, dst, bits) -> None:
        dst = np.broadcast_to(np.asarray(dst, np.int64), (self.threads,))
        if np.any(dst % 2):
            raise EmulatorError("misaligned 16-bit shared store")
        chunks = self._chunks(dst)
        self._write_check(chunks, "st.shared")
        bits = np.broadcast_to(np.asarray(bits, np.uint32), (self.threads,))
        self.smem[dst] = (bits & 0xFF).astype(np.uint8)
        self.smem[dst + 1] = (bits >> 8).astype(np.uint8)
        self.state[chunks] = DONE
        self.done_epoch[chunks] = self.epoch
        self.stats["st16"] += 1

    def ldmatrix(self, addr, trans: bool) -> tuple:
        addr = np.broadcast_to(np.asarray(addr, np.int64), (self.threads,))
        if np.any(addr % CHUNK):
            raise EmulatorError("ldmatrix row address not 16-byte aligned")
        self._read_check(self._chunks(addr))
        rows = self.smem[addr[:, None] + np.arange(CHUNK)].view(np.uint16)  # (threads, 8)
        src_lane, col = _ldmatrix_table(trans)  # (32, 4, 2) each
        out = np.zeros((4, self.threads), np.uint32)
        for w in range(self.threads // WARP):
            base = w * WARP
            self.stats["ldmatrix_conflicts"] += banks.extra_wavefronts(
                addr[base : base + WARP], CHUNK
            )
            halves = rows[base + src_lane, col].astype(np.uint32)  # (32, 4, 2)
            out[:, base : base + WARP] = (halves[..., 0] | (halves[..., 1] << 16)).T
        self.stats["ldmatrix"] += 1
        return tuple(out)

    def mma(self, isa, *registers) -> tuple:
        regs = np.stack(
            [np.broadcast_to(np.asarray(r, np.uint32), (self.threads,)) for r in registers[:6]], 1
        )
        c = np.stack(
            [np.broadcast_to(np.asarray(x, np.float64), (self.threads,)) for x in registers[6:]],
            1,
        )
        d = np.zeros((self.threads, 4), _D_TYPES[isa.d_type])
        for w in range(self.threads // WARP):
            lanes = slice(w * WARP, (w + 1) * WARP)
            d[lanes] = warp_mma(isa, regs[lanes], c[lanes])
        self.stats["mma"] += 1
        return tuple(d[:, i] for i in range(4))

    # ------------------------------------------------------------------ names
    def namespace(self) -> dict:
        """The names generated register-tile code uses, as this block's twins."""
        emu = self
        cuda = types.SimpleNamespace(
            syncthreads=self.syncthreads,
            local=types.SimpleNamespace(array=lambda n, dtype: _Local(n, dtype, emu.threads)),
        )
        names = {
            "cuda": cuda,
            "np": np,
            "_gaddr": self.gaddr,
            "_saddr": self.saddr,
            "_cp16": self.cp16,
            "_ld16": self.ld16,
            "_st16": self.st16,
            "_ldsm4": lambda a: self.ldmatrix(a, False),
            "_ldsm4t": lambda a: self.ldmatrix(a, True),
            "_mma_f16": lambda *r: self.mma(M16N8K16_F16, *r),
            "_mma_bf16": lambda *r: self.mma(M16N8K16_BF16, *r),
            **{inst.name: functools.partial(self.mma, inst.isa) for inst in mma.EIGHT_BIT},
            "_ld8": self.ld8,
            "_st8": self.st8,
            "_lds32": self.lds32,
            "_prmt": prmt,
            "_mma_f64": self.mma_f64,
            "_lds64": self.lds64,
            "_ld64": functools.partial(self.ld_wide, dtype=np.int64),
            "_st64": functools.partial(self.st_wide, dtype=np.int64),
            "_ld32": functools.partial(self.ld_wide, dtype=np.uint32),
            "_st32": functools.partial(self.st_wide, dtype=np.uint32),
            "_lds128f": lambda a: self.lds_f32(a, 4),
            "_lds64f": lambda a: self.lds_f32(a, 2),
            "_ffma": _ffma,
            "_cp_commit": self.commit,
            "_cp_wait_all": lambda: self.wait(0),
        }
        for n in range(1, 8):
            names[f"_cp_wait{n}"] = functools.partial(self.wait, n)
        return names


def _ffma(a, b, c) -> np.ndarray:
    """``fma.rn.f32`` of every lane, rounded once: own_math.numpy_fma_f32's method (an
    exact f64 product, the two-sum's error, the sum rounded to odd, then to f32) on
    arrays."""
    product = np.asarray(a, np.float32).astype(np.float64) * np.asarray(b, np.float32)
    addend = np.asarray(c, np.float32).astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = product + addend
        v = s - product
        error = (product - (s - v)) + (addend - v)
        bits = np.atleast_1d(s).view(np.int64)
        odd = np.isfinite(s) & (error != 0) & (bits % 2 == 0)
        up = (error > 0) == (s > 0)  # away from zero: the magnitude's bits grow
        s = np.where(odd, (bits + np.where(up, 1, -1)).view(np.float64), s)
    return s.astype(np.float32)


@functools.cache
def _ldmatrix_table(trans: bool) -> tuple[np.ndarray, np.ndarray]:
    """For ``ldmatrix.x4``: the lane whose row address supplies each (lane, register,
    half), and the column of that row, from isa/ldmatrix.py."""
    load = Ldmatrix(4, trans)
    src = np.zeros((WARP, 4, 2), np.int64)
    col = np.zeros((WARP, 4, 2), np.int64)
    for lane in range(WARP):
        for q in range(4):
            for half in range(2):
                m, r, c = load.element(lane, q, half)
                src[lane, q, half], col[lane, q, half] = load.address_lane(m, r), c
    return src, col


@functools.cache
def _positions(frag) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of every (lane, element) of a fragment, from isa/mma_sync.py."""
    pos = np.array([[frag.position(lane, i) for i in range(frag.elements)] for lane in range(WARP)])
    return pos[..., 0], pos[..., 1]


def _matrix(frag, values: np.ndarray) -> np.ndarray:
    """The matrix a warp's fragments (32, elements) hold."""
    mat = np.full(frag.shape, np.nan)
    rows, cols = _positions(frag)
    mat[rows, cols] = values
    return mat


def prmt(a, b, selector):
    """``prmt.b32 d, a, b, c`` (PTX ISA, "prmt", default mode): of the eight bytes of
    ``{b, a}`` (a's the low four), result byte ``i`` is the one nibble ``i`` of ``c``
    names (its low three bits); a nibble with bit 3 set replicates that byte's sign bit
    instead. Works on NumPy vectors and on scalars."""
    a, b = np.asarray(a, np.uint32), np.asarray(b, np.uint32)
    both = (b.astype(np.uint64) << np.uint64(32)) | a.astype(np.uint64)
    selector = int(selector)
    out = np.zeros(np.broadcast(a, b).shape, np.uint32)
    for i in range(4):
        nibble = (selector >> (4 * i)) & 0xF
        byte = ((both >> np.uint64(8 * (nibble & 7))) & np.uint64(0xFF)).astype(np.uint32)
        if nibble & 8:
            byte = np.where(byte & 0x80, np.uint32(0xFF), np.uint32(0))
        out |= byte << np.uint32(8 * i)
    return out


_DECODE = {  # an A/B element's bits (as uint32) -> its value, by PTX type
    "f16": lambda bits: bits.astype(np.uint16).view(np.float16),
    "bf16": lambda bits: (bits << np.uint32(16)).view(np.float32),
    "s8": lambda bits: bits.astype(np.uint8).view(np.int8),
    "u8": lambda bits: bits.astype(np.uint8),
    "e4m3": lambda bits: bits.astype(np.uint8).view(ml_dtypes.float8_e4m3fn),
    "e5m2": lambda bits: bits.astype(np.uint8).view(ml_dtypes.float8_e5m2),
}
_D_TYPES = {"f32": np.float32, "s32": np.int32}


def _elements(regs: np.ndarray, isa, ptx_type: str) -> np.ndarray:
    """.b32 registers (threads, r) of ``isa.per_register`` elements each of PTX type
    ``ptx_type`` → (threads, per_register * r) float64 values, the lowest-numbered element
    in the low bits."""
    regs = regs.astype(np.uint32)
    per = isa.per_register
    width = 32 // per
    mask = np.uint32((1 << width) - 1)
    parts = [(regs >> np.uint32(width * i)) & mask for i in range(per)]
    bits = np.stack(parts, 2).reshape(regs.shape[0], -1)
    return _DECODE[ptx_type](bits).astype(np.float64)


def warp_mma(isa, regs: np.ndarray, c: np.ndarray) -> np.ndarray:
    """One warp's ``mma.sync`` of four A and two B .b32 registers (32, 6) and C (32, 4,
    float64) → D (32, 4): the products (exact in float64) summed with C in float64 and
    rounded once to f32 (``.f32``), or wrapped to 32 bits (``.s32``, no ``.satfinite``;
    i8 sums are exact in float64)."""
    a = _matrix(isa.a, _elements(regs[:, :4], isa, isa.a_type))
    b = _matrix(isa.b, _elements(regs[:, 4:6], isa, isa.b_type))
    result = a @ b + _matrix(isa.c, c)
    rows, cols = _positions(isa.c)
    d = result[rows, cols]
    if isa.d_type == "s32":
        return d.astype(np.int64).astype(np.int32)
    return d.astype(np.float32)


class _Lines:
    def __init__(self):
        self.lines: list[str] = []
        self.indent = 1

    def emit(self, line: str, loc=None) -> None:
        self.lines.append("    " * self.indent + line)


def mainloop_source(
    plan, init: str | None = None, chunks: bool | None = None, whole: bool = False
) -> str:
    """The source of ``_run(A, B, acc, ring, row0, col0, start, stop, step, _lane)``: the
    main loop mainloop.py emits for ``plan``, with plain names for its operands (``init``:
    the registers' first value instead of ``acc``'s; ``chunks``: the steady loop the launch
    chose, None for both; ``whole``: its tiles lie inside A and B, ``Operands.whole``)."""
    out = _Lines()
    names = ("A", "B", "acc", "ring", "row0", "col0", "start", "stop", "step")
    emit(out, plan, Operands(*names, init=init, chunks=chunks, whole=whole))
    return f"def _run({', '.join(names)}, _lane):\n" + "\n".join(out.lines) + "\n"


def run_mainloop(
    plan, A, B, acc, row0, col0, start, stop, step, eager=False, source=None, init=None,
    chunks=None, whole=False,
):  # fmt: skip
    """Run ``plan``'s main loop for one block on NumPy arrays: ``acc`` (an f32 array of
    the block's shape) is updated in place as the group's tile would be. Returns the
    emulator (its ``stats``). ``source``: another source of ``_run`` (a mutant);
    ``chunks``, ``whole``: the steady loop the launch chose (``mainloop.Operands``)."""
    emu = BlockEmulator(plan.threads, plan.ring_bytes, eager=eager)
    scope = emu.namespace()
    source = source or mainloop_source(plan, init, chunks, whole)
    exec(compile(source, "<mainloop>", "exec"), scope)  # noqa: S102
    ring = np.zeros(plan.ring_bytes, np.uint8)
    bounds = (np.int64(v) for v in (row0, col0, start, stop, step))
    with np.errstate(over="ignore"):  # the loop's trip count wraps as uint64, as on a GPU
        scope["_run"](A, B, acc, ring, *bounds, np.arange(plan.threads, dtype=np.int64))
    if any(emu.groups) or emu.open_group:
        raise EmulatorError("the loop ends with copies never waited for")
    return emu
