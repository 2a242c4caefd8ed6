"""The kernels the C example calls (docs/embedding.md): the README's block_sum."""

from __future__ import annotations

from tessera import KiB, f32, group_linear_id, kernel, mut, reduce_sum, tbarrier, tile, tshared


@kernel(tile=(256,), shared=1 * KiB)
def block_sum(x: f32[n], partial: mut[f32[grid_groups]]):
    s = tshared.alloc[f32](256)  # group-shared memory
    k = group_linear_id() * 256 + tile.linear_id()
    s[tile.linear_id()] = x[k] if k < n else 0.0
    tbarrier()  # every lane's write is now visible
    total = reduce_sum(s)  # fixed-order tree: same bits every run
    if tile.linear_id() == 0:
        partial[group_linear_id()] = total
