"""A histogram with atomic adds from a flat kernel (correct with groups on many cores).

Run: python examples/histogram.py
"""

from __future__ import annotations

import numpy as np

from tessera import i32, kernel, mut, tile


@kernel
def histogram(values: i32[n], hist: mut[i32[bins]]):
    i = tile.linear_id()
    if i < n:
        b = values[i]
        if 0 <= b < bins:
            tile.atomic_add(hist, b, 1)


def main() -> None:
    values = np.random.default_rng(0).integers(0, 16, 1_000_000).astype(np.int32)
    hist = np.zeros(16, np.int32)
    histogram[values.size](values, hist)
    assert np.array_equal(hist, np.bincount(values, minlength=16))
    print("histogram:", hist)


if __name__ == "__main__":
    main()
