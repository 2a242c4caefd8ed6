"""Whole register-path kernels under numba-cuda's simulator (no GPU).

The simulator runs a kernel's threads as Python threads but cannot run inline PTX, so the
CUDA target normally gives it the plain path. Here the *register path's* source (what a
GPU compiles: main loop, register epilogue, grouped raster, everything) runs there, its
inline-PTX names replaced by twins written from the PTX ISA tables:

* ``ldmatrix`` and ``mma.sync`` are warp-collective: the 32 threads of a warp meet at a
  rendezvous, the last to arrive computes every lane's result from all their operands
  (isa/ldmatrix.py, isa/mma_sync.py, as emulator.py models them), each thread takes its
  own; threads of a warp that do not all arrive (divergent code) time out with an error;
* shared and global memory are addressed through a registry of the arrays, each access
  bounds- and alignment-checked; ``cp.async`` copies land at once (a valid order of the
  hardware's; emulator.py checks the lazy one and the pipeline's hazards), so waits and
  commits do nothing;
* libdevice's products (``mul.rn``) are NumPy's.

:func:`run` launches a kernel this way; the simulator must be on in this process
(``NUMBA_ENABLE_CUDASIM=1``, as the suite's simulator run has it).
"""

from __future__ import annotations

import functools
import threading

import numpy as np

from ....errors import TesseraError
from ... import launch
from ...layout import WARP
from ...pipeline import specialise
from .. import TARGETS, semantics
from . import mma
from .emulator import _ffma, _ldmatrix_table, _matrix, _positions, prmt, warp_mma
from .isa.mma_sync import M8N8K4_F64, M16N8K16_BF16, M16N8K16_F16
from .program import CudaProgram, simulating

RENDEZVOUS_S = 60.0  # a warp whose threads do not all arrive: divergent code


class WarpSimError(AssertionError):
    """An access or a collective the hardware would not run."""


def _thread():
    """(block index, thread index in the block) of the calling simulator thread."""
    t = threading.current_thread()
    block = tuple(t.blockIdx) if hasattr(t, "blockIdx") else (0, 0, 0)
    return block, t.thread_id


class _Warp:
    """A rendezvous of the 32 threads of one warp: two sets of slots, used in turn, so a
    lane posting its next values never overwrites what another lane has yet to read."""

    def __init__(self):
        self.barrier = threading.Barrier(WARP, timeout=RENDEZVOUS_S)
        self.inputs = [[None] * WARP, [None] * WARP]
        self.outputs: list = [None, None]
        self.calls = [0] * WARP  # collectives each lane has run


class Memory:
    """Shared and global arrays by made-up address (the array's alignment kept modulo
    256, so a base that is not 16-byte aligned stays so)."""

    def __init__(self):
        self.owners: list[np.ndarray] = []
        self.lock = threading.Lock()

    @staticmethod
    def _owner(arr: np.ndarray) -> np.ndarray:
        while isinstance(arr.base, np.ndarray):
            arr = arr.base
        return arr

    def address(self, arr) -> int:
        arr = getattr(arr, "_ary", arr)  # the simulator's device arrays hold NumPy's
        owner = self._owner(arr)
        with self.lock:
            k = next((i for i, o in enumerate(self.owners) if o is owner), None)
            if k is None:
                self.owners.append(owner)
                k = len(self.owners) - 1
        return self._base(k) + (arr.ctypes.data - owner.ctypes.data)

    def _base(self, k: int) -> int:
        return ((k + 1) << 40) + self.owners[k].ctypes.data % 256

    def bytes_at(self, address: int, size: int) -> tuple[np.ndarray, int]:
        k = (int(address) >> 40) - 1
        if not 0 <= k < len(self.owners):
            raise WarpSimError(f"address {address:#x} is in no array")
        data = self.owners[k].reshape(-1).view(np.uint8)
        offset = int(address) - self._base(k)
        if offset < 0 or offset + size > data.size:
            raise WarpSimError(f"access of {size} bytes at offset {offset} of {data.size}")
        if int(address) % size:
            raise WarpSimError(f"misaligned {size}-byte access")
        return data, offset

    def read(self, address: int, size: int) -> np.ndarray:
        data, offset = self.bytes_at(address, size)
        return data[offset : offset + size].copy()

    def write(self, address: int, values: np.ndarray) -> None:
        data, offset = self.bytes_at(address, values.size)
        data[offset : offset + values.size] = values


