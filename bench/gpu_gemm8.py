"""8-bit GEMM on a GPU: i8 operands, i32 accumulation, side by side in one process:
Tessera's hand-written tile kernel (``bench.kernels.gemm_i8``: the CUDA target's register
main loop on ``mma.sync`` m16n8k32) with blocks of 128 x 128 x 64, and ``torch._int_mm``
(cuBLASLt's int8 GEMM) where this PyTorch has it. Every result is checked exactly against
int64 on fresh data; each timed run is ``calls`` products followed by one
synchronisation. Without a GPU (or PyTorch) it records nothing and says so."""

from __future__ import annotations

import sys

import numpy as np

import tessera

from .common import Case, Record, gemm_sizes, measure, repeated, standalone
from .kernels import gemm_i8

NAME = "gpu_gemm8"
BLOCK = (128, 128, 64)  # 8 warps of 64 x 32 (BM, BN, BK): 64 accumulators a thread


def _size(s: int, calls: int, quick: bool) -> list[Record]:
    import torch
    from numba import cuda

    rng = np.random.default_rng(s)
    a = rng.integers(-128, 128, (s, s)).astype(np.int8)
    b = rng.integers(-128, 128, (s, s)).astype(np.int8)
    # exact through float64 BLAS: every partial sum is an integer below 2**14 * s, far under
    # 2**53 (NumPy's int64 product has no BLAS and takes minutes at 4096^3)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64)
    da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.device_array((s, s), np.int32)
    bm, bn, bk = BLOCK

    def tile_kernel():
        gemm_i8[s // bm, s // bn](da, db, dc, bm, bn, bk)
        return dc

    def case(tool, fn, sync, host):
        timed = repeated(fn, sync, calls)
        return Case(tool, timed, lambda: host(timed()), want, 0.0, 0.0, inner=calls)

    cases = [
        case("tessera tile kernel", tile_kernel, tessera.synchronize, lambda x: x.copy_to_host())
    ]
    int_mm = getattr(torch, "_int_mm", None)
    if int_mm is not None:
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        try:
            int_mm(ta, tb)
        except RuntimeError as exc:  # an int8 layout or size this PyTorch does not take
            print(f"gpu_gemm8: torch._int_mm unusable here ({exc})", file=sys.stderr)
        else:
            cases.append(
                case(
                    "torch._int_mm",
                    lambda: int_mm(ta, tb),
                    torch.cuda.synchronize,
                    lambda x: x.cpu().numpy(),
                )
            )
    return measure(NAME, "gemm i8 in, i32 acc", f"{s}^3", cases, quick, flops=2.0 * s**3)


def run(quick: bool) -> list[Record]:
    return gemm_sizes(NAME, _size, quick)


if __name__ == "__main__":
    standalone(NAME, run)
