"""The α–β cost model of the links between ranks, and the choice of a collective's
algorithm by it (MESH.md, "Topology" and "Collective algorithms").

A message of n bytes over a link costs α + nβ: α its latency, β its seconds per byte. Each
link class has documented defaults (:data:`DEFAULTS`); ``dist.topology(mesh,
measure=True)`` fits both by ping-pong (8 B and 4 MB messages) for every class it finds and
the choice uses those from then on, in that process. For payload n over p ranks:

* ring: 2(p−1)α' + 2((p−1)/p)nβ + ((p−1)/p)nγ;
* rd (recursive doubling): ⌈log₂p⌉(α' + nβ + nγ);
* tree (pipelined binary tree, k chunks): 2(⌈log₂p⌉ + k − 1)(α' + nβ/k) + ⌈log₂p⌉nγ,
  best k;
* library (MPI's own collective, which runs the same kinds of algorithm in C: MPICH's
  recursive doubling for short messages and Rabenseifner's reduce-scatter + all-gather for
  long ones): min(⌈log₂p⌉(α + nβ), 2⌈log₂p⌉α + 2((p−1)/p)nβ);

where γ is the seconds per byte of reducing what arrives (:data:`GAMMA`; the spec's α–β
terms plus Thakur's γ, without which the model cannot tell a ring from recursive doubling
on two ranks) and α' = α + :data:`STEP_OVERHEAD`, what one step of Tessera's own algorithms costs in
Python (posting, polling and reducing a step's messages). ``measure=True`` also fits that
overhead (a ring all_reduce of 8 bytes) and the library all_reduce's own line (8 B and 4 MB
over the mesh's first axis), which then replaces the library's formula (scaled to other
axis sizes by the formula's shape): MPI's collective is not always the fastest (MPICH's
shared-memory all-reduce of 4 MB on 2 ranks measured 2x slower than the ring here).
``auto`` takes the least. A collective's axis is costed at its slowest link: ``shm`` when its
members share a node, ``net`` otherwise.
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..errors import TesseraError

# (α seconds, β seconds per byte) per link class, before any measurement: host memory on
# one node, a network (100 Gb/s class), NVLink and PCIe between GPUs of a node
DEFAULTS = {
    "self": (0.0, 0.0),
    "shm": (1.0e-6, 1 / 10e9),
    "nvlink": (3.0e-6, 1 / 150e9),
    "pcie": (6.0e-6, 1 / 20e9),
    "net": (10.0e-6, 1 / 10e9),
}
STEP_OVERHEAD = 25e-6  # seconds per step of a Tessera algorithm (see the docstring)
GAMMA = 2.5e-10  # seconds per byte a Tessera algorithm reduces (NumPy's add, ~4 GB/s)
_measured: dict[str, tuple[float, float]] = {}  # link class -> (α, β) fitted in this process
# fitted by measure=True: a step's overhead, and the library all_reduce's own line
# (ranks, α, β), which stands in for its formula (scaled to other axis sizes)
_calibration: dict[str, object] = {}
_fitted: dict[str, tuple[int, list]] = {}  # all_reduce algorithm -> (ranks, [(bytes, s)])

# the algorithms each collective takes (MESH.md); "auto" chooses by the model
VALID = {
    "all_reduce": ("auto", "ring", "tree", "rd", "library"),
    "reduce_scatter": ("auto", "ring", "rd", "library"),
    "all_gather": ("auto", "ring", "rd", "library"),
    "broadcast": ("auto", "tree", "library"),
}
REORDERING = ("ring", "tree", "rd")  # reduce in an order other than the ranks'


def link_class(link: str) -> str:
    """``"nvlink(18)"`` → ``"nvlink"``: the class of a :meth:`Topology.link`."""
    return link.split("(", 1)[0]


def parameters(klass: str) -> tuple[float, float]:
    """(α, β) of a link class: measured in this process, else the default."""
    return _measured.get(klass) or DEFAULTS[klass]


def set_measured(
    values: dict[str, tuple[float, float]],
    step: float | None = None,
    reduce_rate: float | None = None,
) -> None:
    """Use fitted link parameters (and a step's overhead and γ, seconds per byte reduced)
    from now on in this process."""
    _measured.update(values)
    _choices.clear()
    if reduce_rate is not None:
        _calibration["gamma"] = reduce_rate
    if step is not None:
        _calibration["step"] = step


def fitted_cost(name: str, p: int, n: float) -> float:
    """An all_reduce algorithm's measured seconds for ``n`` bytes (piecewise linear
    between the sizes timed), scaled from the ranks it was timed on to ``p`` by its
    formula's shape: the latency part (the smallest size's time) by its step count, the
    rest by the bytes each rank moves."""
    ranks, points = _fitted[name]
    (n0, t0), *rest = points
    t = t0
    for (na, ta), (nb, tb) in zip(points, rest):
        slope = (tb - ta) / (nb - na)
        t = ta + (n - na) * slope
        if n <= nb:
            break
    if p == ranks:
        return max(t, t0)
    (steps_p, bytes_p), (steps_r, bytes_r) = _shape(name, p), _shape(name, ranks)
    return t0 * steps_p / steps_r + max(t - t0, 0.0) * bytes_p / bytes_r


def _shape(name: str, p: int) -> tuple[float, float]:
    """(steps, bytes moved per byte of payload) of an all_reduce algorithm over p ranks."""
    levels = max(math.ceil(math.log2(p)), 1)
    share = (p - 1) / p
    return {
        "ring": (2 * (p - 1), 2 * share),
        "rd": (levels, levels),
        "tree": (2 * levels, 2.0),
        "library": (2 * levels, 2 * share),
    }[name]


def set_fitted(name: str, ranks: int, points: list[tuple[int, float]]) -> None:
    """Timings (bytes, seconds) of all_reduce algorithm ``name`` over ``ranks`` ranks."""
    _fitted[name] = (ranks, sorted(points))
    _choices.clear()


def snapshot() -> dict:
    """What measure=True fitted in this process, as JSON-ready data (link_store.py)."""
    return {
        "measured": [[k, a, b] for k, (a, b) in sorted(_measured.items())],
        "step": _calibration.get("step"),
        "gamma": _calibration.get("gamma"),
        "fitted": {k: [ranks, [list(p) for p in points]] for k, (ranks, points) in _fitted.items()},
    }


def restore(data: dict) -> None:
    """Use a stored :func:`snapshot` from now on in this process."""
    set_measured({k: (a, b) for k, a, b in data["measured"]}, data.get("step"), data.get("gamma"))
    for name, (ranks, points) in data["fitted"].items():
        set_fitted(name, ranks, [tuple(p) for p in points])


def step_overhead() -> float:
    return _calibration.get("step", STEP_OVERHEAD)


def gamma() -> float:
    return _calibration.get("gamma", GAMMA)


def best_k(p: int, n: float, alpha: float, beta: float) -> int:
    """The chunk count that minimises the pipelined tree's cost (at least 1)."""
    levels = max(math.ceil(math.log2(p)), 1)
    if alpha <= 0 or n * beta <= 0:
        return 1
    return max(1, round(math.sqrt((levels - 1) * n * beta / alpha)))


