"""A graph module's kernels (and an op's, such as a split attention's two) compiled side
by side in compile workers before its first run (tessera/ops/compile_ahead.py): the same
results and errors as compiling them one by one at their launches, every failure of a
worker a fallback to compiling in this process."""

from __future__ import annotations

import numpy as np
import pytest

import tessera as ts
from tessera import graph, op
from tessera.kernel import compile_pool
from tessera.kernel.targets.cpu import program
from tessera.ops import generated


@graph.module("two_kernels")
def two(x, w):
    return op.sum(op.exp(x), axis=-1), op.matmul(x, w)


X = np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32)
W = np.linspace(0, 2, 32 * 16, dtype=np.float32).reshape(32, 16)


@pytest.fixture(autouse=True)
def fresh_kernels(monkeypatch):
    """Generated kernels are made once per text for the process: each test gets its own
    (nothing compiled in memory), and modules lower afresh."""
    monkeypatch.setattr(generated, "_kernels", {})
    monkeypatch.setattr(two, "_lowered", {})


def run(workers: int):
    """(results, counters' change) of one call of the module with ``workers`` compilers."""
    generated._kernels.clear()
    two._lowered.clear()
    before = ts.stats()
    with ts.config(compile_workers=workers):
        results = two(X, W)
    after = ts.stats()
    return results, {name: after[name] - before[name] for name in after}


def test_a_modules_kernels_compile_in_workers_bit_for_bit(cache_dir, monkeypatch):
    monkeypatch.setattr(compile_pool, "HERE", False)  # the workers compile every kernel
    assert len(two.kernels(X, W)) == 2
    results, counted = run(workers=2)
    assert counted["worker_compiles"] == 2 and counted["compiles"] == 0
    assert counted["disk_cache_hits"] == 2  # loaded as a warm start loads them
    with ts.config(cache="off"):
        serial, counted = run(workers=1)
    assert counted["compiles"] == 2 and counted["worker_compiles"] == 0
    for mine, theirs in zip(results, serial):
        assert mine.tobytes() == theirs.tobytes()


def test_this_process_compiles_beside_its_worker(cache_dir):
    results, counted = run(workers=2)
    assert counted["worker_compiles"] + counted["compiles"] == 2
    np.testing.assert_allclose(results[0], np.exp(X).sum(-1), rtol=1e-5)
    np.testing.assert_allclose(results[1], X @ W, rtol=1e-5)


def test_one_compiler_starts_no_worker(cache_dir, monkeypatch):
    monkeypatch.setattr(compile_pool, "_Worker", None)  # never started
    _, counted = run(workers=1)
    assert counted["compiles"] == 2


def test_a_warm_module_starts_no_worker(cache_dir, monkeypatch):
    run(workers=1)  # the entries are written
    monkeypatch.setattr(compile_pool, "_Worker", None)  # nothing left to compile ahead
    _, counted = run(workers=2)
    assert counted["compiles"] == 0 and counted["disk_cache_hits"] == 2


def test_a_crashed_worker_is_a_warning_and_this_process_compiles(cache_dir, monkeypatch):
    crash = (  # ready, then killed by a signal in the middle of its first job
        "import os, signal, sys; sys.stdout.write('{\"ready\": 1}\\n'); sys.stdout.flush(); "
        "os.read(0, 1); os.kill(os.getpid(), signal.SIGKILL)"
    )
    monkeypatch.setattr(compile_pool, "HERE", False)
    monkeypatch.setattr(compile_pool, "WORKER", crash)
    with pytest.warns(ts.CompileWorkerWarning, match="stopped"):
        results, counted = run(workers=2)
    assert counted["worker_compiles"] == 0 and counted["compiles"] == 2
    np.testing.assert_allclose(results[1], X @ W, rtol=1e-5)


class _Untyped(program.CpuCodegen):
    """Every kernel calls a helper that does not exist: Numba cannot type it, in a worker
    or here (a bug in Tessera's code generation, as the user would meet it)."""

    def generate(self) -> str:
        source = super().generate()
        head, sep, rest = source.partition('for the CPU: a chunk."""\n')
        return head + sep + "    _no_such_helper()\n" + rest


@pytest.mark.parametrize("here", [True, False])
def test_a_kernel_that_fails_to_compile_fails_as_without_workers(cache_dir, monkeypatch, here):
    monkeypatch.setattr(program, "CpuCodegen", _Untyped)
    monkeypatch.setattr(compile_pool, "HERE", here)
    with pytest.raises(ts.InternalError) as serial:
        run(workers=1)
    with pytest.raises(ts.InternalError) as parallel:
        run(workers=2)
    assert "_no_such_helper" in str(parallel.value)
    assert str(parallel.value) == str(serial.value)
