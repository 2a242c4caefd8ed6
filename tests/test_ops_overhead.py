"""What keeps an op call cheap on device arrays, checked without a GPU: the launches of a
lowered graph worked out once, kernel-shaped views of device arrays made directly, the
operands' placement read once, and the device pool's next-fit search. Device arrays here
are numba-cuda's own over made-up addresses (nothing reads or writes them); the pool's
allocator is a stand-in that records each allocation and hands out such blocks."""

from __future__ import annotations

import gc
import itertools
import os

import numpy as np
import pytest

from tessera import op
from tessera.kernel.targets.cuda.memory import DevicePool
from tessera.ops import kinds, plan
from tessera.ops import module as ops_module

simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
numba_driver = pytest.mark.skipif(
    simulated, reason="numba-cuda's driver classes, not the simulator"
)

pytestmark = pytest.mark.usefixtures("frozen_heap")  # fast gc.collect() calls

_addresses = itertools.count(1 << 40, 1 << 30)


class RecordingAllocator:
    """Records each allocation the pool asks for; answers with an owned block of numba-cuda
    (reference counted as ``memalloc``'s are) at a made-up address."""

    def __init__(self):
        self.sizes: list[int] = []
        self._kept: list = []  # the allocations (numba-cuda keeps them in its context)

    def __call__(self, size: int):
        from numba.cuda.cudadrv import driver

        self.sizes.append(size)
        pointer = driver.binding.CUdeviceptr(next(_addresses))
        memory = driver.AutoFreePointer(None, pointer, size, finalizer=lambda: None)
        self._kept.append(memory)
        return memory.own()


def _device_array(shape, dtype=np.float32):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    dtype = np.dtype(dtype)
    strides = np.empty(shape, dtype).strides
    return DeviceNDArray(shape, strides, dtype, gpu_data=RecordingAllocator()(4 << 20))


def test_an_op_works_out_its_launches_once_and_reuses_them():
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    first = op.softmax(x)
    (lowered,) = [
        v for k, v in ops_module._eager.items() if k[0] == "softmax" and k[3][0][0] == (3, 4)
    ]
    calls = lowered.calls
    assert calls is not None and calls[0][0] is lowered.kernels[0]
    assert [shape for _, shape in calls[0][2]] == [(12,), (12,)]  # flat: the -1 worked out
    second = op.softmax(x)
    assert lowered.calls is calls
    np.testing.assert_array_equal(first, second)


def test_an_op_of_numbers_and_arrays_keys_the_numbers():
    x = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(op.add(x, 1.0), x + 1)
    np.testing.assert_array_equal(op.add(x, 2.0), x + 2)
    np.testing.assert_array_equal(op.add(x, x), x + x)


def test_a_host_array_of_the_kernels_shape_is_passed_as_it_is():
    x = np.zeros((3, 4), np.float32)
    assert plan.reshaped(x, (3, 4)) is x
    view = plan.reshaped(x, (12,))
    assert view.shape == (12,) and np.shares_memory(view, x)


@numba_driver
@pytest.mark.parametrize(
    ("shape", "to"), [((64, 32), (2048,)), ((2048,), (64, 32)), ((4, 8, 16), (32, 16))]
)
def test_a_device_arrays_view_is_what_its_reshape_gives(shape, to):
    a = _device_array(shape)
    mine, numbas = plan.reshaped(a, to), a.reshape(to)
    assert type(mine) is type(numbas)
    assert (mine.shape, mine.strides, mine.dtype) == (numbas.shape, numbas.strides, numbas.dtype)
    assert mine.gpu_data is a.gpu_data
    assert mine.device_ctypes_pointer.value == numbas.device_ctypes_pointer.value
    assert plan.reshaped(a, shape) is a


@numba_driver
def test_a_strided_device_array_is_reshaped_by_numba_cuda():
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    # every other row of an (8, 4) array: not contiguous, numba-cuda's reshape says so
    a = DeviceNDArray((4, 4), (32, 4), np.float32, gpu_data=RecordingAllocator()(128))
    with pytest.raises(NotImplementedError):
        plan.reshaped(a, (16,))


@numba_driver
def test_operands_say_once_where_each_array_is():
    host = kinds.operands("op.add", (np.zeros(3, np.float32), [1.0, 2.0, 3.0]))
    assert host.placed == [False, False]
    device = kinds.operands("op.add", (_device_array((3,)), _device_array((3,))))
    assert device.placed == [True, True]
    with pytest.raises(Exception, match="mix host and device"):
        plan.operands("op.add", (np.zeros(3, np.float32), _device_array((3,))))


@numba_driver
def test_the_pool_hands_out_a_free_block_without_allocating():

    allocate = RecordingAllocator()
    pool = DevicePool(limit=1 << 20, allocate=allocate)
    a = pool.empty((1000,), np.float32)
    pointer = a.device_ctypes_pointer.value
    del a
    gc.collect()
    b = pool.empty((999,), np.float32)  # the same size class
    assert b.device_ctypes_pointer.value == pointer
    assert allocate.sizes == [4096]


