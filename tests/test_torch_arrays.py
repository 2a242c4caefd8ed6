"""PyTorch tensors as kernel arguments and as collective operands (docs/targets.md,
"PyTorch and JAX"): host tensors reach a kernel as NumPy views of their memory, bf16
included; tensors that require grad are refused; collectives give tensors back.

Skipped where PyTorch is not installed (it is no test dependency).
"""

from __future__ import annotations

import gc
import json
import traceback
import weakref

import numpy as np
import pytest
from mpi_run import mpi_missing, run_mpi

import tessera
from tessera import bf16, dist, f32, group_linear_id, kernel, mut, tile
from tessera.dlpack import bf16_view
from tessera.kernel.targets import AUTO, HOST_CHOICE

pytestmark = pytest.mark.usefixtures("frozen_heap")  # fast gc.collect() calls

torch = pytest.importorskip("torch")


@kernel
def axpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]


@kernel
def twice_bf16(x: bf16[n], y: mut[bf16[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = x[i] + x[i]


def test_a_kernel_writes_into_a_host_tensor_in_place(target):
    x = torch.arange(10, dtype=torch.float32)
    y = torch.ones(10)
    memory = y.data_ptr()
    axpy[10](x, y, 2.0)
    assert y.data_ptr() == memory
    assert torch.equal(y, 2 * x + 1)


def test_a_strided_tensor_view_is_written_through_its_strides(target):
    base = torch.zeros(8)
    y = base[::2]
    axpy[4](torch.ones(4), y, 3.0)
    assert base.tolist() == [3.0, 0.0] * 4


def test_bf16_tensors_are_read_and_written(target):
    x = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    y = torch.zeros(3, dtype=torch.bfloat16)
    twice_bf16[3](x, y)
    assert y.dtype == torch.bfloat16 and y.tolist() == [3.0, -4.0, 6.5]


class DLPackOnly:
    """A tensor that offers only the DLPack protocol (as other libraries' tensors do)."""

    def __init__(self, tensor):
        self._tensor = tensor

    def __dlpack__(self, **kwargs):
        return self._tensor.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._tensor.__dlpack_device__()


def test_bf16_through_dlpacks_bfloat_code_is_read_and_written(target):
    x = torch.tensor([1.5, -2.0, 3.25], dtype=torch.bfloat16)
    y = torch.zeros(3, dtype=torch.bfloat16)
    twice_bf16[3](DLPackOnly(x), DLPackOnly(y))
    assert y.tolist() == [3.0, -4.0, 6.5]


def test_a_bf16_dlpack_view_keeps_the_producers_tensor_alive():
    tensor = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3).t()  # strided
    alive = weakref.ref(tensor)
    view = bf16_view(DLPackOnly(tensor))
    del tensor
    gc.collect()
    assert alive() is not None and view.tolist() == [[0, 3], [1, 4], [2, 5]]
    del view
    gc.collect()
    assert alive() is None


def test_a_tensor_that_requires_grad_is_refused_naming_kernel_and_parameter(target):
    x = torch.ones(4, requires_grad=True)
    y = torch.zeros(4)
    with pytest.raises(tessera.LaunchError) as info:
        axpy[4](x, y, 1.0)
    message = str(info.value)
    assert "kernel 'axpy'" in message and "parameter 'x'" in message
    assert "requires grad" in message and "x.detach()" in message
    assert traceback.extract_tb(info.value.__traceback__)[-1].filename == __file__
    assert torch.equal(y, torch.zeros(4))


def test_a_detached_tensor_is_launched_on_the_same_memory(target):
    w = torch.zeros(4, requires_grad=True)
    axpy[4](torch.ones(4), w.detach(), 5.0)
    assert w.tolist() == [5.0] * 4


def test_a_tensor_of_the_wrong_dtype_is_refused_naming_the_parameter(target):
    with pytest.raises(tessera.LaunchError, match=r"parameter 'y' expects dtype f32"):
        axpy[4](torch.ones(4), torch.zeros(4, dtype=torch.float64), 1.0)


def test_a_tensor_numpy_cannot_view_is_refused_naming_the_parameter(target):
    x = torch.ones(4, dtype=torch.float8_e4m3fn)
    with pytest.raises(tessera.LaunchError, match=r"parameter 'x' is a PyTorch tensor that has no"):
        axpy[4](x, torch.zeros(4), 1.0)


def test_a_host_tensor_launch_takes_the_lean_path():
    binder = axpy._binders[HOST_CHOICE[AUTO]]
    x, y = torch.ones(4), torch.zeros(4)
    bound = binder.fast((x, y, 1.0), (4,))
    assert bound is not None
    assert np.shares_memory(bound.call_args[1], y.numpy())


@kernel.autotune(space=dict(BM=[32, 64]), key=["n"], tile=lambda c: (c.BM,))
def add_tuned(x: f32[n], y: mut[f32[n]]):
    i = group_linear_id() * BM + tile.linear_id()
    if i < n:
        y[i] += x[i]


def test_an_autotune_sweep_restores_a_tensor_between_trials():
    x, y = torch.arange(100, dtype=torch.float32), torch.ones(100)
    with tessera.config(autotune="retune"):
        add_tuned[lambda c: -(-100 // c.BM)](x, y)
    assert len(add_tuned.last_table) == 2  # a sweep ran: both configs launched
    assert torch.equal(y, x + 1)


@kernel
def write_past_end(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    y[i + 1] = x[i]


def test_a_crash_capture_keeps_a_tensors_data_as_numpy(tmp_path):
    x, y = torch.arange(4, dtype=torch.float32), torch.full((4,), 7.0)
    with tessera.config(target="debug", crash_dir=str(tmp_path)):
        with pytest.raises(tessera.TesseraError, match="out of bounds"):
            write_past_end[4](x, y)
    (capture,) = [p for p in tmp_path.iterdir() if (p / "metadata.json").exists()]
    meta = json.loads((capture / "metadata.json").read_text())
    assert [a["dtype"] for a in meta["args"]] == ["float32", "float32"]
    np.testing.assert_array_equal(np.load(capture / "args.npz")["arg0"], x.numpy())


@pytest.fixture
def mesh():
    return dist.Mesh(axes=("x",), shape=(1,))


@pytest.mark.parametrize(
    "collective", [dist.all_reduce, dist.all_gather, dist.reduce_scatter, dist.broadcast]
)
def test_a_collective_on_a_tensor_returns_a_new_tensor(mesh, collective):
    x = torch.arange(6, dtype=torch.float32)
    got = collective(x)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
    assert torch.equal(got, x) and got.data_ptr() != x.data_ptr()


def test_a_collective_keeps_bf16(mesh):
    got = dist.all_reduce(torch.ones(3, dtype=torch.bfloat16))
    assert got.dtype == torch.bfloat16 and got.tolist() == [1.0] * 3


def test_a_collective_writes_a_tensor_out_and_returns_it(mesh):
    out = torch.zeros(4)
    got = dist.all_reduce(torch.arange(4.0), out=out)
    assert got is out and out.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_an_async_collective_on_a_tensor_waits_for_a_tensor(mesh):
    work = dist.all_reduce(torch.arange(3.0), async_op=True)
    assert torch.equal(work.wait(), torch.arange(3.0))


def test_a_collective_refuses_a_tensor_that_requires_grad(mesh):
    with pytest.raises(tessera.TesseraError, match=r"requires grad.*x\.detach\(\)"):
        dist.all_reduce(torch.ones(2, requires_grad=True))


def test_coalesced_all_reduce_gives_back_tensors_beside_numpy_arrays(mesh):
    got = dist.all_reduce_coalesced([torch.ones(2), np.ones(3), torch.full((2, 2), 2.0)])
    assert isinstance(got[0], torch.Tensor) and isinstance(got[1], np.ndarray)
    assert torch.equal(got[2], torch.full((2, 2), 2.0))
    got[0] += 1  # a tensor of its own, writable
    assert got[0].tolist() == [2.0, 2.0]


@pytest.mark.skipif(mpi_missing(), reason="needs mpi4py and mpiexec")
def test_collectives_move_tensors_between_two_ranks(tmp_path):
    pytest.importorskip("jax")
    result = run_mpi("mpi_torch_script.py", 2, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = {r: (tmp_path / f"rank{r}.txt").read_text() for r in range(2)}
    assert reports == {0: "ok", 1: "ok"}, reports