def costs(kind: str, p: int, n: float, alpha: float, beta: float) -> dict[str, float]:
    """Modelled seconds of each algorithm of ``kind`` for ``n`` bytes over ``p`` ranks."""
    levels = max(math.ceil(math.log2(p)), 1) if p > 1 else 0
    a = alpha + step_overhead()  # a step of Tessera's own algorithms
    k = best_k(p, n, a, beta)
    share = (p - 1) / p if p else 0.0
    g = gamma()
    if kind == "all_reduce":
        modelled = {
            "ring": 2 * (p - 1) * a + 2 * share * n * beta + share * n * g,
            "rd": levels * (a + n * beta + n * g),
            "tree": 2 * (levels + k - 1) * (a + n * beta / k) + levels * n * g,
            "library": min(levels * (alpha + n * beta), 2 * levels * alpha + 2 * share * n * beta),
        }
        for name in modelled:  # measured (measure=True): the fitted timings instead
            if name in _fitted:
                modelled[name] = fitted_cost(name, p, n)
        return modelled
    if kind == "reduce_scatter":  # the all_reduce's first phase
        return {
            "ring": (p - 1) * a + share * n * (beta + g),
            "library": levels * alpha + share * n * beta,
        }
    if kind == "all_gather":  # its second
        return {
            "ring": (p - 1) * a + share * n * beta,
            "library": levels * alpha + share * n * beta,
        }
    # broadcast: the tree's downward half; the library's binomial tree, or scatter + all-gather
    return {
        "tree": (levels + k - 1) * (a + n * beta / k),
        "library": min(
            levels * (alpha + n * beta), (levels + p - 1) * alpha + 2 * share * n * beta
        ),
    }