@numba_driver
def test_the_pool_never_hands_out_a_block_in_use():

    pool = DevicePool(limit=1 << 20, allocate=RecordingAllocator())
    live = [pool.empty((256,), np.float32) for _ in range(4)]
    view = live[1].gpu_data.view(32)  # (what a slice of the array holds) keeps its block
    pointers = {a.device_ctypes_pointer.value for a in live}
    del live[1]
    more = [pool.empty((256,), np.float32) for _ in range(3)]
    assert not pointers & {a.device_ctypes_pointer.value for a in more}
    del view


@numba_driver
def test_the_pool_looks_first_after_the_block_it_handed_out_last():
    allocate = RecordingAllocator()
    pool = DevicePool(limit=1 << 20, allocate=allocate)
    arrays = [pool.empty((256,), np.float32) for _ in range(4)]
    pointers = [a.device_ctypes_pointer.value for a in arrays]
    del arrays
    gc.collect()  # four free blocks
    a = pool.empty((256,), np.float32)
    b = pool.empty((256,), np.float32)
    assert [a.device_ctypes_pointer.value, b.device_ctypes_pointer.value] == pointers[:2]
    del a
    gc.collect()  # block 0 is free again, but the search goes on after block 1
    c = pool.empty((256,), np.float32)
    assert c.device_ctypes_pointer.value == pointers[2]
    d, e = pool.empty((256,), np.float32), pool.empty((256,), np.float32)
    assert [d.device_ctypes_pointer.value, e.device_ctypes_pointer.value] == [
        pointers[3],
        pointers[0],  # (round again to the first)
    ]
    assert len(allocate.sizes) == 4
    f = pool.empty((256,), np.float32)  # none free: a new block
    assert len(allocate.sizes) == 5 and f.device_ctypes_pointer.value not in pointers
    del b, c, d, e, f
    gc.collect()
    assert pool.release() == 5 * 1024 and pool.kept == 0


@numba_driver
@pytest.mark.parametrize(
    ("shape", "dtype"), [((64, 32), np.float32), ((2048,), np.float16), ((4, 8, 16), np.int64)]
)
def test_a_numba_array_made_again_is_what_its_constructor_makes(shape, dtype):
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    from tessera.arrays import numba_array

    dtype = np.dtype(dtype)
    strides = np.empty(shape, dtype).strides
    first_data, second_data = RecordingAllocator()(1 << 20), RecordingAllocator()(1 << 20)
    first = numba_array(DeviceNDArray, shape, strides, dtype, first_data)
    first.nbytes, first._numba_type_  # noqa: B018 (cached properties, kept in its __dict__)
    second = numba_array(DeviceNDArray, shape, strides, dtype, second_data)
    made = DeviceNDArray(shape, strides, dtype, gpu_data=second_data)
    assert type(second) is DeviceNDArray and second.gpu_data is second_data
    assert second.__dict__ == made.__dict__ | {"_dummy": second._dummy}
    assert (second.shape, second.strides, second.dtype, second.size, second.alloc_size) == (
        made.shape,
        made.strides,
        made.dtype,
        made.size,
        made.alloc_size,
    )
    assert second.device_ctypes_pointer.value == made.device_ctypes_pointer.value
    assert first.device_ctypes_pointer.value != second.device_ctypes_pointer.value
    assert second.is_c_contiguous() and second.reshape(-1).shape == (made.size,)


@numba_driver
def test_the_pool_hands_each_array_on_a_block_the_blocks_one_view():
    allocate = RecordingAllocator()
    pool = DevicePool(limit=1 << 20, allocate=allocate)
    a = pool.empty((1000,), np.float32)
    view = a.gpu_data
    del a
    b = pool.empty((1000,), np.float32)  # the dropped array's view still held: in use
    assert b.gpu_data is not view and len(allocate.sizes) == 2
    del b
    c = pool.empty((1000,), np.float32)  # the second block: free
    assert len(allocate.sizes) == 2
    del c, view
    d, e = pool.empty((1000,), np.float32), pool.empty((1000,), np.float32)
    assert len(allocate.sizes) == 2 and d.gpu_data is not e.gpu_data
    assert d.alloc_size == d.gpu_data.size == 4000


@numba_driver
def test_a_reshape_of_a_dropped_array_keeps_its_block():
    pool = DevicePool(limit=1 << 20, allocate=RecordingAllocator())
    a = pool.empty((16, 64), np.float32)
    pointer = a.device_ctypes_pointer.value
    flat = a.reshape(1024)  # (shares the array's view: numba-cuda counts nothing more)
    del a
    gc.collect()
    b = pool.empty((16, 64), np.float32)
    assert b.device_ctypes_pointer.value != pointer
    del b, flat
    gc.collect()
    assert pool.empty((16, 64), np.float32).device_ctypes_pointer.value == pointer


@numba_driver
def test_a_block_reused_for_another_size_of_its_class_gets_a_view_of_that_size():
    pool = DevicePool(limit=1 << 20, allocate=RecordingAllocator())
    a = pool.empty((1000,), np.float32)
    pointer = a.device_ctypes_pointer.value
    del a
    b = pool.empty((999,), np.float32)  # the same size class
    assert b.device_ctypes_pointer.value == pointer
    assert b.gpu_data.size == b.alloc_size == 3996
    (entry,) = pool._blocks[4096]
    assert entry[0]._mem.refct == 2  # the block and its one view: the old view is gone


