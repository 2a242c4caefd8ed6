"""The CUDA direct launch path without a GPU: the parameter block against the PTX
``.param`` list NVVM makes, the values a launch writes, and the driver calls it makes
(through a recording stand-in for the driver, which counts calls and computes nothing).
"""

from __future__ import annotations

import ctypes
import os
import struct

import numpy as np
import pytest

import tessera as ts
from tessera import f16, f32, f64, i8, i16, i32, i64, kernel, mut, tile, u8, u16, u32, u64

pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1", reason="compiles PTX: not in the simulator"
)

from tessera.arrays import contiguous_strides  # noqa: E402
from tessera.kernel.targets import TARGETS  # noqa: E402
from tessera.kernel.targets.cuda import abi  # noqa: E402
from tessera.kernel.targets.cuda.driver import use_driver  # noqa: E402
from tessera.kernel.targets.cuda.launcher import DirectLauncher  # noqa: E402
from tessera.kernel.targets.cuda.program import cuda_signature  # noqa: E402
from tessera.kernel.targets.cuda.streams import _gpu_work  # noqa: E402

CUDA = TARGETS["cuda"]


class FakeGPUArray:
    """An array that says it lives on a GPU (``__cuda_array_interface__``) at a made-up
    address: what a launch reads of it is its pointer, shape and strides."""

    def __init__(self, pointer: int, shape: tuple, dtype, strides: tuple | None = None):
        self.pointer, self.shape, self.dtype = pointer, tuple(shape), np.dtype(dtype)
        self.strides = strides

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.shape,
            "strides": self.strides,
            "typestr": self.dtype.str,
            "data": (self.pointer, False),
            "version": 3,
        }


class RecordingDriver:
    """Stands in for the CUDA driver: records each call of the launch path and answers
    with made-up handles. It never runs or fakes a kernel's results."""

    def __init__(self, cc=(9, 0)):
        self.calls: list = []
        self.cc = cc
        self.params = None

    def device(self):
        self.calls.append("device")
        return "recording stand-in", self.cc, 227 * 1024

    def multiprocessors(self):
        return 132

    def load(self, cubin, entry):
        self.calls.append(("load", entry))
        assert cubin.startswith(b"\x7fELF")
        return "module", "function"

    def allow_dynamic_shared(self, function, nbytes):
        self.calls.append(("allow_dynamic_shared", nbytes))

    def stream_handle(self, stream):
        self.calls.append("stream_handle")
        return 77

    def launcher(self):
        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            self.calls.append(("launch", function, gx, bx, shared, stream))
            self.params = params
            return (0,)

        return launch, 0

    def launch_failed(self, err, kernel):
        return ts.TesseraError(f"launch of {kernel} failed: {err}")


@kernel(tile=(64,))
def abi_mix(
    a: f32[n],
    b: mut[f64[r, c]],
    c8: i8[p, q, s],
    h: f16[n],
    s32: f32,
    s64: f64,
    si8: i8,
    si16: i16,
    si32: i32,
    si64: i64,
    su8: u8,
    su16: u16,
    su32: u32,
    su64: u64,
    sh: f16,
):
    i = tile.linear_id()
    if i < n:
        b[0, 0] = a[i] + s32 + s64 + si8 + si16 + si32 + si64 + su8 + su16 + su32 + su64 + sh


def _mix_args(layout: str):
    a = np.zeros(10, np.float32)
    b = np.zeros((4, 6), np.float64)
    c8 = np.zeros((3, 4, 8), np.int8)
    if layout == "F":
        b, c8 = np.asfortranarray(b), np.asfortranarray(c8)
    elif layout == "A":
        b, c8 = np.zeros((8, 6), np.float64)[::2], np.zeros((3, 4, 16), np.int8)[:, :, ::2]
    scalars = (1.5, 2.5, -3, 4, -5, 6, 7, 8, 9, 10, 0.5)
    return (a, b, c8, np.zeros(10, np.float16), *scalars)


@pytest.mark.parametrize("layout", ["C", "F", "A"])
def test_parameter_slots_match_the_ptx_param_list(layout):
    args = _mix_args(layout)
    with ts.config(target="cuda"):
        ptx = abi_mix.inspect("ptx", *args, grid=(2, 3))
        bound = abi_mix.bind(CUDA, args, (2, 3))
    signature = cuda_signature(bound.call_args, 2)
    assert [t.layout for t in signature[1:3]] == [layout, layout]
    _, slots = abi.arg_layouts(signature)
    params = abi.ptx_params(ptx)
    assert [s.size for s in slots] == [size for _, size in params]
    assert [s.ptx for s in slots] == [kind for kind, _ in params]


