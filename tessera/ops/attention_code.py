"""Groups of the attention kinds → generated ``@kernel`` source: the flash-attention
forward (``attention``: the scores never stored), the row log-sum-exp of its softmax
(``attention_lse``) and the backward blocks (``attention_grad``: dq, dk, dv recomputed
from the log-sum-exp). The rest of the kinds: codegen.py, which this module shares its
emitter with.
"""

from __future__ import annotations

from .. import dtypes as D
from .codegen import Source, _block, _Emitter, literal
from .fuse import Group
from .ir import Node

# on a GPU, fewer query blocks of 64 rows than this take blocks of 32 rows instead (twice
# the groups: a GPU runs a group per SM at a time, and has about this many SMs)
DEVICE_GROUPS = 128


# on a GPU, attention whose row groups make fewer warps than this (about 4 an SM, one a
# scheduler) is split along the keys too: each group's keys in shares, the shares
# combined after. Measured on an H100 (bench/README.md, seventeenth session): a single
# head of 4,096 rows (256 warps) took 95 µs in one kernel, 69 µs in 2 shares, 74 in 4
# and 97 in 8; 1,024 rows lost with 4 shares (56 → 65 µs: a second launch, little work)
DEVICE_WARPS = 4 * DEVICE_GROUPS
MOST_SPLITS = 8
KEY_BLOCKS_A_SPLIT = 16  # a share has at least this many key blocks (1,024 keys of 64)


