"""Fuzzing the operator layer: every public op of ``tessera.op`` on seeded random inputs
(shapes that broadcast or not, 0-d, empty, dtypes from bool to complex and object,
NaN and infinities, non-contiguous and negative-stride views, Python numbers, lists,
odd keyword values) is compared with NumPy. Each call either gives NumPy's result (the
same dtype; values within the dtype's tolerance, NaN where NumPy has NaN) or raises a
TesseraError; where NumPy raises, so must Tessera. No call modifies its inputs.

The cases are drawn by ``random.Random(SEED)`` from small pools of shapes and dtypes, so
a run compiles a few dozen kernels (a few seconds) and is the same every time; a failure
names its case. A watchdog turns a hang into a failure with a traceback.
"""

from __future__ import annotations

import faulthandler
import math
import random
import warnings
from dataclasses import dataclass, field

import numpy as np
import pytest

from tessera import op
from tessera.errors import TesseraError

SEED = 26
CASES = 150
HANG_SECONDS = 300  # the whole run; a case compiles in well under a second

SHAPES = [(), (0,), (4,), (3, 4), (1, 4), (2, 0), (2, 3, 4)]
DTYPES = ["f32", "f32", "f32", "f64", "f16", "i8", "i32", "u8", "bool", "complex64", "object"]
NUMPY = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "i8": np.int8}
NUMPY.update({"i32": np.int32, "u8": np.uint8, "bool": np.bool_})
NUMPY.update({"complex64": np.complex64, "object": object})
NUMBERS = [0.5, -2.0, 3, -1, 1000, 10**20, True, math.nan, math.inf, -math.inf]


def erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def softmax(x, axis=-1):
    if x.ndim and x.shape[axis] == 0:
        return x  # no element: nothing to normalise (as torch's and SciPy's)
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def typed(f):
    """A NumPy reference computed in f64 (or f32 for f16) and cast back."""

    def ref(x, *rest):
        if x.dtype.kind != "f":
            raise TypeError("floats only")
        wide = np.float64 if x.dtype == np.float64 else np.float32
        return np.asarray(f(x.astype(wide), *rest)).astype(x.dtype)

    return ref


UNARY = {
    "neg": np.negative,
    "exp": typed(np.exp),
    "log": typed(np.log),
    "sqrt": typed(np.sqrt),
    "tanh": typed(np.tanh),
    "relu": typed(lambda x: np.maximum(x, 0)),
    "gelu": typed(lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))),
    "silu": typed(lambda x: x / (1 + np.exp(-x))),
    "sigmoid": typed(lambda x: 1 / (1 + np.exp(-x))),
}
BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "maximum": np.maximum,
    "minimum": np.minimum,
}
REDUCE = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}


@dataclass
class Case:
    name: str
    call: object  # () -> result, on the op
    reference: object  # () -> NumPy's result (or raises)
    inputs: list = field(default_factory=list)  # the arrays that must stay untouched


def array(rng: random.Random, shape, dtype: str, layout: str):
    """An array of ``shape`` and ``dtype`` in ``layout``: contiguous, a strided view, a
    negative-stride view, or a list."""
    size = math.prod(shape)
    values = np.array([rng.choice([-3.5, -1.0, 0.0, 0.5, 2.0, 7.25]) for _ in range(size)])
    if dtype in ("f32", "f64", "f16") and size and rng.random() < 0.3:
        values[rng.randrange(size)] = rng.choice([math.nan, math.inf, -math.inf])
    kind = NUMPY[dtype]
    if kind is object:
        base = values.astype(object)
    elif np.dtype(kind).kind in "iub":
        base = values.astype(np.int64).astype(kind) if kind is not np.bool_ else values > 0
    else:
        base = values.astype(kind)
    base = base.reshape(shape)
    if layout == "list" and shape:
        return base.tolist()
    if layout == "strided" and shape:
        wide = np.repeat(base, 2, axis=-1)
        return wide[..., ::2]
    if layout == "reversed" and shape:
        return base.copy()[..., ::-1]
    return base


