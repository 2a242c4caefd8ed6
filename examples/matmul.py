"""Tiled matrix multiply with 16 x 16 shared tiles, barriers and a 2-D group.

Run: python examples/matmul.py
"""

from __future__ import annotations

import numpy as np

from tessera import KiB, f32, group_id, kernel, mut, tbarrier, tile, tshared


@kernel(tile=(16, 16), shared=2 * KiB)
def matmul(a: f32[M, K], b: f32[K, N], c: mut[f32[M, N]]):
    sa = tshared.alloc[f32]((16, 16))
    sb = tshared.alloc[f32]((16, 16))
    r, cc = tile.id(0), tile.id(1)
    row = group_id(0) * 16 + r
    col = group_id(1) * 16 + cc
    acc = 0.0
    for k0 in range(0, K, 16):  # uniform loop with barriers: runs once per group
        sa[r, cc] = a[row, k0 + cc] if row < M and k0 + cc < K else 0.0
        sb[r, cc] = b[k0 + r, col] if k0 + r < K and col < N else 0.0
        tbarrier()
        for kk in range(16):
            acc += sa[r, kk] * sb[kk, cc]
        tbarrier()
    if row < M and col < N:
        c[row, col] = acc


def main() -> None:
    rng = np.random.default_rng(0)
    a = rng.random((200, 150), dtype=np.float32)
    b = rng.random((150, 100), dtype=np.float32)
    c = np.zeros((200, 100), np.float32)
    matmul[(-(-200 // 16), -(-100 // 16))](a, b, c)
    assert np.allclose(c, a @ b, rtol=1e-5)
    print("matmul matches numpy: max abs error", float(np.abs(c - a @ b).max()))


if __name__ == "__main__":
    main()
