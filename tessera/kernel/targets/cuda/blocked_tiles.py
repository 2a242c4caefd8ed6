"""Element-wise tiles in registers: the *blocked* layout of a tile outside the register
loops (GPU.md §1: a tile value lives in registers unless something needs it in shared
memory).

A tile statement's element loop gives thread ``t`` of a group of ``T`` threads the
elements ``t, t + T, t + 2T, ...`` of the tile (row-major). Where a tile's size is a
multiple of ``T``, thread ``t``'s ``k``-th element is element ``t + kT``, the same one in
every loop over a tile of that shape; so a tile that is only ever written and read at the
element being computed (``y = x * w + b``, ``tile.load_block``, ``tile.store_block``, a
reduction over the whole tile) needs no shared memory: each thread keeps its elements in
a local array of ``size / T`` values (``r<name>[_kk]``: registers once NVVM unrolls the
loops) and the statements that write only such arrays need no barrier after them.

Which tiles qualify is found by generating the kernel: every tile of a suitable size
starts as a register tile (:func:`candidates`), each loop's accesses at its element are
rewritten to ``r<name>[_kk]`` (:func:`align_loop`), and any other access left in the source
(a transposed read, a lane-indexed one, a ``tile.dot`` operand, a broadcast of another
shape) puts the tile back in shared memory for the next try (:func:`misplaced`,
:func:`generated`). A whole-tile reduction of a register tile runs the fixed tree
(docs/language.md) first over each thread's values, then over the threads
(:func:`reduce_tile`): the same pairs in the same order as the shared-memory tree, so the
same bits.
"""

from __future__ import annotations

import math
import re

import numpy as np

from ... import ir
from ...ir import TileType
from ..pysource import ctor

REGISTER_VALUES = 512  # at most this many 32-bit registers of register tiles a thread
TILE_VALUES = 64  # a tile of more values a thread stays in shared memory


def register_name(base: str) -> str:
    """The local array of tile variable ``base`` (a generated name, ``v_x``): ``rv_x``
    (generated names start with ``p_``, ``s_`` or ``v``, so no other name is this)."""
    return "r" + base


def candidates(
    kir: ir.KernelIR, types: dict, lanes: int, exempt: set, excluded, why: dict | None = None
) -> set:
    """The tile variables that start as register tiles: sizes a multiple of the group's
    threads, at most TILE_VALUES a thread, not handled elsewhere (``exempt``: the
    register loops' tiles) or found to need shared memory (``excluded``), the largest
    dropped while their 32-bit registers a thread (two for a 64-bit value) exceed
    REGISTER_VALUES. ``why`` (a dict) gets the reason of each other tile, in words."""
    why = {} if why is None else why
    words = {}  # tile -> 32-bit registers a thread
    for v, t in types.items():
        if not isinstance(t, TileType) or v in exempt or v in excluded:
            continue
        size = math.prod(t.shape)
        if not kir.grouped:
            why[v] = "a flat kernel's tiles stay in shared memory"
        elif not size or size % lanes:
            why[v] = f"its {size} elements do not split evenly over the group's {lanes} threads"
        elif size // lanes > TILE_VALUES:
            per = size // lanes
            why[v] = f"{per} values a thread, more than the {TILE_VALUES} a register tile holds"
        else:
            itemsize = np.dtype(ctor(t.dtype).removeprefix("np.")).itemsize
            words[v] = size // lanes * max(1, itemsize // 4)
    chosen = sorted(words, key=lambda v: (words[v], v))
    while chosen and sum(words[v] for v in chosen) > REGISTER_VALUES:
        why[chosen.pop()] = (
            f"the group's register tiles would take more than {REGISTER_VALUES} registers a "
            "thread (the largest stay in shared memory)"
        )
    return set(chosen)


def element_form(shape: tuple[int, ...], lanes: int) -> int | None:
    """The values a thread computes of a tile statement over ``shape`` in the register
    form (``for _kk in range(...)``), or None: the loop keeps its strided form."""
    size = math.prod(shape)
    return size // lanes if size and size % lanes == 0 else None


def aligned(index: str, shape: tuple[int, ...], loop: tuple[int, ...], element: list) -> bool:
    """Whether ``index`` (the subscript of a tile of ``shape``, emitted in an element loop
    over ``loop`` whose index variables are ``element``) is the loop's own element: the
    two shapes' dims other than 1 alike, and the index their loop variables in order (a
    dim of 1 may be indexed by 0 or by the loop variable of a dim of 1)."""
    parts = [p.strip() for p in index.split(",")]
    if len(parts) != len(shape):
        return False
    if [n for n in shape if n != 1] != [n for n in loop if n != 1]:
        return False
    moving = [e for e, n in zip(element, loop) if n != 1]
    ones = {e for e, n in zip(element, loop) if n == 1} | {"0"}
    used = []
    for part, n in zip(parts, shape):
        if n == 1:
            if part not in ones:
                return False
        else:
            used.append(part)
    return used == moving


def align_loop(lines: list[str], start: int, names: dict, loop, element) -> bool:
    """Rewrite the accesses at the loop's element to register tiles ``names`` (register
    name -> tile shape) in ``lines[start:]`` (an element loop's body) as ``r<name>[_kk]``;
    return whether the body touches nothing but register tiles and local scalars (then
    no barrier is needed after it)."""
    if not names:
        return False
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\[([^\[\]]*)\]")

    def rewrite(m: re.Match) -> str:
        name, index = m.group(1), m.group(2)
        if aligned(index, names[name], loop, element):
            return f"{name}[_kk]"
        return m.group(0)

    private = True
    for i in range(start, len(lines)):
        lines[i] = pattern.sub(rewrite, lines[i])
        private = private and _private(lines[i], names)
    return private


