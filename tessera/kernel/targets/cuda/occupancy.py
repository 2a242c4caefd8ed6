"""Occupancy without a GPU: how many blocks of a kernel an SM holds at once.

The per-architecture limits are data (NVIDIA's CUDA Occupancy Calculator and the CUDA C++
Programming Guide's "Compute Capabilities" table): threads, blocks and 32-bit registers per
SM, shared memory per SM and per block, and how registers and shared memory are
allocated. A block takes registers per warp, ``regs/thread x 32`` rounded up to 256; and
shared memory, its own bytes plus what the architecture reserves per block (1 KiB from
sm_80 on), rounded up to 128 bytes. The blocks an SM holds are the least of what threads,
blocks, registers and shared memory allow; ``k.metadata()`` reports them with the limit
that bound them.
"""

from __future__ import annotations

from dataclasses import dataclass

WARP = 32


@dataclass(frozen=True)
class Limits:
    threads: int  # resident threads per SM
    blocks: int  # resident blocks per SM
    registers: int  # 32-bit registers per SM
    shared: int  # shared memory per SM (bytes, the largest carve-out)
    reserved: int  # shared memory the system reserves per block
    register_unit: int = 256  # registers are allocated per warp in units of this
    shared_unit: int = 128  # shared memory is allocated per block in units of this


# compute capability -> limits
LIMITS = {
    (7, 0): Limits(2048, 32, 65536, 96 * 1024, 0),
    (7, 5): Limits(1024, 16, 65536, 64 * 1024, 0),
    (8, 0): Limits(2048, 32, 65536, 164 * 1024, 1024),
    (8, 6): Limits(1536, 16, 65536, 100 * 1024, 1024),
    (8, 7): Limits(2048, 16, 65536, 164 * 1024, 1024),
    (8, 9): Limits(1536, 24, 65536, 100 * 1024, 1024),
    (9, 0): Limits(2048, 32, 65536, 228 * 1024, 1024),
}


def limits_for(cc: tuple[int, int]) -> Limits:
    """The limits of ``cc``, or of the newest listed architecture not newer than it."""
    known = [k for k in LIMITS if k <= tuple(cc)]
    return LIMITS[max(known)] if known else LIMITS[min(LIMITS)]


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def occupancy(cc: tuple[int, int], threads: int, registers: int, shared: int) -> dict:
    """Blocks per SM of ``threads`` threads using ``registers`` per thread and ``shared``
    bytes of shared memory per block, on compute capability ``cc``: ``blocks_per_sm``,
    ``warps_per_sm``, ``fraction`` (of the SM's warps) and ``limited_by``."""
    lim = limits_for(cc)
    warps = -(-threads // WARP)
    bound = {
        "threads": lim.threads // (warps * WARP),
        "blocks": lim.blocks,
    }
    if registers:
        per_warp = _round_up(registers * WARP, lim.register_unit)
        bound["registers"] = (lim.registers // per_warp) // warps
    per_block = _round_up(shared + lim.reserved, lim.shared_unit) if shared else 0
    if per_block:
        bound["shared memory"] = lim.shared // per_block
    limited_by = min(bound, key=lambda k: bound[k])
    blocks = bound[limited_by]
    return {
        "blocks_per_sm": blocks,
        "warps_per_sm": blocks * warps,
        "fraction": round(blocks * warps / (lim.threads // WARP), 4),
        "limited_by": limited_by,
    }