def draw(rng: random.Random, index: int) -> Case:
    layout = rng.choice(["contiguous", "contiguous", "strided", "reversed", "list"])
    dtype, shape = rng.choice(DTYPES), rng.choice(SHAPES)
    x = array(rng, shape, dtype, layout)
    xa = np.asarray(x) if not isinstance(x, np.ndarray) else x
    kind = rng.choice(["unary", "binary", "binary", "number", "reduce", "shape", "other"])
    tag = f"#{index} {dtype}{list(shape)} {layout}"
    if kind == "unary":
        name = rng.choice(sorted(UNARY))
        return Case(f"{tag} op.{name}", lambda: getattr(op, name)(x), lambda: UNARY[name](xa), [x])
    if kind in ("binary", "number"):
        name = rng.choice(sorted(BINARY))
        if kind == "number":
            y = ya = rng.choice(NUMBERS)
        else:
            other = dtype if rng.random() < 0.8 else rng.choice(DTYPES)
            y = array(
                rng, rng.choice(SHAPES + [shape] * 4), other, rng.choice(["contiguous", "strided"])
            )
            ya = y
        label = f"{tag} op.{name}(…, {y if kind == 'number' else np.asarray(y).dtype})"
        if rng.random() < 0.3:
            x, xa, y, ya = y, ya, x, xa
            label += " swapped"
        return Case(
            label,
            lambda: getattr(op, name)(x, y),
            lambda: BINARY[name](xa, ya),
            [x, y],
        )
    if kind == "reduce":
        name = rng.choice(sorted(REDUCE))
        axis = rng.choice([None, None, 0, -1, 1, 2, 1.5, [0]])
        keepdims = rng.choice([False, True])
        return Case(
            f"{tag} op.{name}(axis={axis!r}, keepdims={keepdims})",
            lambda: getattr(op, name)(x, axis=axis, keepdims=keepdims),
            lambda: REDUCE[name](xa, axis=axis, keepdims=keepdims),
            [x],
        )
    if kind == "shape":
        name = rng.choice(["transpose", "reshape", "softmax", "cast"])
        if name == "transpose":
            return Case(
                f"{tag} op.transpose", lambda: op.transpose(x), lambda: np.swapaxes(xa, -1, -2), [x]
            )
        if name == "reshape":
            to = rng.choice([(-1,), (4, -1), (-1, 2), (0,), (2, 2), 12, (-1, -1)])
            return Case(
                f"{tag} op.reshape({to})", lambda: op.reshape(x, to), lambda: xa.reshape(to), [x]
            )
        if name == "cast":
            to = rng.choice(["f32", "f64", "i32", "bool"])
            return Case(
                f"{tag} op.cast({to})", lambda: op.cast(x, to), lambda: ref_cast(xa, to), [x]
            )
        return Case(f"{tag} op.softmax", lambda: op.softmax(x), lambda: typed(softmax)(xa), [x])
    return other_case(rng, tag, x, xa, dtype, shape)


def other_case(rng, tag, x, xa, dtype, shape) -> Case:
    name = rng.choice(["where", "matmul", "layernorm", "rmsnorm", "attention", "dropout"])
    if name == "where":
        c = array(rng, rng.choice([shape, ()]), "bool", "contiguous")
        b = rng.choice([0.5, 2, array(rng, shape, dtype, "contiguous")])
        return Case(
            f"{tag} op.where", lambda: op.where(c, x, b), lambda: np.where(c, xa, b), [c, x, b]
        )
    if name == "matmul":
        other = array(rng, rng.choice([shape[::-1], (4, 3), (4,), (0, 2)]), dtype, "contiguous")
        return Case(
            f"{tag} op.matmul",
            lambda: op.matmul(x, other),
            lambda: ref_matmul(xa, other),
            [x, other],
        )
    if name in ("layernorm", "rmsnorm"):
        w = array(rng, shape[-1:], dtype, "contiguous")
        args = (x, w, w) if name == "layernorm" else (x, w)
        eps = rng.choice([1e-5, 0.1, None, "x"])
        return Case(
            f"{tag} op.{name}(eps={eps!r})",
            lambda: getattr(op, name)(*args, eps=eps),
            lambda: ref_norm(name, xa, w, eps),
            list(args),
        )
    if name == "attention":
        k = array(rng, rng.choice([shape, (0, 4), (5, 4)]), dtype, "contiguous")
        return Case(
            f"{tag} op.flash_attention",
            lambda: op.flash_attention(x, k, k),
            lambda: ref_attention(xa, k),
            [x, k],
        )
    p = rng.choice([0.0, 0.5, 2, -0.1, "0.5"])
    return Case(
        f"{tag} op.dropout(p={p!r})", lambda: op.dropout(x, p, 7), lambda: ref_dropout(xa, p), [x]
    )


def ref_cast(x, to: str):
    """NumPy's ``astype``, but a float out of an integer type's range saturates and NaN
    gives 0: the language's rule (docs/language.md), where NumPy's result is undefined."""
    kind = np.dtype(NUMPY[to])
    if x.dtype.kind == "f" and kind.kind in "iu":
        info = np.iinfo(kind)
        wide = np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=info.max, neginf=info.min)
        return np.clip(wide, info.min, info.max).astype(kind)
    return x.astype(kind)


def ref_matmul(a, b):
    if a.dtype != b.dtype or a.dtype.kind != "f" or a.ndim < 2 or b.ndim < 2:
        raise TypeError("f16, bf16, f32, f64 matrices")
    wide = np.float64 if a.dtype == np.float64 else np.float32
    return np.matmul(a.astype(wide), b.astype(wide)).astype(a.dtype)


