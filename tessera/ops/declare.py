"""Every op, declared once: its kind, arity, shape/dtype rule and element code.

The element code is kernel-language source with ``{0}``, ``{1}``… for the inputs' values;
the same text is a scalar expression in a flat kernel and a tile expression in a tile
kernel (``max(t, 0.0)``, ``math.exp(t)`` and the operators mean the same on both), but
for the few ops whose tile spelling differs (``tile_code``). The adjoint rules live in
``adjoints.py``; the lowering of each kind in ``codegen.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import dtypes as D
from .ir import Const


class RuleError(Exception):
    """An op's inputs break its rule; the tracer adds the module, op and line."""


@dataclass(frozen=True)
class OpDecl:
    name: str
    kind: str  # elementwise | matmul | reduce | softmax | cross_entropy | transpose | reshape
    arity: int
    code: str = ""  # elementwise: the element's code
    tile_code: str = ""  # elementwise: the tile spelling, where it differs
    result: str = "same"  # elementwise dtype: same | bool | attr (the ``dtype`` attribute)
    floats_only: bool = False
    doc: str = ""
    integers_only: bool = False  # integer and bool arrays (the bitwise ops)


OPS: dict[str, OpDecl] = {}


def _declare(*decls: OpDecl) -> None:
    for d in decls:
        OPS[d.name] = d


def _ew(
    name, arity, code, doc, tile_code="", result="same", floats_only=False, integers_only=False
) -> OpDecl:
    return OpDecl(
        name, "elementwise", arity, code, tile_code, result, floats_only, doc, integers_only
    )