def axis_link(processes: list) -> str:
    """The slowest link class among an axis's members (their liveness identities)."""
    if len(processes) < 2:
        return "self"
    return "shm" if len({p[0] for p in processes}) == 1 else "net"


_choices: dict[tuple, tuple[str, int]] = {}  # the answers so far (cleared by new timings)


def choose(
    kind: str,
    algorithm: str | None,
    p: int,
    nbytes: int,
    link: str,
    deterministic: bool,
    host: bool,
    nccl: bool,
    default: str,
) -> tuple[str, int]:
    """(the algorithm a collective runs, the tree's chunk count): ``algorithm`` (None: the
    ``TESSERA_DIST_ALGO`` setting, ``default``) checked against what ``kind`` has, or the
    model's least cost for ``auto``, over an axis whose slowest link is of class ``link``
    (:func:`axis_link`). Remembered: the launch path pays a dictionary lookup."""
    key = (kind, algorithm, p, nbytes, link, deterministic, host, nccl, default)
    found = _choices.get(key)
    if found is None:
        found = _choices[key] = _choose(*key)
    return found


def _choose(kind, algorithm, p, nbytes, link, deterministic, host, nccl, default):
    name = algorithm
    if algorithm is None:  # the setting, where this collective has it
        name = default if default in VALID[kind] else "auto"
    if name not in VALID[kind]:
        raise TesseraError(
            f"{kind} has no algorithm {name!r}; choose one of {', '.join(VALID[kind])}"
        )
    if deterministic and name in REORDERING and kind in ("all_reduce", "reduce_scatter"):
        raise TesseraError(
            f"deterministic reduces in rank order; {name} would change the order (use "
            "algorithm='auto' or 'library', or deterministic=False)"
        )
    alpha, beta = parameters(link)
    k = best_k(p, nbytes, alpha + step_overhead(), beta)
    if nccl:  # NCCL's own tuner (a forced ring or tree is NCCL_ALGO: nccl_algo below)
        if name == "rd":
            raise TesseraError("the nccl backend has no recursive doubling; use ring or tree")
        return ("library" if name == "auto" else name), k
    if name == "auto":
        # an all_gather's blocks may differ in length from rank to rank: a choice made
        # from the local size could differ between members, so it takes the library's
        if p < 2 or deterministic or not host or kind == "all_gather":
            return "library", k
        modelled = costs(kind, p, nbytes, alpha, beta)
        return min(modelled, key=modelled.get), k
    if name != "library" and not host:
        raise TesseraError(
            f"algorithm={name!r} runs Tessera's own {name} on host arrays; a GPU array over "
            "MPI takes the library's (algorithm='library')"
        )
    return name, k


def ping_pong(comm, a: int, b: int, nbytes: int, reps: int) -> float | None:
    """Half the mean round trip of ``nbytes`` between ranks ``a`` and ``b`` of ``comm``
    (every rank calls it; None on the others)."""
    rank = comm.Get_rank()
    if rank not in (a, b):
        return None
    buf = np.zeros(max(nbytes, 1), np.uint8)
    peer = b if rank == a else a
    for warm in (True, False):
        start = time.perf_counter()
        for _ in range(2 if warm else reps):
            if rank == a:
                comm.Send(buf, dest=peer, tag=7)
                comm.Recv(buf, source=peer, tag=7)
            else:
                comm.Recv(buf, source=peer, tag=7)
                comm.Send(buf, dest=peer, tag=7)
        elapsed = time.perf_counter() - start
    return elapsed / reps / 2


def fit(small: float, large: float, large_bytes: int = 4 << 20, small_bytes: int = 8):
    """(α, β) of the line through two timed message sizes."""
    beta = max((large - small) / (large_bytes - small_bytes), 0.0)
    return max(small - small_bytes * beta, 0.0), beta