def ref_norm(name, x, w, eps):
    if not isinstance(eps, float) or x.dtype.kind != "f" or w.dtype != x.dtype:
        raise TypeError("a float eps, float arrays")
    dtype, wide = x.dtype, np.float64 if x.dtype == np.float64 else np.float32
    x, w = x.astype(wide), w.astype(wide)
    if name == "layernorm":
        d = x - x.mean(axis=-1, keepdims=True)
        return (d / np.sqrt((d * d).mean(axis=-1, keepdims=True) + eps) * w + w).astype(dtype)
    return (x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * w).astype(dtype)


def ref_attention(q, k):
    if q.dtype != k.dtype or q.dtype not in (np.float16, np.float32) or q.ndim != 2 or k.ndim != 2:
        raise TypeError("2-d f16/f32")
    if q.shape[1] != k.shape[1] or k.shape[0] == 0 or q.shape[1] == 0:
        raise ValueError("no key")
    s = q.astype(np.float32) @ k.astype(np.float32).T / math.sqrt(q.shape[1])
    return (softmax(s) @ k.astype(np.float32)).astype(q.dtype)


def ref_dropout(x, p):
    if not isinstance(p, float) or not 0 <= p < 1 or x.dtype.kind != "f":
        raise ValueError("p in [0, 1), floats")
    return None  # the mask is Philox's: checked as "each element 0 or x / (1 - p)"


def tolerance(dtype) -> float:
    return {np.float16: 2e-2, np.float32: 2e-5}.get(np.dtype(dtype).type, 1e-9)


def judge(case: Case) -> tuple[str, str]:
    """(outcome, detail): ok, clear (a TesseraError where NumPy raises too or a
    documented difference), raw, wrong, silent (no error where NumPy raises), modified."""
    before = [
        np.array(a, dtype=object if np.asarray(a).dtype == object else None, copy=True)
        for a in case.inputs
    ]
    try:
        got = case.call()
        error = None
    except TesseraError as e:
        got, error = None, e
    except Exception as e:  # noqa: BLE001 - what the fuzz looks for
        return "raw", f"{type(e).__name__}: {e}"
    for a, b in zip(case.inputs, before):
        if not np.array_equal(np.asarray(a), b, equal_nan=np.asarray(a).dtype.kind in "fc"):
            return "modified", f"an input changed: {b!r} -> {np.asarray(a)!r}"
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            want, numpy_error = case.reference(), None
        except Exception as e:  # noqa: BLE001 - NumPy refuses the case
            want, numpy_error = None, e
    if error is not None:
        return "clear", str(error).splitlines()[0]
    if numpy_error is not None:
        return "silent", f"NumPy raises {type(numpy_error).__name__}: {numpy_error}; got {got!r}"
    if want is None:  # dropout: each element dropped or scaled
        x, p = np.asarray(case.inputs[0]), float(case.name.split("p=")[1].rstrip(")"))
        kept = np.isclose(got, x / (1 - p), rtol=tolerance(x.dtype), equal_nan=True)
        return ("ok", "") if np.all(kept | (got == 0)) else ("wrong", f"{got!r}")
    want = np.asarray(want)
    if np.asarray(got).dtype != want.dtype or np.shape(got) != want.shape:
        return (
            "wrong",
            f"{np.asarray(got).dtype}{np.shape(got)} where NumPy gives {want.dtype}{want.shape}",
        )
    if want.dtype.kind == "f":
        rtol = tolerance(want.dtype)
        if np.allclose(got, want, rtol=rtol * 50, atol=rtol * 50, equal_nan=True):
            return "ok", ""
    elif np.array_equal(got, want):
        return "ok", ""
    return "wrong", f"got {got!r}, NumPy {want!r}"


@pytest.fixture(scope="module")
def outcomes():
    rng = random.Random(SEED)
    faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)
    try:
        results = []
        for i in range(CASES):
            case = draw(rng, i)
            results.append((case.name, *judge(case)))
    finally:
        faulthandler.cancel_dump_traceback_later()
    return results


def report(outcomes, kind: str) -> str:
    bad = [f"{name}: {detail}" for name, outcome, detail in outcomes if outcome == kind]
    return f"{len(bad)} {kind} of {len(outcomes)} cases:\n" + "\n".join(bad[:20])


def test_fuzz_tries_both_results_and_errors(outcomes):
    counts = {k: sum(o == k for _, o, _ in outcomes) for k in ("ok", "clear")}
    assert counts["ok"] > CASES // 4 and counts["clear"] > CASES // 10, counts


def test_fuzz_every_failure_is_a_tessera_error(outcomes):
    assert not any(o == "raw" for _, o, _ in outcomes), report(outcomes, "raw")


def test_fuzz_results_match_numpy(outcomes):
    assert not any(o == "wrong" for _, o, _ in outcomes), report(outcomes, "wrong")


def test_fuzz_no_result_where_numpy_raises(outcomes):
    assert not any(o == "silent" for _, o, _ in outcomes), report(outcomes, "silent")


def test_fuzz_inputs_are_never_modified(outcomes):
    assert not any(o == "modified" for _, o, _ in outcomes), report(outcomes, "modified")