_declare(
    _ew("add", 2, "({0} + {1})", "a + b"),
    _ew("sub", 2, "({0} - {1})", "a - b"),
    _ew("mul", 2, "({0} * {1})", "a * b"),
    _ew("div", 2, "({0} / {1})", "a / b (true division)", floats_only=True),
    _ew("neg", 1, "(-{0})", "-a"),
    _ew("exp", 1, "math.exp({0})", "e ** a", floats_only=True),
    _ew("log", 1, "math.log({0})", "natural logarithm", floats_only=True),
    _ew("sqrt", 1, "math.sqrt({0})", "square root", floats_only=True),
    _ew("tanh", 1, "math.tanh({0})", "hyperbolic tangent", floats_only=True),
    _ew("relu", 1, "max({0}, 0.0)", "max(a, 0)", floats_only=True),
    _ew(
        "gelu",
        1,
        "(0.5 * {0} * (1.0 + math.erf({0} * 0.7071067811865476)))",
        "a · Φ(a), with erf (not the tanh approximation)",
        floats_only=True,
    ),
    _ew("silu", 1, "({0} / (1.0 + math.exp(-{0})))", "a · sigmoid(a)", floats_only=True),
    _ew("sigmoid", 1, "(1.0 / (1.0 + math.exp(-{0})))", "1 / (1 + e ** -a)", floats_only=True),
    _ew("maximum", 2, "max({0}, {1})", "elementwise max (NaN propagates)"),
    _ew("minimum", 2, "min({0}, {1})", "elementwise min (NaN propagates)"),
    _ew("where", 3, "({1} if {0} else {2})", "c ? a : b", tile_code="tile.where({0}, {1}, {2})"),
    _ew("cast", 1, "{dtype}({0})", "convert", tile_code="{0}.astype({dtype})", result="attr"),
    _ew("pow", 2, "({0} ** {1})", "a ** b (a ** 2 is a * a, a ** 0.5 math.sqrt(a))"),
    _ew("abs", 1, "abs({0})", "|a|"),
    # the language's // and % are Python's (floor; the sign of b), as NumPy's floor_divide
    # and remainder, an integer division by 0 gives 0 as NumPy's does
    _ew("floor_divide", 2, "({0} // {1})", "a // b (floor division)"),
    _ew("remainder", 2, "({0} % {1})", "a % b (the sign of b)"),
    _ew("bitwise_and", 2, "({0} & {1})", "a & b", integers_only=True),
    _ew("bitwise_or", 2, "({0} | {1})", "a | b", integers_only=True),
    _ew("bitwise_xor", 2, "({0} ^ {1})", "a ^ b", integers_only=True),
    _ew("invert", 1, "(~{0})", "~a (integers: every bit flipped)", integers_only=True),
    _ew("logical_not", 1, "(not {0})", "not a (bool arrays: ~a)", integers_only=True),
    _ew("clip", 3, "min(max({0}, {1}), {2})", "a clipped to [lo, hi] (NumPy's clip)"),
    _ew("ne", 2, "({0} != {1})", "a != b", result="bool"),
    _ew("gt", 2, "({0} > {1})", "a > b", result="bool"),
    _ew("ge", 2, "({0} >= {1})", "a >= b", result="bool"),
    _ew("lt", 2, "({0} < {1})", "a < b", result="bool"),
    _ew("le", 2, "({0} <= {1})", "a <= b", result="bool"),
    _ew(
        "dropout",
        1,
        "({0} * {scale} if philox_uniform(i, {seed}) >= {p} else 0.0)",
        "zero an element with probability p (Philox 4x32-10 of its index and the seed), "
        "scale the rest by 1 / (1 - p)",
        floats_only=True,
    ),
    _ew(
        "dropout_gen",
        3,
        "({0} * {scale} if philox_uniform(i + {2} + {skip}, {1}) >= {p} else 0.0)",
        "dropout with a Generator: counter offset (+ the draws before it in the call) + i, "
        "key seed; {1} and {2} are the generator's 0-d seed and offset",
        floats_only=True,
    ),
    # complex tensors (the transforms' results): their parts, conjugate, and back
    _ew("real", 1, "{0}.real", "the real part of a complex tensor", result="attr"),
    _ew("imag", 1, "{0}.imag", "the imaginary part of a complex tensor", result="attr"),
    _ew("conj", 1, "{0}.conjugate()", "the complex conjugate"),
    _ew("complex", 2, "complex({0}, {1})", "re + i·im, of two real tensors", result="attr"),
    # used by adjoints (adjoints.py), not in tessera.op
    _ew("eq", 2, "({0} == {1})", "a == b", result="bool"),
    _ew("full", 0, "{dtype}({value})", "a constant array of attrs shape and dtype", result="attr"),
    _ew("expand", 1, "{0}", "broadcast to attrs shape"),
    _ew(
        "causal",
        1,
        "({0} if i % {cols} <= i // {cols} else -math.inf)",
        "-inf above the diagonal of a (queries, keys) matrix",
        floats_only=True,
    ),
    _ew(
        "gelu_grad",
        1,
        "(0.5 * (1.0 + math.erf({0} * 0.7071067811865476))"
        " + {0} * 0.3989422804014327 * math.exp(-0.5 * {0} * {0}))",
        "d gelu(a) / da",
        floats_only=True,
    ),
    OpDecl("matmul", "matmul", 2, doc="a @ b (batched over leading dims), f32 (f64) accumulation"),
    OpDecl("sum", "reduce", 1, doc="sum along an axis (or all)"),
    OpDecl("mean", "reduce", 1, doc="mean along an axis (or all)", floats_only=True),
    OpDecl("max", "reduce", 1, doc="max along an axis (or all)"),
    OpDecl("min", "reduce", 1, doc="min along an axis (or all)"),
    OpDecl("softmax", "softmax", 1, doc="exp(x - max) / sum along the last axis", floats_only=True),
    OpDecl(
        "log_softmax",
        "softmax",
        1,
        doc="x - max - log(sum(exp(x - max))) along the last axis, one group per row",
        floats_only=True,
    ),
    OpDecl("transpose", "transpose", 1, doc="the last two dims swapped"),
    OpDecl(
        "cross_entropy",
        "cross_entropy",
        2,
        doc="each row's logsumexp(logits) - logits[target], one group per row",
        floats_only=True,
    ),
    # cross_entropy's adjoint: (softmax(logits) - onehot(targets)) * each row's gradient
    OpDecl("cross_entropy_grad", "cross_entropy", 3, doc="d loss / d logits, one group per row"),
    OpDecl(
        "layernorm",
        "norm",
        3,
        doc="(x - mean) / sqrt(var + eps) * w + b along the last axis, one lane per row",
        floats_only=True,
    ),
    OpDecl(
        "rmsnorm",
        "norm",
        2,
        doc="x / sqrt(mean(x ** 2) + eps) * w along the last axis, one lane per row",
        floats_only=True,
    ),
    OpDecl(
        "attention",
        "attention",
        3,
        doc="softmax(q @ k.T * scale [causal mask]) @ v in one flash-attention kernel",
    ),
    OpDecl("reshape", "reshape", 1, doc="the same elements in another shape (row-major)"),
    # the transforms (fft_core.py: kernels run by plan.py, not generated from the node)
    OpDecl("fft", "fft", 1, doc="numpy.fft.fft along attrs axis: n points, times scale"),
    OpDecl("ifft", "fft", 1, doc="numpy.fft.ifft along attrs axis: n points, times scale"),
    OpDecl("rfft", "fft", 1, doc="numpy.fft.rfft: the first n // 2 + 1 bins of a real x"),
    OpDecl("irfft", "fft", 1, doc="numpy.fft.irfft: n real points from n // 2 + 1 bins"),
    _ew("copy", 1, "{0}", "the same values in a new array (what a launch's mut argument gets)"),
    OpDecl("launch", "launch", 0, doc="a @kernel launched on traced tensors (launches.py)"),
    OpDecl("launch_result", "launch_result", 1, doc="an array a recorded launch wrote"),
    OpDecl("collective", "collective", 1, doc="a dist collective on a traced tensor"),
    # attention split along the keys on a GPU (passes.split_keys): shares, then combined
    OpDecl(
        "attention_split",
        "attention_split",
        3,
        doc="flash attention over a share of the keys a group: results and log-sum-exps",
    ),
    OpDecl("attention_combine", "attention_combine", 1, doc="attention's key shares combined"),
    # the flash-attention backward (made by attention's adjoint): O(N·d) memory
    OpDecl("attention_lse", "attention_lse", 2, doc="log-sum-exp of each row's scores"),
    OpDecl("attention_dq", "attention_grad", 6, doc="d loss / d q, key block by key block"),
    OpDecl("attention_dk", "attention_grad", 6, doc="d loss / d k, query block by query block"),
    OpDecl("attention_dv", "attention_grad", 6, doc="d loss / d v, query block by query block"),
)


