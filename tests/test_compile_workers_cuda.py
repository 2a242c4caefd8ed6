"""CUDA cubins compiled side by side in compile workers (tessera/kernel/targets/cuda/
compile_job.py): no GPU is needed to make a cubin, so a batch runs here for an
architecture named in words, and this process then reads each cubin from the cubin cache
through the checks of a warm start, compiling nothing."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

import numpy as np
import pytest
from classic_kernels import matmul
from test_ops_attention_split import _inputs, attention

import tessera as ts
from tessera.kernel import compile_pool
from tessera.kernel.targets.cuda import CUDA, compile_job
from tessera.ops import generated, plan
from tessera.ops.compile_ahead import compile_ahead
from tessera.ops.passes import lower

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" or importlib.util.find_spec("numba.cuda") is None,
    reason="cubins need numba-cuda without its simulator",
)
ARCH = "sm_90"  # the architecture code is made for where there is no GPU


@pytest.fixture
def kept(monkeypatch):
    """The jobs of every batch run (as compile_pool.compile_all gets them)."""
    jobs = []
    run = compile_pool.compile_all

    def keep(batch, what):
        jobs.extend(batch)
        return run(batch, what)

    monkeypatch.setattr(compile_pool, "compile_all", keep)
    return jobs


def gemm_jobs() -> list:
    """Cubin jobs of two GEMM specialisations (row-major and column-major arrays) as their
    launches make them."""
    jobs = []
    for order in "CF":
        a = np.zeros((64, 64), np.float32, order=order)
        jobs += matmul.compile_jobs((4, 4), (a, a, a), target="cuda", arch=ARCH)
    return jobs


def counted(fn):
    before = ts.stats()
    result = fn()
    after = ts.stats()
    return result, {name: after[name] - before[name] for name in after}


def test_a_batch_of_cubins_compiles_in_workers_and_loads_from_the_cache(cache_dir, monkeypatch):
    monkeypatch.setattr(compile_pool, "HERE", False)  # the workers compile every job
    jobs = gemm_jobs()
    assert len(jobs) == 2 and all(isinstance(j, compile_job.CubinJob) for j in jobs)
    with ts.config(compile_workers=3):
        summary, _ = counted(lambda: compile_pool.compile_all(jobs, "gemms"))
    assert summary["in_workers"] == 2 and summary["left"] == []
    for job in jobs:  # what the launch calls (CudaProgram._load): read, nothing compiled
        (symbol, cubin), change = counted(job.here)
        assert change["compiles"] == 0 and change["disk_cache_hits"] == 1
        assert cubin[:4] == b"\x7fELF" and "matmul" in symbol
    assert gemm_jobs() == []  # their entries are there: nothing is left to compile


def test_the_split_attentions_two_kernels_compile_side_by_side(cache_dir, kept, monkeypatch):
    monkeypatch.setattr(generated, "_kernels", {})
    monkeypatch.setattr(compile_pool, "HERE", False)
    arrays = _inputs(4096, 4096, np.float16, d=16)
    lowered = lower(attention._trace(plan.operands(attention.name, arrays)), True)
    assert [g.head.op for g in lowered.groups] == ["attention_split", "attention_combine"]
    with ts.config(compile_workers=2):
        summary = compile_ahead(lowered, plan._calls(lowered), {}, CUDA, arch=ARCH)
    assert summary["in_workers"] == 2
    assert [j.kernel for j in kept] == [k.name for k in lowered.kernels]
    for job in kept:
        (_, cubin), change = counted(job.here)
        assert change["compiles"] == 0 and change["disk_cache_hits"] == 1


def test_without_a_gpu_or_an_arch_nothing_is_compiled_ahead(cache_dir):
    a = np.zeros((64, 64), np.float32)
    if CUDA.availability()[0][1] == "usable":
        pytest.skip("a GPU is here: its architecture is the jobs'")
    assert matmul.compile_jobs((4, 4), (a, a, a), target="cuda") == []


def test_a_job_a_worker_cannot_compile_is_left_to_its_launch(cache_dir, monkeypatch):
    monkeypatch.setattr(compile_pool, "HERE", False)
    jobs = [dataclasses.replace(j, source="def (", here=j.here) for j in gemm_jobs()]
    with ts.config(compile_workers=2):
        summary = compile_pool.compile_all(jobs, "gemms")
    assert summary["in_workers"] == 0 and len(summary["left"]) == 2
    assert "cubin for sm_90" in summary["left"][0][0]
    (_, cubin), change = counted(jobs[0].here)  # the launch compiles it, as without workers
    assert change["compiles"] == 1 and cubin[:4] == b"\x7fELF"


def test_a_worker_with_another_toolchain_writes_nothing(cache_dir, monkeypatch):
    """The worker works the entry's key out itself: where it differs (here: another
    launch bound), the job fails rather than file a cubin under the launch's key."""
    monkeypatch.setattr(compile_pool, "HERE", False)
    jobs = [dataclasses.replace(j, bound=(j.bound, 2), here=j.here) for j in gemm_jobs()]
    with ts.config(compile_workers=2):
        summary = compile_pool.compile_all(jobs, "gemms")
    assert summary["in_workers"] == 0
    assert all("names the entry differently" in why for _, why in summary["left"])


def test_on_a_gpu_the_jobs_are_for_its_architecture(cache_dir, monkeypatch):
    """What a sweep's jobs get on a GPU host: the current device's architecture, as the
    launch reads it (here a stand-in device: no GPU is needed to make the jobs)."""
    device = ("a GPU", (8, 6), 101376)
    monkeypatch.setattr(compile_job.driver_module.DRIVER, "device", lambda: device)
    a = np.zeros((64, 64), np.float32)
    (job,) = matmul.compile_jobs((4, 4), (a, a, a), target="cuda")
    assert job.arch == "sm_86" and "sm_86" in job.title