@numba_driver
def test_release_gives_back_a_block_with_its_view():
    allocate = RecordingAllocator()
    pool = DevicePool(limit=1 << 20, allocate=allocate)
    a, b = pool.empty((256,), np.float32), pool.empty((256,), np.float32)
    del a
    assert pool.release() == 1024 and pool.kept == 1024
    assert [m.refct for m in allocate._kept] == [0, 2]  # freed; b's in use
    del b
    assert pool.release() == 1024 and pool.kept == 0
    assert [m.refct for m in allocate._kept] == [0, 0]


@numba_driver
def test_an_empty_array_of_the_pool_takes_no_block(monkeypatch):
    from numba.cuda.cudadrv import devices

    monkeypatch.setattr(devices, "get_context", lambda: None)  # (its null pointer's context)
    allocate = RecordingAllocator()
    pool = DevicePool(limit=1 << 20, allocate=allocate)
    a = pool.empty((0, 4), np.float32)
    assert a.shape == (0, 4) and a.size == 0 and allocate.sizes == []


@numba_driver
def test_the_pools_arrays_take_any_spelling_of_a_shape():
    pool = DevicePool(limit=1 << 20, allocate=RecordingAllocator())
    for shape in [(16, 64), [16, 64], (np.int64(16), np.int64(64)), (16, 64)]:
        a = pool.empty(shape, "float32")
        assert a.shape == (16, 64) and a.strides == (256, 4) and a.dtype == np.float32
        assert all(type(n) is int for n in a.shape)
    assert pool.empty((3,), np.float64).alloc_size == 24


@numba_driver
def test_a_device_arrays_view_is_made_again_from_its_layout():
    a = _device_array((64, 32))
    first, second = plan.reshaped(a, (2048,)), plan.reshaped(a, (2048,))
    assert first is not second and second.gpu_data is a.gpu_data
    assert (second.shape, second.strides) == ((2048,), (4,))
    b = _device_array((32, 64))
    assert plan.reshaped(b, (2048,)).strides == (4,)


def test_simulating_reads_numbas_setting_each_time(monkeypatch):
    from numba import config

    from tessera.kernel.targets.cuda.runtime import simulating

    monkeypatch.setattr(config, "ENABLE_CUDASIM", 1, raising=False)
    assert simulating()
    monkeypatch.setattr(config, "ENABLE_CUDASIM", 0, raising=False)
    assert not simulating()


@numba_driver
def test_a_gapped_device_array_is_refused_after_a_row_major_one_of_its_shape():
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    row_major = _device_array((4, 4))
    assert plan.operands("op.relu", (row_major,)).placed == [True]
    gapped = DeviceNDArray((4, 4), (32, 4), np.float32, gpu_data=RecordingAllocator()(128))
    for _ in range(2):
        with pytest.raises(Exception, match="argument 0 is not contiguous"):
            plan.operands("op.relu", (gapped,))
    assert plan.operands("op.relu", (row_major,)).placed == [True]


def test_an_op_keys_its_lowering_by_dtype():
    import ml_dtypes

    x = np.linspace(-2, 2, 8, dtype=np.float32)
    for dtype in (np.float32, np.float64, ml_dtypes.bfloat16, np.float32):
        xd = x.astype(dtype)
        out = op.relu(xd)
        assert out.dtype == dtype
        np.testing.assert_array_equal(out.astype(np.float32), np.maximum(xd.astype(np.float32), 0))
    with pytest.raises(Exception, match="not supported"):
        op.relu(x.astype(">f4"))  # (equal to no native float32: refused, not confused)
    keys = [k for k in ops_module._eager if k[0] == "relu" and k[3][0][0] == (8,)]
    assert {k[3][0][1] for k in keys} >= {np.dtype(np.float32), np.dtype(np.float64)}


def test_an_op_and_a_graph_that_assigns_its_argument_run_as_before():
    from tessera import graph

    @graph.kernel
    def relu_into(x, out: graph.mut):
        out[:] = op.relu(x)

    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    out = np.zeros_like(x)
    relu_into(x, out)
    np.testing.assert_array_equal(out, np.maximum(x, 0))
    np.testing.assert_array_equal(op.softmax(x), op.softmax(x.copy()))


def test_a_kernel_replaced_in_a_lowered_graph_has_its_launches_worked_out_again():
    x = np.linspace(-2, 2, 10, dtype=np.float32).reshape(2, 5)
    expected = op.relu(x)
    (lowered,) = [
        v for k, v in ops_module._eager.items() if k[0] == "relu" and k[3][0][0] == (2, 5)
    ]
    old = lowered.calls
    lowered.kernels[0] = lowered.kernels[0]  # the same kernel: the launches are kept
    op.relu(x)
    assert lowered.calls is old
    lowered.calls = [(object(),) + tuple(old[0][1:])]  # launches of another kernel
    np.testing.assert_array_equal(op.relu(x), expected)
    assert lowered.calls[0][0] is lowered.kernels[0]
