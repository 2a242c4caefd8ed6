"""Shared-memory banks: how many wavefronts a warp's access takes (sm_80+ model).

Shared memory has 32 banks of 4 bytes: byte address ``a`` is in bank ``(a // 4) % 32``.
A warp's access is served in *phases*: all 32 threads at once for accesses of up to 4
bytes, half-warps for 8 bytes, quarter-warps (8 threads, 128 bytes) for 16 bytes; an
``ldmatrix`` reads each 8x8 matrix (8 row addresses of 16 bytes) as one phase. Within a
phase, threads reading the same 4-byte word share it (broadcast), and each bank serves
one word per wavefront: a phase takes as many wavefronts as the most distinct words any
bank must give. An access is conflict free when every phase takes one wavefront;
:func:`extra_wavefronts` counts the rest (what ncu reports as bank conflicts).
"""

from __future__ import annotations

import numpy as np

WARP = 32
BANKS = 32
WORD = 4


def phase_threads(size: int) -> int:
    """Threads served per phase by an access of ``size`` bytes per thread."""
    if size not in (1, 2, 4, 8, 16):
        raise ValueError(f"shared accesses are 1, 2, 4, 8 or 16 bytes, not {size}")
    return WARP * WORD // max(size, WORD)


def wavefronts(addresses, size: int) -> int:
    """Wavefronts one warp access takes: ``addresses`` holds the 32 lanes' byte
    addresses (-1 for an inactive lane), each accessing ``size`` bytes."""
    addresses = np.asarray(addresses, dtype=np.int64)
    if addresses.shape != (WARP,):
        raise ValueError("one byte address per lane of a warp")
    per = phase_threads(size)
    total = 0
    for start in range(0, WARP, per):
        phase = addresses[start : start + per]
        phase = phase[phase >= 0]
        if not phase.size:
            continue
        if np.any(phase % size):
            raise ValueError(f"misaligned {size}-byte shared access")
        words = np.unique((phase[:, None] + np.arange(0, max(size, WORD), WORD)) // WORD)
        total += int(np.bincount(words % BANKS, minlength=BANKS).max())
    return total


def extra_wavefronts(addresses, size: int) -> int:
    """Wavefronts beyond one per phase that has an active lane: 0 is conflict free."""
    addresses = np.asarray(addresses, dtype=np.int64)
    per = phase_threads(size)
    phases = sum(1 for start in range(0, WARP, per) if np.any(addresses[start : start + per] >= 0))
    return wavefronts(addresses, size) - phases