def query_rows(n: int, device: bool) -> int:
    """Query rows a group of the forward kernel owns: 64, or 32 on a GPU where 64-row
    groups would number fewer than ``DEVICE_GROUPS``."""
    return _block(n, 32 if device and -(-n // 64) < DEVICE_GROUPS else 64)


def key_splits(n: int, keys: int, causal: bool, device: bool) -> int:
    """Shares of the keys each query group's work is split into (1: not split). Only on a
    GPU, where the row groups alone make fewer than ``DEVICE_WARPS`` warps (the register
    row loop runs a warp per 16 rows): as many shares as make that many, each at least
    ``KEY_BLOCKS_A_SPLIT`` key blocks (a short sequence gains less than a second
    launch costs). Causal attention is not split (its groups' key
    ranges end at their rows)."""
    if not device or causal:
        return 1
    rows = query_rows(n, device)
    warps = -(-n // rows) * max(rows // 16, 1)
    key_blocks = -(-keys // _block(keys, 64))
    splits = min(-(-DEVICE_WARPS // warps), key_blocks // KEY_BLOCKS_A_SPLIT, MOST_SPLITS)
    return splits if splits >= 2 else 1


def split_plan(n: int, keys: int, causal: bool) -> tuple[int, int, int, int] | None:
    """On a GPU, how attention of ``n`` query rows over ``keys`` keys is split along the
    keys: (shares, query rows a group, keys a share, rows a region of the shares' array:
    ``n`` rounded up to whole groups), or None (one kernel, :func:`attention`)."""
    splits = key_splits(n, keys, causal, True)
    if splits == 1:
        return None
    bm, bn = query_rows(n, True), _block(keys, 64)
    key_blocks = -(-keys // bn)
    share = -(-key_blocks // splits) * bn
    return splits, bm, share, -(-n // bm) * bm


def attention(group: Group, name: str, device: bool = False) -> Source:
    """Flash attention (examples/flash_attention.py): each group owns ``BM`` query rows
    and walks the keys in blocks of ``BN`` with an online softmax; keys past the end are
    masked to -inf, so no score is ever stored. ``BM`` is 64 rows, or 32 where the arrays
    live on a GPU and 64-row blocks would leave it with fewer than ``DEVICE_GROUPS``
    groups (a row's arithmetic does not depend on ``BM``: the same bits either way)."""
    em = _Emitter(group, name)
    node = group.head
    n, keys = node.inputs[0].shape[0], node.inputs[1].shape[0]
    bm, bn = query_rows(n, device), _block(keys, 64)
    em.emit(f"m0 = group_id(0) * {bm}", 1)
    loads = _online_start(em, node, bm)
    causal = node.attrs.get("causal", False)
    end = f"min({keys}, m0 + {bm})" if causal else f"{keys}"  # causal: no key past the rows
    em.emit(f"for n0 in tile.range(0, {end}, {bn}):", 1)

    def scores() -> None:
        em.emit(f"s = tile.dot(qb, kb.T) * {literal(node.attrs['scale'])}", 2)
        if causal:  # (also masks keys past the end: a key past the end is past every row)
            em.emit(f"cols = (tile.arange({bn}) + n0)[None, :]", 2)
            em.emit(f"rows = (tile.arange({bm}) + m0)[:, None]", 2)
            em.emit(f"s = tile.where((cols <= rows) & (cols < {keys}), s, -math.inf)", 2)
        elif keys % bn:
            em.emit(f"s = tile.where((tile.arange({bn}) + n0 < {keys})[None, :], s, -math.inf)", 2)

    _online_step(em, node, bn, loads, scores)
    out = "acc / row_sum[:, None]"
    if node.dtype != D.f32:
        out = f"({out}).astype({node.dtype.name})"
    em.emit(f"tile.store_block({em.arg(node, flat=False, written=True)}, (m0, 0), {out})", 1)
    return em.source("@kernel(tile=(64,), shared=64 * KiB)", (-(-n // bm),))


def attention_split(group: Group, name: str) -> Source:
    """One share of the keys of one query group (grid: query groups × shares): the
    flash-attention loop of :func:`attention` over keys ``[share · C, (share + 1) · C)``,
    then the share's normalised result and each row's log-sum-exp, f32, into one array of
    ``2 · shares`` regions of ``R`` rows (``R``: the rows rounded up to whole groups):
    region ``s`` the result of share ``s``, region ``shares + s`` its log-sum-exp in every
    column. Not causal (:func:`key_splits`): every share has keys for every row."""
    em = _Emitter(group, name)
    node = group.head
    n, keys = node.inputs[0].shape[0], node.inputs[1].shape[0]
    splits, bm, bn = node.attrs["splits"], node.attrs["rows"], _block(keys, 64)
    share = node.attrs["share"]
    padded = -(-n // bm) * bm
    em.emit(f"m0 = group_id(0) * {bm}", 1)
    em.emit(f"k0 = group_id(1) * {share}", 1)
    loads = _online_start(em, node, bm)
    em.emit(f"for n0 in tile.range(k0, min({keys}, k0 + {share}), {bn}):", 1)
    _online_step(em, node, bn, loads, lambda: _scores(em, node, bm, bn, 2))
    out = em.arg(node, flat=False, written=True)
    em.emit(f"tile.store_block({out}, (group_id(1) * {padded} + m0, 0), "
            "acc / row_sum[:, None])", 1)  # fmt: skip
    em.emit("lse = row_max + math.log(row_sum)", 1)
    # lse in every column, as a tile computed element by element from acc's (a GPU keeps
    # it in acc's registers: no tile through shared memory); both branches are lse
    em.emit("lse_block = tile.where(acc == acc, lse[:, None], lse[:, None])", 1)
    em.emit(f"tile.store_block({out}, (({splits} + group_id(1)) * {padded} + m0, 0), lse_block)", 1)
    return em.source("@kernel(tile=(64,), shared=64 * KiB)", (padded // bm, splits))


def _online_start(em: _Emitter, node: Node, bm: int) -> tuple[str, str, str, str]:
    """Group ``m0``'s queries and the online softmax's starting state; returns what the
    key blocks' loads need: (k's and v's parameters, the loads' cast, P's operand).
    f16/bf16 operands stay f16/bf16 for both products (tensor cores on a GPU); P is
    rounded to the inputs' dtype before P @ V, as FlashAttention and SDPA do."""
    q, k, v = node.inputs
    d, dv = q.shape[1], v.shape[1]
    pq, pk, pv = (em.arg(x, flat=False) for x in (q, k, v))
    half = q.dtype in D.COMPUTED_IN_F32 and q.dtype == k.dtype == v.dtype
    cast = ".astype(f32)" if q.dtype in D.COMPUTED_IN_F32 and not half else ""
    em.emit(f"qb = tile.load_block({pq}, (m0, 0), ({bm}, {d})){cast}", 1)
    em.emit(f"row_max = tile.full(({bm},), -math.inf, f32)", 1)
    em.emit(f"row_sum = tile.zeros(({bm},), f32)", 1)
    em.emit(f"acc = tile.zeros(({bm}, {dv}), f32)", 1)
    return pk, pv, cast, f"p.astype({q.dtype.name})" if half else "p"


def _online_step(em: _Emitter, node: Node, bn: int, loads, scores) -> None:
    """The loop body: key block ``n0``'s keys and values, its scores (``scores()`` emits
    ``s``), then the online softmax's update of the row maxima, sums and ``acc``."""
    pk, pv, cast, p_operand = loads
    d, dv = node.inputs[0].shape[1], node.inputs[2].shape[1]
    em.emit(f"kb = tile.load_block({pk}, (n0, 0), ({bn}, {d})){cast}", 2)
    em.emit(f"vb = tile.load_block({pv}, (n0, 0), ({bn}, {dv})){cast}", 2)
    scores()
    em.emit("new_max = max(row_max, s.max(axis=1))", 2)
    em.emit("p = math.exp(s - new_max[:, None])", 2)
    em.emit("rescale = math.exp(row_max - new_max)", 2)
    em.emit("row_sum = row_sum * rescale + p.sum(axis=1)", 2)
    em.emit(f"acc = acc * rescale[:, None] + tile.dot({p_operand}, vb)", 2)
    em.emit("row_max = new_max", 2)


def attention_combine(group: Group, name: str) -> Source:
    """The shares of :func:`attention_split` combined, one lane per result element:
    ``Σ w_s · o_s / Σ w_s`` with ``w_s = exp(lse_s - max lse)``."""
    em = _Emitter(group, name)
    node = group.head
    (part,) = node.inputs
    n, dv = node.shape
    splits = node.inputs[0].attrs["splits"]
    region = part.shape[0] // (2 * splits) * dv  # elements of a region
    pp, py = em.arg(part, flat=True), em.arg(node, flat=True, written=True)
    em.emit("i = tile.linear_id()", 1)
    em.emit(f"if i < {n * dv}:", 1)
    lse = [f"{pp}[i + {(splits + s) * region}]" for s in range(splits)]
    em.emit(f"top = {lse[0]}", 2)
    for s in range(1, splits):
        em.emit(f"top = max(top, {lse[s]})", 2)
    em.emit("total = f32(0)", 2)
    em.emit("acc = f32(0)", 2)
    for s in range(splits):
        em.emit(f"w = math.exp({lse[s]} - top)", 2)
        em.emit("total = total + w", 2)
        em.emit(f"acc = acc + w * {pp}[i + {s * region}]", 2)
    em.emit(f"{py}[i] = {node.dtype.name}(acc / total)", 2)
    return em.source("@kernel", (n * dv,))


def _scores(em: _Emitter, node: Node, bm: int, bn: int, depth: int) -> None:
    """``s`` = the scaled scores of query block ``m0`` and key block ``n0``, masked to -inf
    past the keys' end and, when causal, above the diagonal."""
    keys = node.inputs[1].shape[0]
    em.emit(f"s = tile.dot(qb, kb.T) * {literal(node.attrs['scale'])}", depth)
    cols = f"(tile.arange({bn}) + n0)[None, :]"
    if node.attrs.get("causal"):
        rows = f"(tile.arange({bm}) + m0)[:, None]"
        em.emit(f"s = tile.where(({cols} <= {rows}) & ({cols} < {keys}), s, -math.inf)", depth)
    elif keys % bn:
        em.emit(f"s = tile.where({cols} < {keys}, s, -math.inf)", depth)


def _backward_block(n: int, keys: int) -> int:
    """The backward kernels' square block: 32, or 16 for short sequences (a tile kernel's
    compile time grows with its blocks, and short sequences gain nothing from 32)."""
    return 16 if min(n, keys) < 128 else 32


def attention_lse(group: Group, name: str) -> Source:
    """Each query row's log-sum-exp of its scores (the forward's softmax statistics, kept
    for the backward kernels: N numbers instead of N × M probabilities)."""
    em = _Emitter(group, name)
    node = group.head
    q, k = node.inputs
    n, d = q.shape
    keys = k.shape[0]
    bm = bn = _backward_block(n, keys)
    cast = ".astype(f32)" if q.dtype in D.COMPUTED_IN_F32 else ""
    pq, pk = em.arg(q, flat=False), em.arg(k, flat=False)
    em.emit(f"m0 = group_id(0) * {bm}", 1)
    em.emit(f"qb = tile.load_block({pq}, (m0, 0), ({bm}, {d})){cast}", 1)
    em.emit(f"row_max = tile.full(({bm},), -math.inf, f32)", 1)
    em.emit(f"row_sum = tile.zeros(({bm},), f32)", 1)
    end = f"min({keys}, m0 + {bm})" if node.attrs.get("causal") else f"{keys}"
    em.emit(f"for n0 in tile.range(0, {end}, {bn}):", 1)
    em.emit(f"kb = tile.load_block({pk}, (n0, 0), ({bn}, {d})){cast}", 2)
    _scores(em, node, bm, bn, 2)
    em.emit("new_max = max(row_max, s.max(axis=1))", 2)
    em.emit(
        "row_sum = row_sum * math.exp(row_max - new_max)"
        " + math.exp(s - new_max[:, None]).sum(axis=1)",
        2,
    )
    em.emit("row_max = new_max", 2)
    out = em.arg(node, flat=True, written=True)
    em.emit(f"tile.store_block({out}, (m0,), row_max + math.log(row_sum))", 1)
    return em.source("@kernel(tile=(64,), shared=64 * KiB)", (-(-n // bm),))


def attention_grad(group: Group, name: str) -> Source:
    """dq (one group per query block, over the key blocks) or dk / dv (one group per key
    block, over the query blocks), recomputing each block's probabilities from the row
    log-sum-exp: ``p = exp(s - lse)``, ``ds = p · (g vᵀ - delta) · scale`` with ``delta``
    each row's ``g · out``. Nothing of size N × M is stored."""
    em = _Emitter(group, name)
    node = group.head
    q, k, v, g, lse, delta = node.inputs
    n, d = q.shape
    keys, dv = k.shape[0], v.shape[1]
    bm = bn = _backward_block(n, keys)
    causal = node.attrs.get("causal")
    cast = ".astype(f32)" if q.dtype in D.COMPUTED_IN_F32 else ""
    part = node.op.removeprefix("attention_")
    pq, pk, pg = (em.arg(x, flat=False) for x in (q, k, g))
    pv = em.arg(v, flat=False) if part != "dv" else None
    plse = em.arg(lse, flat=True)
    pdelta = em.arg(delta, flat=True) if part != "dv" else None
    width = {"dq": d, "dk": d, "dv": dv}[part]

    def load_queries(depth: int) -> None:
        em.emit(f"qb = tile.load_block({pq}, (m0, 0), ({bm}, {d})){cast}", depth)
        em.emit(f"gb = tile.load_block({pg}, (m0, 0), ({bm}, {dv})){cast}", depth)
        em.emit(f"lb = tile.load_block({plse}, (m0,), ({bm},))", depth)
        if pdelta is not None:
            em.emit(f"db = tile.load_block({pdelta}, (m0,), ({bm},))", depth)

    def load_keys(depth: int) -> None:
        em.emit(f"kb = tile.load_block({pk}, (n0, 0), ({bn}, {d})){cast}", depth)
        if pv is not None:
            em.emit(f"vb = tile.load_block({pv}, (n0, 0), ({bn}, {dv})){cast}", depth)

    def probabilities(depth: int) -> None:
        _scores(em, node, bm, bn, depth)
        em.emit("p = math.exp(s - lb[:, None])", depth)
        if part != "dv":
            scale = literal(node.attrs["scale"])
            em.emit(f"ds = p * (tile.dot(gb, vb.T) - db[:, None]) * {scale}", depth)

    if part == "dq":
        em.emit(f"m0 = group_id(0) * {bm}", 1)
        load_queries(1)
        em.emit(f"acc = tile.zeros(({bm}, {width}), f32)", 1)
        end = f"min({keys}, m0 + {bm})" if causal else f"{keys}"
        em.emit(f"for n0 in tile.range(0, {end}, {bn}):", 1)
        load_keys(2)
        probabilities(2)
        em.emit("acc = tile.dot(ds, kb, acc)", 2)
        origin, grid = "(m0, 0)", (-(-n // bm),)
    else:
        em.emit(f"n0 = group_id(0) * {bn}", 1)
        load_keys(1)
        em.emit(f"acc = tile.zeros(({bn}, {width}), f32)", 1)
        start = f"(n0 // {bm}) * {bm}" if causal else "0"  # causal: no query before the key
        em.emit(f"for m0 in tile.range({start}, {n}, {bm}):", 1)
        load_queries(2)
        probabilities(2)
        em.emit(
            "acc = tile.dot(p.T, gb, acc)" if part == "dv" else "acc = tile.dot(ds.T, qb, acc)", 2
        )
        origin, grid = "(n0, 0)", (-(-keys // bn),)
    out = "acc" if node.dtype == D.f32 else f"acc.astype({node.dtype.name})"
    em.emit(f"tile.store_block({em.arg(node, flat=False, written=True)}, {origin}, {out})", 1)
    return em.source("@kernel(tile=(64,), shared=64 * KiB)", grid)
