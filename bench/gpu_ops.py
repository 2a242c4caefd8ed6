"""The operator layer on a GPU (OPS.md §4's cases on the cuda target): the fused
``relu(A @ B + bias)`` against the same ops run eagerly, against CuPy (cuBLAS, then
CuPy's elementwise kernels: the GPU's counterpart of the NumPy baseline) and, at 1024³,
against NumPy on the host's cores (OPS.md's baseline itself), attention
against CuPy unfused, and the plain and tensor-core tile GEMMs. Every array lives on the
GPU; each timed call ends with a synchronisation. Without a GPU (or without CuPy) it
records nothing and says so."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np

import tessera
from tessera import graph, op
from tessera.kernel.targets.cuda.streams import gpu_usable

from .common import Case, Record, measure, standalone
from .ops import attention, attention_numpy, linear_relu, linear_relu_eager

NAME = "gpu_ops"


def gpu_present() -> bool:
    """A GPU (never the simulator) and CuPy, the baseline."""
    return gpu_usable() and importlib.util.find_spec("cupy") is not None


@graph.module("linear_relu_f16_in")
def linear_relu_half(a, b, bias):
    """The same layer on f16 operands (tensor cores); the f16 product is cast to f32."""
    return op.relu(op.cast(op.matmul(a, b), "f32") + bias)


class _Gpu:
    """CuPy and numba-cuda, imported once a GPU is known to be there."""

    def __init__(self):
        import cupy
        from numba import cuda

        self.cupy, self.cuda = cupy, cuda

    def sync(self) -> None:
        tessera.synchronize()
        self.cuda.synchronize()
        self.cupy.cuda.Device().synchronize()

    def host(self, x) -> np.ndarray:
        return self.cupy.asnumpy(x) if isinstance(x, self.cupy.ndarray) else x.copy_to_host()

    def case(self, tool: str, fn, expected, rtol: float, atol: float) -> Case:
        """A timed call that waits for the GPU; its result copied back to be checked."""

        def run():
            out = fn()
            self.sync()
            return out

        return Case(tool, run, lambda: self.host(run()), expected, rtol, atol)


def _linear_layer(gpu: _Gpu, s: int, dtype, rng, quick: bool) -> list[Record]:
    """relu(A @ B + bias): fused, eager (f32 only) and CuPy, on s x s x s."""
    cupy = gpu.cupy
    a = rng.standard_normal((s, s)).astype(dtype)
    b = rng.standard_normal((s, s)).astype(dtype)
    bias = rng.standard_normal(s).astype(np.float32)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    da, db, dbias = (gpu.cuda.to_device(x) for x in (a, b, bias))
    ca, cb, cbias = (cupy.asarray(x) for x in (a, b, bias))
    if dtype == np.float32:
        cases = [
            gpu.case("tessera", lambda: linear_relu(da, db, dbias), want, 1e-3, 1e-2),
            gpu.case("eager", lambda: linear_relu_eager(da, db, dbias), want, 1e-3, 1e-2),
            gpu.case("cupy", lambda: cupy.maximum(ca @ cb + cbias, 0), want, 1e-3, 1e-2),
        ]
        if s <= 1024:  # OPS.md's baseline: NumPy on the host's cores, beside the GPU
            host = Case("numpy", lambda: np.maximum(a @ b + bias, 0), None, want, 1e-3, 1e-2)
            cases.append(host)
        kernel = "relu(A@B + bias), f32"
    else:  # CuPy rounds A @ B to f16 before the bias: a looser check
        cases = [
            gpu.case("tessera", lambda: linear_relu_half(da, db, dbias), want, 1e-2, 0.5),
            gpu.case(
                "cupy",
                lambda: cupy.maximum((ca @ cb).astype(cupy.float32) + cbias, 0),
                want,
                1e-2,
                0.5,
            ),
        ]
        kernel = "relu(A@B + bias), f16 in, f32 out"
    return measure(NAME, kernel, f"{s}^3", cases, quick, flops=2.0 * s**3)


def _attention(gpu: _Gpu, n: int, rng, quick: bool) -> list[Record]:
    cupy = gpu.cupy
    q, k, v = (rng.standard_normal((n, 64)).astype(np.float32) for _ in range(3))
    dq, dk, dv = (gpu.cuda.to_device(x) for x in (q, k, v))
    cq, ck, cv = (cupy.asarray(x) for x in (q, k, v))

    def unfused():
        s = (cq @ ck.T) * np.float32(1 / 8)
        p = cupy.exp(s - s.max(axis=1, keepdims=True))
        return (p / p.sum(axis=1, keepdims=True)) @ cv

    want = attention_numpy(q, k, v)
    cases = [
        gpu.case("tessera", lambda: attention(dq, dk, dv), want, 1e-3, 1e-4),
        gpu.case("cupy", unfused, want, 1e-3, 1e-4),
    ]
    kernel = "attention module, d=64 (one flash kernel)"
    return measure(NAME, kernel, f"N={n}", cases, quick, flops=4.0 * n * n * 64)


def run(quick: bool) -> list[Record]:
    if not gpu_present():
        print("gpu_ops: no GPU (or no CuPy) here; nothing measured", file=sys.stderr)
        return []
    gpu, rng = _Gpu(), np.random.default_rng(0)
    records: list[Record] = []
    with tessera.config(target="cuda"):
        for s in (512,) if quick else (1024, 4096):
            records += _linear_layer(gpu, s, np.float32, rng, quick)
        records += _linear_layer(gpu, 512 if quick else 4096, np.float16, rng, quick)
        records += _attention(gpu, 512 if quick else 4096, rng, quick)
    return records


def targets(records: list[dict]) -> list[tuple[str, float, str, bool]]:
    """OPS.md §4's fused-layer targets measured on the GPU (CuPy in NumPy's place)."""
    mine = [r for r in records if r["bench"] == NAME and r["kernel"] == "relu(A@B + bias), f32"]
    out = []
    for size in sorted({r["size"] for r in mine}, key=lambda s: int(s.split("^")[0])):
        med = {r["tool"]: r["median_s"] for r in mine if r["size"] == size}
        if {"tessera", "eager", "cupy"} <= set(med):
            speedup, vs = med["eager"] / med["tessera"], med["tessera"] / med["cupy"]
            out.append((f"fused vs eager {size} (speedup)", speedup, "≥ 1.3×", speedup >= 1.3))
            out.append((f"fused vs cupy {size} (time)", vs, "≤ 1.5×", vs <= 1.5))
        if {"tessera", "numpy"} <= set(med):
            host = med["tessera"] / med["numpy"]
            out.append((f"fused vs numpy on the host {size} (time)", host, "≤ 1.5×", host <= 1.5))
    return out


if __name__ == "__main__":
    standalone(NAME, run)
