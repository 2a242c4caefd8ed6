"""The parallel variant of grouped CPU kernels runs on one driver per argument types and
process (kernel/targets/cpu/parallel_driver.py), which calls the kernel's compiled chunk
through its address: a second kernel with the same argument types compiles no parallel
loop of its own, and runs as its one-core variant does."""

from __future__ import annotations

import numba
import numpy as np

import tessera as ts
from tessera import f32, group_id, kernel, mut, tile
from tessera.kernel.targets.cpu import native, parallel_driver


def _scaler(factor: float):
    @kernel(tile=(8,))
    def scale(x: f32[n], y: mut[f32[n]]):
        i = group_id(0) * 8 + tile.linear_id()
        if i < n:
            y[i] = x[i] * factor + 1.0

    return scale


def _run(k, x: np.ndarray, parallel: bool) -> np.ndarray:
    y = np.zeros_like(x)
    with ts.config(target="cpu", cache="off", parallel_threshold=0 if parallel else 10**9):
        k[x.size // 8](x, y)
    return y


def test_the_parallel_variant_gives_the_one_core_variants_values():
    x = np.arange(64, dtype=np.float32)
    k = _scaler(3.0)
    np.testing.assert_array_equal(_run(k, x, True), _run(k, x, False))
    np.testing.assert_array_equal(_run(k, x, True), x * 3 + 1)


def _driver_compiles() -> dict:
    return {n: set(d.overloads) for n, d in parallel_driver._drivers.items()}


def test_kernels_with_the_same_argument_types_share_one_parallel_driver():
    x = np.arange(64, dtype=np.float32)
    first, second = _scaler(2.0), _scaler(5.0)
    np.testing.assert_array_equal(_run(first, x, True), x * 2 + 1)
    compiled = _driver_compiles()
    array = numba.typeof(x)
    assert any(sig[1:3] == (array, array) for sigs in compiled.values() for sig in sigs)
    np.testing.assert_array_equal(_run(second, x, True), x * 5 + 1)
    assert _driver_compiles() == compiled  # the second kernel compiled no parallel loop


def test_an_image_keeps_the_symbol_it_binds():
    image = native.Image(b"code", "wrapper", "env", ("sym",), "workqueue", (b"c",), ("e",), "chunk")
    again = native.Image.from_bytes(image.to_bytes())
    assert again == image and again.bound == "chunk"
