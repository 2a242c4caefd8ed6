"""GEMM on a GPU (GPU.md §7): f16 operands, f32 accumulation, side by side in one process:
Tessera's hand-written tile kernel (``bench.kernels.gemm_f16``: the CUDA target's register
main loop) with blocks of 128 x 128 (two blocks an SM) and 128 x 256, ``op.matmul``
(f16 result), ``torch.matmul`` (cuBLAS, f16 result), ``torch.mm(...,
out_dtype=torch.float32)`` where this PyTorch has it, and Triton's
textbook tiled GEMM where Triton is installed; then ``x @ w.T`` with ``w`` stored N x K (a
linear layer's weights): the tile kernel ``bench.kernels.gemm_f16_nt`` (the main loop
reading ``w`` as stored), a ``@graph.module`` calling ``op.matmul(x, w.T)`` and
``torch.matmul(x, w.T)``; then f32 without TF32 (``bench.kernels.gemm_f32``, the f32
register main loop; ``op.matmul``; cuBLAS's SGEMM). Every result is checked against float64 on
fresh data; each timed run is ``calls`` products followed by one synchronisation. Without
a GPU (or PyTorch) it records nothing and says so."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import tessera
from tessera import graph, op

from .common import Case, Record, gemm_sizes, measure, repeated, standalone
from .kernels import gemm_f16, gemm_f16_nt, gemm_f32

NAME = "gpu_gemm"
BLOCK = (128, 128, 32)  # the tile kernel's block: 8 warps of 64 x 32 (BM, BN, BK)
WIDE = (128, 256, 32)  # 8 warps of 64 x 64, one block an SM (GPU.md §2's fastest on sm_90)


@graph.module("bench_linear_nt")
def _linear_nt(x, w):
    return op.matmul(x, w.T)


def _on_device(x):
    return x.copy_to_host()


def _from_torch(x):
    return x.cpu().numpy()


def _cases(calls: int, want):
    """What makes one timed case: ``calls`` products, then one synchronisation, its result
    read back to the host by ``host`` and checked against ``want``."""

    def case(tool, fn, sync, host, atol):
        timed = repeated(fn, sync, calls)
        return Case(tool, timed, lambda: host(timed()), want, 1e-2, atol, inner=calls)

    return case


def _triton_gemm():
    """Triton's tiled GEMM (f16 in, f32 accumulate and out), or None without Triton."""
    if importlib.util.find_spec("triton") is None:
        return None
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(a, b, c, m, n, k, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, k, BK):
            x = tl.load(a + rm[:, None] * k + (k0 + rk)[None, :])
            y = tl.load(b + (k0 + rk)[:, None] * n + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * n + rn[None, :], acc)

    def run(ta, tb, tc):
        m, k = ta.shape
        n = tb.shape[1]
        kernel[(m // 128, n // 128)](ta, tb, tc, m, n, k, BM=128, BN=128, BK=64, num_stages=3)
        return tc

    return run


def _size(s: int, calls: int, quick: bool) -> list[Record]:
    import torch
    from numba import cuda

    rng = np.random.default_rng(s)
    a = rng.standard_normal((s, s)).astype(np.float16)
    b = rng.standard_normal((s, s)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64)
    da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.device_array((s, s), np.float32)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty((s, s), dtype=torch.float32, device="cuda")

    def tile_kernel(block):
        bm, bn, bk = block
        grid = (s // bm, s // bn)

        def launch():
            gemm_f16[grid](da, db, dc, bm, bn, bk)
            return dc

        return launch

    case = _cases(calls, want)
    cases = [
        case("tessera tile kernel", tile_kernel(BLOCK), tessera.synchronize, _on_device, 0.1),
        case(
            "tessera tile kernel 128x256",
            tile_kernel(WIDE),
            tessera.synchronize,
            _on_device,
            0.1,
        ),
        case("tessera op.matmul", lambda: op.matmul(da, db), tessera.synchronize, _on_device, 1.0),
        case(
            "torch.matmul (f16 out)",
            lambda: torch.matmul(ta, tb),
            torch.cuda.synchronize,
            _from_torch,
            1.0,
        ),
    ]
    if "out_dtype" in (torch.mm.__doc__ or ""):
        f32_out = lambda: torch.mm(ta, tb, out_dtype=torch.float32)  # noqa: E731
        cases.append(case("torch.mm (f32 out)", f32_out, torch.cuda.synchronize, _from_torch, 0.1))
    try:
        triton_gemm = _triton_gemm()
    except Exception as exc:  # noqa: BLE001 - a broken Triton is reported, not fatal
        print(f"gpu_gemm: Triton unusable here ({exc})", file=sys.stderr)
        triton_gemm = None
    if triton_gemm is not None:
        tri = lambda: triton_gemm(ta, tb, tc)  # noqa: E731
        cases.append(case("triton", tri, torch.cuda.synchronize, _from_torch, 0.1))
    records = measure(NAME, "gemm f16 in, f32 acc", f"{s}^3", cases, quick, flops=2.0 * s**3)
    return records + _transposed(s, calls, quick, a, b.T.copy(), want) + _f32(s, calls, quick)


def _transposed(s: int, calls: int, quick: bool, a, w, want) -> list[Record]:
    """``a @ w.T`` with ``w`` (N x K) as stored."""
    import torch
    from numba import cuda

    da, dw, dc = cuda.to_device(a), cuda.to_device(w), cuda.device_array((s, s), np.float32)
    ta, tw = torch.from_numpy(a).cuda(), torch.from_numpy(w).cuda()

    def tile_kernel():
        bm, bn, bk = WIDE
        gemm_f16_nt[(s // bm, s // bn)](da, dw, dc, bm, bn, bk)
        return dc

    case = _cases(calls, want)
    cases = [
        case("tessera tile kernel 128x256", tile_kernel, tessera.synchronize, _on_device, 0.1),
        case("tessera op.matmul", lambda: _linear_nt(da, dw), tessera.synchronize, _on_device, 1.0),
        case(
            "torch.matmul (f16 out)",
            lambda: torch.matmul(ta, tw.T),
            torch.cuda.synchronize,
            _from_torch,
            1.0,
        ),
    ]
    return measure(NAME, "gemm x @ w.T, w stored N x K", f"{s}^3", cases, quick, flops=2.0 * s**3)


def _f32(s: int, calls: int, quick: bool) -> list[Record]:
    """f32 in, f32 out, no TF32 anywhere: the tile kernel ``gemm_f32`` (the f32 register
    main loop), ``op.matmul`` and cuBLAS's SGEMM (``torch.mm`` with TF32 off)."""
    import torch
    from numba import cuda

    rng = np.random.default_rng(s + 1)
    a = rng.standard_normal((s, s)).astype(np.float32)
    b = rng.standard_normal((s, s)).astype(np.float32)
    want = a.astype(np.float64) @ b
    da, db, dc = cuda.to_device(a), cuda.to_device(b), cuda.device_array((s, s), np.float32)
    dbt = cuda.to_device(np.ascontiguousarray(b.T))  # B stored N x K: dbt.T is B, a view
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS's SGEMM, as the kernels compute

    def tile_kernel():
        bm, bn, bk = BLOCK
        gemm_f32[(s // bm, s // bn)](da, db, dc, bm, bn, bk)
        return dc

    case = _cases(calls, want)
    atol = 1e-3 * np.sqrt(s)
    cases = [
        case("tessera tile kernel", tile_kernel, tessera.synchronize, _on_device, atol),
        case("tessera op.matmul", lambda: op.matmul(da, db), tessera.synchronize, _on_device, atol),
        case(
            "tessera op.matmul (B a .T view)",
            lambda: op.matmul(da, dbt.T),
            tessera.synchronize,
            _on_device,
            atol,
        ),
        case(
            "torch.mm (SGEMM)", lambda: torch.mm(ta, tb), torch.cuda.synchronize, _from_torch, atol
        ),
    ]
    return measure(NAME, "gemm f32 (no TF32)", f"{s}^3", cases, quick, flops=2.0 * s**3)


def run(quick: bool) -> list[Record]:
    return gemm_sizes(NAME, _size, quick)


if __name__ == "__main__":
    standalone(NAME, run)