@kernel
def abi_bool(x: mut[u8[n]], flag: ts.bool_, v: u16):
    i = tile.linear_id()
    if i < n and flag:
        x[i] = v


def test_a_bool_scalar_is_one_byte_as_the_ptx_says():
    args = (np.zeros(4, np.uint8), True, 3)
    with ts.config(target="cuda"):
        ptx = abi_bool.inspect("ptx", *args, grid=4)
        bound = abi_bool.bind(CUDA, args, (4,))
    _, slots = abi.arg_layouts(cuda_signature(bound.call_args, 1))
    assert [s.size for s in slots] == [size for _, size in abi.ptx_params(ptx)]


def test_the_parameter_block_holds_each_arrays_words_and_each_scalars_bits():
    import numba

    a = FakeGPUArray(0x7F0000001000, (10,), np.float32)
    b = FakeGPUArray(0x7F0000002000, (4, 6), np.float64, (8, 32))  # F-contiguous
    argtypes = (
        numba.types.Array(numba.float32, 1, "C"),
        numba.types.Array(numba.float64, 2, "F"),
        numba.float32,
        numba.types.float16,
        numba.int8,
        numba.boolean,
        numba.int64,
    )
    launcher = DirectLauncher("k", "function", argtypes)
    launcher.pack((a, b, np.float32(1.5), np.float16(-2.0), np.int8(-3), np.bool_(True), 9))
    block = launcher.block
    words = [struct.unpack("<q", block.read(k, 8))[0] for k in range(7 + 9)]
    assert words[:7] == [0, 0, 10, 4, 0x7F0000001000, 10, 4]
    assert words[7:16] == [0, 0, 24, 8, 0x7F0000002000, 4, 6, 8, 32]
    assert struct.unpack("<f", block.read(16, 4))[0] == 1.5
    assert block.read(17, 2) == np.float16(-2.0).tobytes()
    assert block.read(18, 1) == b"\xfd"
    assert block.read(19, 1) == b"\x01"
    assert struct.unpack("<q", block.read(20, 8))[0] == 9
    # every pointer of the void*[] the driver gets is one of these places
    pointers = (ctypes.c_void_p * 21).from_address(block.address)
    assert [pointers[k] for k in range(21)] == [block.pointers[k] for k in range(21)]


def scale(x: mut[f32[n]], y: f32[n], a: f32):
    i = tile.linear_id()
    if i < n:
        x[i] = a * y[i]


@pytest.fixture
def recording(cache_dir):
    """A recording driver, and a new kernel object launched through it."""
    driver = RecordingDriver()
    with use_driver(driver), ts.config(target="auto"):
        yield driver, kernel(scale)
    _gpu_work[0] = False  # nothing ran on a GPU: tessera.synchronize() has nothing to wait for


def test_a_launch_of_gpu_arrays_is_one_driver_call_after_the_first(recording):
    recording, scale = recording
    x = FakeGPUArray(0x10000, (1000,), np.float32)
    y = FakeGPUArray(0x20000, (1000,), np.float32)
    scale[1000](x, y, 2.0)  # compiles (NVVM, nvJitLink: no GPU needed), loads, launches
    assert recording.calls[0] == "device"
    assert recording.calls[1][0] == "load" and "scale" in recording.calls[1][1]
    assert recording.calls[2][0] == "launch"
    del recording.calls[:]
    compiles = ts.stats()["compiles"]
    scale[1000](y, x, 3.0)
    assert [c[0] for c in recording.calls] == ["launch"]
    assert ts.stats()["compiles"] == compiles


def test_a_launch_writes_the_arrays_it_was_given_into_the_block(recording):
    recording, scale = recording
    x = FakeGPUArray(0x10000, (1000,), np.float32)
    y = FakeGPUArray(0x20000, (1000,), np.float32)
    scale[1000](x, y, 2.0)
    scale[1000](y, x, 0.25)
    pointers = (ctypes.c_void_p * 17).from_address(recording.params)
    data = [struct.unpack("<q", ctypes.string_at(pointers[k], 8))[0] for k in (4, 11)]
    assert data == [0x20000, 0x10000]
    assert struct.unpack("<f", ctypes.string_at(pointers[14], 4))[0] == 0.25
    assert recording.calls[-1][2:4] == (4, 256)  # 4 blocks of 256 threads