_ASSIGN = re.compile(r"^\s*([A-Za-z_]\w*)(\[[^=]*\])?\s*=(?!=)")
_CONTROL = re.compile(r"^\s*(if |elif |else:|for |#|$)")


def _private(line: str, names: dict) -> bool:
    """Whether ``line`` reads and writes only register tiles and local scalars (no array
    another thread may read or write)."""
    code = line.split("  # ", 1)[0]
    own = re.sub(r"\b(" + "|".join(map(re.escape, names)) + r")\[_kk\]", "", code)
    if re.search(r"\b[A-Za-z_]\w*\[", own) or "cuda." in own or "atomic" in own:
        return False  # an array other than a register tile, an atomic, a CUDA call
    return bool(_ASSIGN.match(code) or _CONTROL.match(code))


IN_PLACE = "  # reduced in its own registers"  # (reduce_tile: read by nothing after)


def misplaced(source: str, names: dict) -> dict:
    """The register tiles (register names) that ``source`` accesses anywhere other than
    at ``[_kk]``, their declaration or a reduction in their own registers: they need
    shared memory. Each with the first such line of ``source``."""
    found = {}
    for name in names:
        for m in re.finditer(r"\b" + re.escape(name) + r"\b(?=(.{0,40}))", source):
            rest = m.group(1)
            if not (
                rest.startswith("[_kk]")
                or rest.startswith(" = cuda.local.array(")
                or rest.startswith(IN_PLACE)
            ):
                start = source.rfind("\n", 0, m.start()) + 1
                end = source.find("\n", m.start())
                found[name] = source[start : end if end >= 0 else len(source)].strip()
                break
    return found


_LINE = re.compile(r"# line (\d+)")


def moved_reason(line: str, lines_above: str = "") -> str:
    """Why a tile left the registers, in words, from the generated ``line`` that accessed
    it (its kernel source line is the comment on it, or on the lines above it)."""
    at = _LINE.search(line) or (_LINE.findall(lines_above) or [None])[-1]
    where = f"line {at.group(1) if isinstance(at, re.Match) else at}" if at else "the kernel"
    return f"{where} reads or writes it at elements other threads hold"


def declarations(cg) -> list[str]:
    """The register tiles' local arrays, at the top of the kernel's body."""
    lines = []
    for reg, var in sorted(cg.blocked_vars.items()):
        t = cg.types[var]
        per = math.prod(t.shape) // cg.lanes
        lines.append(f"    {reg} = cuda.local.array({per}, {ctor(t.dtype)})")
    return lines


def reduce_tile(cg, source: ir.Name, scratch_of, combine_fn: str, tree_steps) -> str:
    """A whole-tile reduction of register tile ``source``: the fixed tree's steps whose
    pairs lie in one thread (offsets of whole multiples of the threads) over each
    thread's values, in a copy where the tile is read again (else in its own registers);
    then each thread's first value in the shared scratch (``scratch_of(size)``), which
    the rest of the tree reduces as the threads' values (``tree_steps(n)``: the tree's
    steps over n values). Returns the scratch."""
    t = source.type
    per = math.prod(t.shape) // cg.lanes
    reg = cg.name(source.name)
    work = f"_rw{len(cg.lines)}"
    if uses(cg.kir).get(source.name, 0) > 1:  # the tile lives on
        cg.emit(f"{work} = cuda.local.array({per}, {ctor(t.dtype)})")
        cg.emit(f"for _kk in range({per}):")
        cg.emit(f"    {work}[_kk] = {reg}[_kk]")
    else:
        cg.emit(f"{work} = {reg}{IN_PLACE}")
    for count, offset in tree_steps(per):
        cg.emit(f"for _kk in range({count}):")
        cg.emit(f"    {work}[_kk] = {combine_fn}({work}[_kk], {work}[_kk + {offset}])")
    scratch = scratch_of(cg.lanes)
    cg.emit(f"{scratch}[_lane] = {work}[0]")
    return scratch


_uses: dict = {}  # id(kernel IR) -> (the IR, {variable: times read})


def uses(kir: ir.KernelIR) -> dict:
    """How many times each variable of ``kir`` is read (a temporary tile that one
    reduction reads is reduced in its own registers)."""
    found = _uses.get(id(kir))
    if found is None or found[0] is not kir:
        counts: dict = {}
        for stmt in ir.walk_stmts(kir.body):
            for e in ir.stmt_exprs(stmt):
                if isinstance(e, ir.Name):
                    counts[e.name] = counts.get(e.name, 0) + 1
        if len(_uses) > 64:
            _uses.clear()
        found = _uses[id(kir)] = (kir, counts)
    return found[1]


def generated(make):
    """(the codegen, its source) of ``make(excluded)``, tried with fewer register tiles
    until every register tile is accessed only at its threads' elements."""
    excluded: set = set()
    moved: dict = {}  # tile variable -> why it left the registers
    while True:
        cg = make(frozenset(excluded))
        source = cg.generate()
        wrong = misplaced(source, cg.blocked_vars)
        if not wrong:
            cg.moved = moved
            return cg, source
        for name, line in wrong.items():
            above = source[: source.find(line)]
            moved[cg.blocked_vars[name]] = moved_reason(line, above[-2000:])
        excluded |= {cg.blocked_vars[name] for name in wrong}