# the ops that take complex tensors (the others refuse them, naming these)
COMPLEX_OPS = frozenset(
    ("add", "sub", "mul", "neg", "copy", "expand", "reshape", "real", "imag", "conj")
    + ("fft", "ifft", "rfft", "irfft")
)


def fft_type(op: str, x, attrs: dict) -> tuple[tuple[int, ...], D.DType]:
    """A transform along ``attrs["axis"]`` of ``attrs["n"]`` points: complex64 for f16,
    f32 and complex64 tensors, complex128 for f64 and complex128 (NumPy's), the axis
    ``n`` long (rfft: ``n // 2 + 1``; ``attrs["out"]``, an adjoint's crop or pad, when
    set); irfft's result, and an adjoint's that takes the real part (``attrs["real"]``),
    is real (f16 for an f16 irfft, as NumPy)."""
    if x.dtype.kind == "c":
        ct = x.dtype
    elif x.dtype in (D.f16, D.f32):
        ct = D.complex64
    elif x.dtype == D.f64:
        ct = D.complex128
    else:
        raise RuleError(f"takes f16, f32, f64 or complex tensors, not {x.dtype.name}")
    if op == "rfft" and x.dtype.kind == "c":
        raise RuleError(f"takes a real tensor, not {x.dtype.name} (use op.fft)")
    n, axis = attrs["n"], attrs["axis"]
    width = attrs.get("out") or (n // 2 + 1 if op == "rfft" else n)
    shape = x.shape[:axis] + (width,) + x.shape[axis + 1 :]
    if op == "irfft" or attrs.get("real"):
        return shape, D.f16 if x.dtype == D.f16 and op == "irfft" else D.COMPLEX_PARTS[ct]
    return shape, ct


def pow_code(exponent, dtype: D.DType) -> str | None:
    """The element code of ``a ** exponent`` for the Python numbers NumPy computes
    otherwise than ``pow``: ``a * a`` for 2, ``math.sqrt(a)`` for 0.5 (floats)."""
    if not isinstance(exponent, Const) or isinstance(exponent.value, bool):
        return None
    if exponent.value == 2:
        return "({0} * {0})"
    if exponent.value == 0.5 and dtype.is_float:
        return "math.sqrt({0})"
    return None


# ----------------------------------------------------------------------------- rules
def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcasting of ``shapes``."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0} - {1}
        if len(sizes) > 1:
            raise RuleError(f"shapes {' and '.join(map(str, shapes))} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def common_dtype(
    decl: OpDecl, dtypes: list[D.DType | None], numbers: D.DType | None = None
) -> D.DType:
    """The one dtype of the inputs (Python numbers, ``None`` here, take it; alone, they
    have ``numbers``, their promotion)."""
    known = {d for d in dtypes if d is not None}
    if len(known) > 1:
        names = " and ".join(sorted(d.name for d in known))
        raise RuleError(f"mixes dtypes {names}; cast one with op.cast(x, dtype)")
    if not known and numbers is not None:
        known = {numbers}
    if not known:
        raise RuleError("needs at least one array or tensor")
    dtype = known.pop()
    if decl.floats_only and not dtype.is_float:
        raise RuleError(f"takes float arrays, not {dtype.name}")
    if decl.integers_only and not (dtype.is_int or dtype == D.bool_):
        raise RuleError(f"takes integer or bool arrays, not {dtype.name}")
    return dtype


def promote(decl: OpDecl, values: list) -> D.DType | None:
    """The dtype arrays of one dtype and Python numbers (``Const``) meet in, as NumPy 2's
    promotion (NEP 50): a number takes the array's dtype, but a Python float beside an
    integer or bool array makes f64 and a Python int beside a bool array i64; numbers
    alone give i64 / f64 / bool. A Python int that does not fit an integer dtype is an
    error (NumPy raises OverflowError), except in a comparison, which widens to i64 and
    compares the values. None when the arrays mix dtypes (``common_dtype`` says so)."""
    operands = values[1:] if decl.name == "where" else values
    arrays = {v.dtype for v in operands if not isinstance(v, Const)}
    numbers = [v.value for v in operands if isinstance(v, Const)]
    if len(arrays) > 1 or not numbers:
        return None
    if not arrays:  # Python numbers only: NumPy's default dtype of their kind
        if any(isinstance(n, float) for n in numbers):
            dtype = D.f64
        else:
            dtype = D.bool_ if all(isinstance(n, bool) for n in numbers) else D.i64
    else:
        dtype = arrays.pop()
        if dtype.kind == "c":  # (a complex tensor keeps its dtype beside real numbers)
            return dtype
        if not dtype.is_float and any(isinstance(n, float) for n in numbers):
            dtype = D.f64
        elif dtype == D.bool_ and any(not isinstance(n, bool) for n in numbers):
            dtype = D.i64
    for n in numbers:
        if isinstance(n, bool) or not isinstance(n, int):
            continue
        if dtype.is_float:
            try:
                float(n)
            except OverflowError:
                raise RuleError(
                    f"the Python int {n} does not fit {dtype.name} (NumPy raises OverflowError too)"
                ) from None
            continue
        info = np.iinfo(dtype.np_dtype)
        if info.min <= n <= info.max:
            continue
        wide = np.iinfo(np.int64)
        if decl.result == "bool" and dtype != D.u64 and wide.min <= n <= wide.max:
            dtype = D.i64  # a comparison compares the values (as NumPy 2 does)
            continue
        raise RuleError(
            f"the Python int {n} does not fit {dtype.name} (range {info.min}..{info.max}; "
            "NumPy 2 raises OverflowError too): cast the array to a wider dtype first"
        )
    return dtype


def elementwise_type(decl: OpDecl, inputs: list, attrs: dict) -> tuple[tuple[int, ...], D.DType]:
    if decl.name == "full":
        return attrs["shape"], attrs["dtype"]
    if decl.name == "dropout_gen":  # x, then the generator's 0-d i64 seed and offset
        x, *state = inputs
        if any(v.shape != () or v.dtype != D.i64 for v in state):
            raise RuleError("takes a Generator's state: two 0-d i64 arrays")
        if x.dtype is None or not x.dtype.is_float:
            raise RuleError(f"takes float arrays, not {getattr(x.dtype, 'name', x.dtype)}")
        return x.shape, x.dtype
    shape = broadcast(*(v.shape for v in inputs))
    if decl.name == "expand":
        if broadcast(shape, attrs["shape"]) != attrs["shape"]:
            raise RuleError(f"cannot broadcast {shape} to {attrs['shape']}")
        shape = attrs["shape"]
    if decl.name == "where":
        if inputs[0].dtype is not None and inputs[0].dtype != D.bool_:
            raise RuleError(f"the condition must be bool, not {inputs[0].dtype.name}")
        dtype = common_dtype(decl, [v.dtype for v in inputs[1:]], promote(decl, inputs))
    else:
        dtype = common_dtype(decl, [v.dtype for v in inputs], promote(decl, inputs))
    if decl.name == "pow" and not dtype.is_float:
        exponent = inputs[1]
        if isinstance(exponent, Const) and isinstance(exponent.value, int) and exponent.value < 0:
            raise RuleError(
                f"an integer array to the negative power {exponent.value} (NumPy refuses "
                "it too): cast the array to a float dtype first"
            )
    if decl.name in ("abs", "pow") and dtype == D.bool_:
        raise RuleError("takes numbers, not bool arrays: cast to an integer dtype first")
    if decl.name in ("neg", "sub") and dtype == D.bool_:
        raise RuleError(
            "'-' of bool arrays is refused (as NumPy refuses it): use op.where, or cast "
            "to an integer dtype first"
        )
    if decl.name in ("real", "imag", "conj") and dtype.kind != "c":
        raise RuleError(f"takes a complex tensor, not {dtype.name}")
    if decl.name in ("real", "imag"):
        attrs["dtype"] = D.COMPLEX_PARTS[dtype]
    if decl.name == "complex":
        if dtype not in (D.f32, D.f64):
            raise RuleError(f"makes complex64 of f32 parts or complex128 of f64, not {dtype.name}")
        attrs["dtype"] = D.complex64 if dtype == D.f32 else D.complex128
    if decl.result == "bool":
        return shape, D.bool_
    if decl.result == "attr":
        return shape, attrs["dtype"]
    return shape, dtype


def matmul_type(a, b) -> tuple[tuple[int, ...], D.DType]:
    """``a @ b`` as NumPy's matmul: the last two dims are the matrices, the leading
    (batch) dims broadcast."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise RuleError(f"multiplies arrays of 2 or more dims, not shapes {a.shape} and {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise RuleError(
            f"shapes {a.shape} and {b.shape}: the inner dims {a.shape[-1]} and {b.shape[-2]} differ"
        )
    if a.dtype != b.dtype:
        raise RuleError(f"mixes dtypes {a.dtype.name} and {b.dtype.name}")
    if a.dtype not in (D.f16, D.bf16, D.f32, D.f64, *D.FP8):
        raise RuleError(f"takes f16, bf16, f8e4m3, f8e5m2, f32 or f64 arrays, not {a.dtype.name}")
    batch = broadcast(a.shape[:-2], b.shape[:-2])
    return (*batch, a.shape[-2], b.shape[-1]), a.dtype


def attention_grad_type(op: str, q, k, v=None, *rest) -> tuple[tuple[int, ...], D.DType]:
    """The backward kernels' results: the row statistics, or the gradient of one input."""
    if op == "attention_lse":
        return (q.shape[0],), D.f32
    grad_of = {"attention_dq": q, "attention_dk": k, "attention_dv": v}[op]
    return grad_of.shape, grad_of.dtype


def cross_entropy_type(logits, targets, *upstream) -> tuple[tuple[int, ...], D.DType]:
    """Logits ``(N, C)`` of a float dtype, targets ``(N,)`` of an integer dtype; the row
    losses are ``(N,)`` of the logits' dtype (the gradient, the logits' shape)."""
    if len(logits.shape) != 2:
        raise RuleError(f"takes logits of shape (N, C), not {logits.shape}")
    if logits.dtype not in (D.f16, D.bf16, D.f32, D.f64):
        raise RuleError(f"takes f16, bf16, f32 or f64 logits, not {logits.dtype.name}")
    rows, classes = logits.shape
    if classes == 0:
        raise RuleError(f"logits {logits.shape} have no class: no target can be in range")
    if targets.shape != (rows,) or targets.dtype.kind not in "iu":
        raise RuleError(
            f"takes targets of shape ({rows},) and an integer dtype (class indices), not "
            f"{targets.dtype.name}{list(targets.shape)}"
        )
    if upstream:  # the gradient: one upstream value per row
        if upstream[0].shape != (rows,) or upstream[0].dtype != logits.dtype:
            raise RuleError("the gradient takes one upstream value per row")
        return logits.shape, logits.dtype
    return (rows,), logits.dtype


def norm_type(x, *params) -> tuple[tuple[int, ...], D.DType]:
    """A normalisation's weights (and bias) are vectors along ``x``'s last axis."""
    if not x.shape:
        raise RuleError("normalises along the last axis of an array, not a number")
    for p in params:
        if p.shape != x.shape[-1:] or p.dtype != x.dtype:
            raise RuleError(
                f"takes weights of shape {x.shape[-1:]} and dtype {x.dtype.name}, not "
                f"{p.dtype.name}{list(p.shape)}"
            )
    return x.shape, x.dtype


def attention_type(q, k, v) -> tuple[tuple[int, ...], D.DType]:
    if len(q.shape) != 2 or len(k.shape) != 2 or len(v.shape) != 2:
        raise RuleError(f"takes 2-d q, k, v, not shapes {q.shape}, {k.shape}, {v.shape}")
    if q.shape[1] != k.shape[1] or k.shape[0] != v.shape[0]:
        raise RuleError(f"q {q.shape}, k {k.shape} and v {v.shape} do not fit q @ k.T @ v")
    if not q.dtype == k.dtype == v.dtype or q.dtype not in (D.f16, D.bf16, D.f32):
        raise RuleError("takes q, k, v of one dtype: f16, bf16 or f32")
    if q.shape[1] > 128 or v.shape[1] > 128:
        raise RuleError("head dims up to 128")
    if q.shape[1] == 0:
        raise RuleError(f"q {q.shape} and k {k.shape} have head dim 0: nothing to score")
    if k.shape[0] == 0:
        raise RuleError(f"attends over 0 keys (k {k.shape}): a softmax over no score has no value")
    return (q.shape[0], v.shape[1]), q.dtype


def normalise_axis(axis, rank: int) -> int | None:
    """``axis`` in ``0..rank-1``; a 0-d array's axis 0 (or -1) is all of it (None), as
    NumPy's reductions take it."""
    if axis is None:
        return None
    top = max(rank, 1)
    if not isinstance(axis, int) or isinstance(axis, bool) or not -top <= axis < top:
        raise RuleError(f"axis={axis!r} is not an axis of a {rank}-d array")
    return axis % rank if rank else None


def check_nonempty(op: str, shape: tuple[int, ...], axis: int | None) -> None:
    """``max``/``min`` over no element have no value (no identity): NumPy raises too."""
    if axis is None and 0 in shape:
        raise RuleError(f"of an empty array {shape}: a {op} of no element has no identity")
    if axis is not None and shape[axis] == 0:
        raise RuleError(
            f"along axis {axis}, of length 0 in {shape}: a {op} of no element has no identity"
        )


def reduce_dtype(op: str, dtype: D.DType) -> D.DType:
    """A reduction's result dtype: as NumPy, integer and bool sums accumulate in the
    platform integer (i64; u64 for unsigned), never wrapping in a narrow dtype."""
    if op == "sum" and dtype.kind in "ib":
        return D.i64
    if op == "sum" and dtype.kind == "u":
        return D.u64
    return dtype


def reduce_type(x, axis: int | None, keepdims: bool) -> tuple[int, ...]:
    if axis is None:
        return (1,) * len(x.shape) if keepdims else ()
    if keepdims:
        return x.shape[:axis] + (1,) + x.shape[axis + 1 :]
    return x.shape[:axis] + x.shape[axis + 1 :]


def reshape_type(x, shape: tuple[int, ...]) -> tuple[int, ...]:
    size = 1
    for n in x.shape:
        size *= n
    known = 1
    for n in shape:
        if n != -1:
            known *= n
    if list(shape).count(-1) > 1 or any(n < -1 for n in shape):
        raise RuleError(f"cannot reshape to {shape}")
    if -1 in shape:
        if known == 0 or size % known:
            raise RuleError(f"cannot reshape {x.shape} to {shape}")
        shape = tuple(size // known if n == -1 else n for n in shape)
    total = 1
    for n in shape:
        total *= n
    if total != size:
        raise RuleError(f"cannot reshape {x.shape} ({size} elements) to {shape}")
    return tuple(shape)