class Twins:
    """The inline-PTX names of register-path code, as per-thread Python functions."""

    def __init__(self):
        self.memory = Memory()
        self.warps: dict = {}
        self.lock = threading.Lock()

    def _warp(self) -> tuple[_Warp, int]:
        block, tid = _thread()
        key = (block, tid // WARP)
        with self.lock:
            warp = self.warps.get(key)
            if warp is None:
                warp = self.warps[key] = _Warp()
        return warp, tid % WARP

    def collective(self, value, compute):
        """Post ``value``; the last thread computes every lane's result from the 32
        values (``compute``); returns this lane's."""
        warp, lane = self._warp()
        turn = warp.calls[lane] % 2
        warp.calls[lane] += 1
        warp.inputs[turn][lane] = value
        try:
            if warp.barrier.wait() == 0:
                warp.outputs[turn] = compute(list(warp.inputs[turn]))
            warp.barrier.wait()
            mine = warp.outputs[turn][lane]
        except threading.BrokenBarrierError:
            raise WarpSimError(
                "a warp-collective instruction that not every lane reached"
            ) from None
        return mine

    # ----------------------------------------------------------------- memory
    def cp16(self, dst, src, nbytes) -> None:
        nbytes = int(nbytes)
        chunk = np.zeros(16, np.uint8)
        if nbytes:
            if int(src) % 16:
                raise WarpSimError("cp.async from a misaligned global address")
            chunk[:nbytes] = self.memory.read(int(src), 16)[:nbytes]
        self.memory.write(int(dst), chunk)

    def ld16(self, src, ok) -> np.uint32:
        if not ok:
            return np.uint32(0)
        return np.uint32(self.memory.read(int(src), 2).view(np.uint16)[0])

    def st16(self, dst, bits) -> None:
        self.memory.write(int(dst), np.array([int(bits) & 0xFFFF], np.uint16).view(np.uint8))

    def ld_wide(self, src, ok, dtype):
        """``_ld32``/``_ld64``: an element of ``dtype``'s width (its bits) where ``ok``."""
        n = np.dtype(dtype).itemsize
        return self.memory.read(int(src), n).view(dtype)[0] if ok else dtype(0)

    def st_wide(self, dst, bits, dtype) -> None:
        """``_st32``/``_st64``: the low bits of ``bits`` in ``dtype``'s width."""
        n = np.dtype(dtype).itemsize
        value = int(bits) & ((1 << (8 * n)) - 1)
        self.memory.write(int(dst), np.array([value], np.uint64).view(np.uint8)[:n])

    def lds64(self, address) -> np.float64:
        return self.memory.read(int(address), 8).view(np.float64)[0]

    def ld8(self, src, ok) -> np.uint32:
        return np.uint32(self.memory.read(int(src), 1)[0]) if ok else np.uint32(0)

    def st8(self, dst, bits) -> None:
        self.memory.write(int(dst), np.array([int(bits) & 0xFF], np.uint8))

    def lds32(self, address) -> np.uint32:
        return self.memory.read(int(address), 4).view(np.uint32)[0]

    def lds_f32(self, address, count: int) -> tuple:
        if int(address) % (4 * count):
            raise WarpSimError(f"misaligned {4 * count}-byte shared load")
        return tuple(self.memory.read(int(address), 4 * count).view(np.float32))

    # ----------------------------------------------------------------- collectives
    def ldmatrix(self, address, trans: bool) -> tuple:
        def compute(addresses):
            rows = np.stack([self.memory.read(int(a), 16).view(np.uint16) for a in addresses])
            src, col = _ldmatrix_table(trans)
            halves = rows[src, col].astype(np.uint32)  # (32, 4, 2)
            packed = halves[..., 0] | (halves[..., 1] << np.uint32(16))
            return [tuple(np.uint32(x) for x in packed[lane]) for lane in range(WARP)]

        return self.collective(int(address), compute)

    def mma16(self, isa, *registers) -> tuple:
        def compute(posted):
            regs = np.array([[np.uint32(r) for r in p[:6]] for p in posted], np.uint32)
            c = np.array([[float(x) for x in p[6:]] for p in posted], np.float64)
            out = warp_mma(isa, regs, c)
            return [tuple(out[lane]) for lane in range(WARP)]

        return self.collective(registers, compute)

    def mma64(self, a, b, c0, c1) -> tuple:
        isa = M8N8K4_F64

        def compute(posted):
            values = np.array([[float(x) for x in p] for p in posted], np.float64)
            d = _matrix(isa.a, values[:, :1]) @ _matrix(isa.b, values[:, 1:2]) + _matrix(
                isa.c, values[:, 2:]
            )
            rows, cols = _positions(isa.c)
            return [tuple(d[rows, cols][lane]) for lane in range(WARP)]

        return self.collective((a, b, c0, c1), compute)

    def shfl_xor(self, value, mask):
        return self.collective(
            value, lambda posted: [posted[lane ^ int(mask)] for lane in range(WARP)]
        )

    def pack(self, bits):
        """``cvt.rn.{f16,bf16}x2.f32``: two f32 values rounded to nearest even, the first
        in the low half."""

        def pack(low, high):
            halves = [bits(np.float32(v)) for v in (low, high)]
            return np.uint32(halves[0] | (halves[1] << 16))

        return pack

    def namespace(self) -> dict:
        def nothing(*args):
            return None

        names = {
            "_gaddr": self.memory.address,
            "_saddr": self.memory.address,
            "_cp16": self.cp16,
            "_ld16": self.ld16,
            "_st16": self.st16,
            "_ld64": functools.partial(self.ld_wide, dtype=np.int64),
            "_st64": functools.partial(self.st_wide, dtype=np.int64),
            "_lds64": self.lds64,
            "_ldsm4": lambda a: self.ldmatrix(a, False),
            "_ldsm4t": lambda a: self.ldmatrix(a, True),
            "_mma_f16": lambda *r: self.mma16(M16N8K16_F16, *r),
            "_mma_bf16": lambda *r: self.mma16(M16N8K16_BF16, *r),
            **{inst.name: functools.partial(self.mma16, inst.isa) for inst in mma.EIGHT_BIT},
            "_ld8": self.ld8,
            "_st8": self.st8,
            "_lds32": self.lds32,
            "_ld32": functools.partial(self.ld_wide, dtype=np.uint32),
            "_st32": functools.partial(self.st_wide, dtype=np.uint32),
            "_lds128f": lambda a: self.lds_f32(a, 4),
            "_lds64f": lambda a: self.lds_f32(a, 2),
            "_ffma": lambda a, b, c: np.float32(_ffma(a, b, c)[0]),
            "_prmt": lambda a, b, selector: np.uint32(prmt(a, b, selector)),
            "_mma_f64": self.mma64,
            "_shfl_xor": self.shfl_xor,
            "_max32": lambda a, b: np.float32(semantics.fmax(np.float32(a), np.float32(b))),
            "_min32": lambda a, b: np.float32(semantics.fmin(np.float32(a), np.float32(b))),
            "_select": lambda c, a, b: np.float32(a if c else b),
            "_mma_pack_f16": self.pack(lambda v: int(np.float16(v).view(np.uint16))),
            "_mma_pack_bf16": self.pack(lambda v: int(semantics.bf16_bits(v.view(np.uint32)))),
            "_mma_pack_s8": lambda *values: np.uint32(
                sum((int(v) & 0xFF) << (8 * i) for i, v in enumerate(values))
            ),
            "_cp_commit": nothing,
            "_cp_wait_all": nothing,
            "_fmul_rn": lambda x, y: np.float32(np.float32(x) * np.float32(y)),
            "_dmul_rn": lambda x, y: np.float64(x) * np.float64(y),
        }
        for n in range(1, 8):
            names[f"_cp_wait{n}"] = nothing
        return names


def run(kernel, *args, grid, stages: int = 3, fp8: bool = True) -> None:
    """Launch ``kernel`` over ``grid`` (host arrays) with the register path's source under
    the simulator (``NUMBA_ENABLE_CUDASIM=1`` in this process); ``fp8``: as for an
    architecture with f8 ``mma.sync`` (sm_89+)."""
    if not simulating():
        raise TesseraError("warp_sim.run needs numba-cuda's simulator (NUMBA_ENABLE_CUDASIM=1)")
    target = TARGETS["cuda"]
    grid = launch.normalise_grid(kernel.name, grid)
    bound = kernel.bind(target, args, grid)
    spec = specialise(kernel.ir, bound.constexprs, target.passes)
    program = CudaProgram(spec, len(grid), target, True, stages, warp_twins=Twins(), fp8=fp8)
    program.run(bound.call_args, grid, False)
    return program
