"""Lint-clean shape annotations: ``n, m = tessera.dims("n m")`` names the dimension symbols,
so ``f32[n, m]`` passes ruff (F821), and the kernel means what it would without them.

mypy sees every primitive (``tile.id``, ``tshared.alloc``, ...); a kernel's signature is
made of Tessera's annotation objects, not Python types, which the line below tells mypy
(docs/install.md, Typing and linting)."""
# mypy: disable-error-code="valid-type, index"

import numpy as np

import tessera
from tessera import f32, kernel, mut, tile

n, m = tessera.dims("n m")


@kernel
def row_sums(x: f32[n, m], out: mut[f32[n]]):
    i = tile.id(0)
    acc = f32(0)
    for j in range(m):  # the symbol is readable in the body, as always
        acc += x[i, j]
    out[i] = acc


x = np.random.rand(50, 7).astype(np.float32)
out = np.zeros(50, np.float32)
row_sums[50](x, out)
np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)
print(f"row sums of a {x.shape} array match NumPy; shape symbols {n} and {m} came from dims()")