def test_the_entry_symbol_carries_the_kernels_name(recording):
    recording, scale = recording
    x = FakeGPUArray(0x10000, (10,), np.float32)
    scale[10](x, x, 1.0)
    entry = recording.calls[1][1]
    assert entry.startswith("_ZN7tessera5scale")


def test_ptx_entry_names_the_kernel():
    with ts.config(target="cuda"):
        ptx = kernel(scale).inspect(
            "ptx", np.zeros(4, np.float32), np.zeros(4, np.float32), 1.0, grid=4
        )
    assert abi.entry_name(ptx).startswith("_ZN7tessera5scale")


def test_a_second_process_loads_the_cubin_from_the_disk_cache(recording):
    recording, scale = recording
    x = FakeGPUArray(0x10000, (64,), np.float32)
    scale[64](x, x, 2.0)
    fresh = kernel(scale.fn)  # a new kernel object: what a second process starts with
    before = ts.stats()
    fresh[64](x, x, 2.0)
    after = ts.stats()
    assert after["compiles"] == before["compiles"]
    assert after["disk_cache_hits"] == before["disk_cache_hits"] + 1


def test_contiguous_strides_are_the_c_order_byte_strides():
    assert contiguous_strides((4, 6), 8) == (48, 8)


def test_each_launch_of_a_flat_kernel_has_the_threads_its_grid_needs(recording):
    recording, scale = recording
    x = FakeGPUArray(0x10000, (1000,), np.float32)
    scale[10](x, x, 1.0)
    scale[1000](x, x, 1.0)
    launches = [c for c in recording.calls if c[0] == "launch"]
    assert [c[2:4] for c in launches] == [(1, 10), (4, 256)]


def test_processes_of_one_node_compile_a_kernel_once(tmp_path):
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, TESSERA_CACHE_DIR=str(tmp_path / "cache"), TESSERA_CACHE="on")
    script = os.path.join(here, "cubin_cache_script.py")
    procs = [
        subprocess.Popen(
            [sys.executable, script], cwd=here, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    counts = [tuple(map(int, p.communicate(timeout=240)[0].split())) for p in procs]
    assert sorted(c for c, _ in counts) == [0, 0, 1]  # one compiled, the others loaded it
    assert sum(h for _, h in counts) == 2


def _launch_once(driver, cache_dir) -> dict:
    with use_driver(driver), ts.config(target="auto"):
        x = FakeGPUArray(0x10000, (64,), np.float32)
        before = ts.stats()
        kernel(scale)[64](x, x, 2.0)
        after = ts.stats()
    _gpu_work[0] = False
    return {k: after[k] - before[k] for k in ("compiles", "disk_cache_hits")}


def test_a_cubin_for_another_architecture_is_never_loaded(cache_dir):
    assert _launch_once(RecordingDriver(cc=(8, 0)), cache_dir) == {
        "compiles": 1,
        "disk_cache_hits": 0,
    }
    assert _launch_once(RecordingDriver(cc=(9, 0)), cache_dir) == {
        "compiles": 1,
        "disk_cache_hits": 0,
    }
    assert _launch_once(RecordingDriver(cc=(9, 0)), cache_dir) == {
        "compiles": 0,
        "disk_cache_hits": 1,
    }


def test_a_tampered_cubin_entry_is_refused_with_a_warning_and_compiled_again(cache_dir):
    _launch_once(RecordingDriver(), cache_dir)
    (entry,) = (cache_dir / "cuda").glob("scale.*.nbk")
    data = bytearray(entry.read_bytes())
    data[-100] ^= 0xFF  # a byte of the cubin
    entry.write_bytes(bytes(data))
    with pytest.warns(ts.CacheWarning, match="ignoring the entry"):
        counts = _launch_once(RecordingDriver(), cache_dir)
    assert counts == {"compiles": 1, "disk_cache_hits": 0}


def grid_stride(x: mut[f32[n]]):
    for i in range(tile.linear_id(), n, 256):
        x[i] = 2.0 * x[i]


def test_a_few_groups_over_much_memory_are_reported_once(cache_dir, caplog):
    import logging

    k = ts.kernel(tile=(256,))(grid_stride)
    big = FakeGPUArray(0x10000, (16 << 20,), np.float32)  # 64 MiB
    with use_driver(RecordingDriver()), caplog.at_level(logging.WARNING, logger="tessera"):
        k[1](big)
        k[1](big)
    _gpu_work[0] = False
    said = [r.getMessage() for r in caplog.records if "grid_stride" in r.getMessage()]
    assert len(said) == 1 and "1 group(s) of 256 lanes" in said[0] and "132 SMs" in said[0]


def test_a_few_groups_over_little_memory_are_not_reported(cache_dir, caplog):
    import logging

    k = ts.kernel(tile=(256,))(grid_stride)
    small = FakeGPUArray(0x10000, (4096,), np.float32)
    with use_driver(RecordingDriver()), caplog.at_level(logging.WARNING, logger="tessera"):
        k[1](small)
    _gpu_work[0] = False
    assert not [r for r in caplog.records if "grid_stride" in r.getMessage()]


@kernel
def abi_arrays(
    a: ts.bf16[n],
    b: i16[n, m],
    c: i32[n],
    d: i64[p, q, s],
    e: u8[n],
    f: u16[n],
    g: u32[n],
    h: mut[u64[n]],
    z: ts.bool_[n],
):
    i = tile.linear_id()
    if i < n:
        h[i] = u64(c[i]) + u64(e[i]) + u64(f[i]) + u64(g[i]) + u64(b[i, 0]) + u64(d[0, 0, 0])


@pytest.mark.parametrize("layout", ["C", "F"])
def test_array_slots_of_every_dtype_match_the_ptx_param_list(layout):
    import ml_dtypes

    def make(shape, dtype):
        a = np.zeros(shape, dtype)
        return np.asfortranarray(a) if layout == "F" else a

    args = (
        make(8, ml_dtypes.bfloat16),
        make((8, 3), np.int16),
        make(8, np.int32),
        make((2, 3, 4), np.int64),
        make(8, np.uint8),
        make(8, np.uint16),
        make(8, np.uint32),
        make(8, np.uint64),
        make(8, np.bool_),
    )
    with ts.config(target="cuda"):
        ptx = abi_arrays.inspect("ptx", *args, grid=8)
        bound = abi_arrays.bind(CUDA, args, (8,))
    signature = cuda_signature(bound.call_args, 1)
    _, slots = abi.arg_layouts(signature)
    assert [s.size for s in slots] == [size for _, size in abi.ptx_params(ptx)]
    dims = 1 + 2 + 1 + 3 + 1 + 1 + 1 + 1 + 1
    assert len(slots) == 9 * 5 + 2 * dims + 5 + 1  # arrays, symbols n m p q s, grid


class ContextRecordingDriver(RecordingDriver):
    """Also records in which threads the context was made current."""

    def __init__(self):
        super().__init__()
        self.threads_made_current = set()

    def ensure_context(self):
        import threading

        self.threads_made_current.add(threading.get_ident())


def test_a_launch_from_another_thread_makes_the_context_current_there(cache_dir):
    import threading

    driver = ContextRecordingDriver()
    x = FakeGPUArray(0x10000, (64,), np.float32)
    with use_driver(driver), ts.config(target="auto"):
        k = kernel(scale)
        k[64](x, x, 2.0)
        worker = threading.Thread(target=lambda: k[64](x, x, 3.0))
        worker.start()
        worker.join()
    _gpu_work[0] = False
    assert len(driver.threads_made_current) == 2


def _words(params: int, slots) -> list[int]:
    pointers = (ctypes.c_void_p * 17).from_address(params)
    return [struct.unpack("<q", ctypes.string_at(pointers[k], 8))[0] for k in slots]


def test_a_launch_with_another_shape_writes_that_shapes_words(recording):
    recording, scale = recording
    scale[1000](
        FakeGPUArray(0x10000, (1000,), np.float32), FakeGPUArray(0x20000, (1000,), np.float32), 1.0
    )
    x, y = FakeGPUArray(0x30000, (500,), np.float32), FakeGPUArray(0x40000, (500,), np.float32)
    scale[500](x, y, 1.0)  # items, item size, data, shape, stride of x, then of y
    assert _words(recording.params, range(2, 7)) == [500, 4, 0x30000, 500, 4]
    assert _words(recording.params, range(9, 14)) == [500, 4, 0x40000, 500, 4]


def test_a_strided_array_after_a_contiguous_one_compiles_its_own_code(recording):
    recording, scale = recording
    x = FakeGPUArray(0x10000, (64,), np.float32)
    scale[64](x, x, 1.0)
    strided = FakeGPUArray(0x20000, (64,), np.float32, (8,))
    scale[64](strided, x, 1.0)
    scale[64](x, x, 1.0)
    assert len([c for c in recording.calls if c[0] == "load"]) == 2
    assert _words(recording.params, [5, 6]) == [64, 4]  # x's shape and stride again
