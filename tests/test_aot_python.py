"""``tessera.aot`` in Python: what it compiles, what it refuses, the image format and the
library it builds (ABI.md §1, §4, §5, §6.4)."""

from __future__ import annotations

import ctypes
import subprocess
import textwrap

import aot_kernels as K
import numpy as np
import pytest
from aot_build import build_dir, need_cc

import tessera as ts
from tessera import aot, f32, kernel, mut, tile
from tessera.aot import c_types, cpu_object, elf
from tessera.aot.image_format import ImageFormatError, Module
from tessera.errors import AOTError


def test_the_cpu_object_needs_nothing_outside_libc_and_libm():
    obj = (build_dir() / "testmod_cpu.o").read_bytes()
    needed = set(elf.undefined(obj))
    assert needed <= cpu_object.ALLOWED, needed - cpu_object.ALLOWED


def test_nm_agrees_with_the_elf_reader():
    nm = subprocess.run(
        ["nm", "-u", str(build_dir() / "testmod_cpu.o")], capture_output=True, text=True
    )
    if nm.returncode != 0:
        pytest.skip("no nm here")
    listed = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}
    assert listed == set(elf.undefined((build_dir() / "testmod_cpu.o").read_bytes()))


def test_a_kernel_that_prints_is_an_aot_error_naming_its_line():
    @kernel
    def chatty(x: mut[f32[n]]):
        i = tile.linear_id()
        print("lane", i)
        if i < n:
            x[i] = 1.0

    with pytest.raises(AOTError) as info:
        aot.compile(chatty, target="cpu")
    text = str(info.value)
    assert "in kernel 'chatty': print() needs Python" in text
    assert 'print("lane", i)' in text and "test_aot_python.py:" in text


def test_a_heap_allocation_is_an_aot_error_naming_the_symbols():
    with pytest.raises(AOTError) as info:
        raise cpu_object.unsupported("k", ["NRT_MemInfo_alloc_aligned", "PyErr_Occurred"], None)
    text = str(info.value)
    assert "NRT_MemInfo_alloc_aligned (an allocation on the heap" in text
    assert "PyErr_Occurred (Python" in text


def test_a_missing_constexpr_is_an_aot_error_naming_it():
    with pytest.raises(AOTError, match="constexpr parameter 'BM' has no value"):
        aot.compile(K.linear_relu, target="cpu", constexprs=dict(BN=32, BK=16))


def test_an_unknown_constexpr_is_an_aot_error():
    with pytest.raises(AOTError, match="constexprs= names BQ, which the kernel does not take"):
        aot.compile(K.linear_relu, target="cpu", constexprs=dict(BM=32, BN=32, BK=16, BQ=1))


def test_the_debug_target_is_an_aot_error_pointing_at_cpu():
    with pytest.raises(AOTError, match='compile for "cpu"'):
        aot.compile(K.axpy, target="debug")


def test_a_dtype_generic_kernel_is_fixed_by_dtypes():
    @kernel
    def fill(x: mut[T[n]], T: ts.dtype_constexpr):
        i = tile.linear_id()
        if i < n:
            x[i] = 1

    with pytest.raises(AOTError, match="constexpr parameter 'T' has no value"):
        aot.compile(fill, target="cpu", layouts="contiguous")
    image = aot.compile(fill, target="cpu", dtypes={"T": ts.f64}, layouts="contiguous")
    assert [(p.name, p.dtype, p.bits) for p in image.params] == [("x", "f64", 64)]


def test_an_autotuned_kernel_takes_its_config():
    @ts.autotune({"B": [64, 128]})
    def ones(x: mut[f32[n]]):
        i = tile.linear_id()
        if i < n:
            x[i] = B

    image = aot.compile(ones, target="cpu", config={"B": 128}, layouts="contiguous")
    assert image.kernel == "ones"
    with pytest.raises(AOTError, match="is not one of the kernel's configs"):
        aot.compile(ones, target="cpu", config={"B": 3})


def test_a_complex_parameter_is_an_aot_error():
    @kernel
    def conj(z: mut[ts.complex64[n]]):
        i = tile.linear_id()
        if i < n:
            z[i] = z[i]

    with pytest.raises(AOTError, match="is complex"):
        aot.compile(conj, target="cpu")


def test_the_image_round_trips_and_checks_its_crc(tmp_path):
    image = aot.compile(K.axpy, target="cpu", layouts="contiguous")
    path = aot.save(image, tmp_path / "axpy.tsrm")
    data = path.read_bytes()
    module = Module.from_bytes(data)
    assert module.name == "axpy" and [k.name for k in module.kernels] == ["axpy"]
    kernel_entry = module.kernels[0]
    assert [p.name for p in kernel_entry.params] == ["a", "x", "y"]
    assert kernel_entry.params[2].dims == ("n",) and kernel_entry.params[2].mutable
    assert kernel_entry.specs[0].slots == image.specs[0].slots
    assert Module.from_bytes(module.to_bytes()).to_bytes() == data
    corrupt = bytearray(data)
    corrupt[-3] ^= 0xFF
    with pytest.raises(ImageFormatError, match="CRC-32"):
        Module.from_bytes(bytes(corrupt))


def test_the_metadata_has_the_seeds_keys():
    image = aot.compile(
        K.linear_relu, target="cpu", constexprs=dict(BM=32, BN=32, BK=16), layouts="contiguous"
    )
    meta = image.metadata
    assert meta["name"] == "linear_relu"
    assert meta["tile"] == {"M": 32, "N": 32, "K": 16}
    assert meta["launch"]["block"] == [64, 1, 1]
    assert meta["epilogue"] == ["+", "max"]


def test_the_library_round_trips_through_ctypes(tmp_path):
    cc = need_cc()
    out = tmp_path / "lib"
    aot.write_c([aot.compile(K.axpy, target="cpu")], out, name="axpymod")
    library = aot.build_library(out, "axpymod")
    assert library.exists()
    shared = tmp_path / "libaxpymod.so"
    link = [*cc.split(), "-shared", "-o", str(shared), "-Wl,--whole-archive", str(library)]
    link += ["-Wl,--no-whole-archive", "-lpthread", "-ldl"]
    done = subprocess.run(link, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lib = c_types.bind(ctypes.CDLL(str(shared)))
    major, minor = ctypes.c_uint32(), ctypes.c_uint32()
    lib.tsrGetVersion(ctypes.byref(major), ctypes.byref(minor))
    assert (major.value, minor.value) == (1, 0)
    ctx, mod, k = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    assert lib.tsrCreateContext(ctypes.byref(ctx)) == 0
    image = c_types.Image.in_dll(lib, "axpymod_image")
    assert image.magic == b"TSRI" and image.nentries == 2  # contiguous and strided
    size = ctypes.sizeof(image)
    assert lib.tsrLoadModule(ctx, ctypes.byref(image), size, ctypes.byref(mod)) == 0
    assert lib.tsrGetKernel(mod, b"axpy", ctypes.byref(k)) == 0
    x = np.arange(10, dtype=np.float32)
    y = np.ones(10, np.float32)
    tx, ty, a = c_types.Tensor.of(x), c_types.Tensor.of(y), ctypes.c_float(2.0)
    args = (ctypes.c_void_p * 3)(*map(ctypes.addressof, (a, tx, ty)))
    launch = c_types.Launch(10, 1, 1)
    assert lib.tsrLaunch(k, None, launch, args, 3) == 0
    assert np.array_equal(y, 2 * np.arange(10, dtype=np.float32) + 1)
    assert lib.tsrLaunch(k, None, launch, args, 2) == 2
    assert b"takes 3 arguments (a, x, y) but 2 were given" in lib.tsrGetLastError()


def test_the_ctypes_mirrors_have_the_c_sizes(tmp_path):
    cc = need_cc()
    (tmp_path / "sizes.c").write_text(
        textwrap.dedent("""
        #include <stdio.h>
        #include "tessera_rt.h"
        int main(void) {
          printf("%zu %zu %zu %zu\\n", sizeof(tsr_tensor_t), sizeof(tsr_launch_t),
                 sizeof(tsr_context_desc_t), sizeof(tsr_image_t));
          return 0;
        }
    """)
    )
    exe = tmp_path / "sizes"
    command = [*cc.split(), f"-I{aot.runtime_dir()}", str(tmp_path / "sizes.c"), "-o", str(exe)]
    assert subprocess.run(command, capture_output=True).returncode == 0
    sizes = [
        int(v) for v in subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()
    ]
    mirrors = (c_types.Tensor, c_types.Launch, c_types.ContextDesc, c_types.Image)
    assert sizes == [ctypes.sizeof(m) for m in mirrors]


def test_the_cmake_file_builds_a_program(tmp_path):
    need_cc()
    cmake = subprocess.run(["cmake", "--version"], capture_output=True)
    if cmake.returncode != 0:
        pytest.skip("no cmake here")
    out = tmp_path / "mod"
    aot.write_c([aot.compile(K.axpy, target="cpu")], out, name="axpymod", cmake=True)
    (tmp_path / "main.c").write_text(
        textwrap.dedent("""
        #include <stdio.h>
        #include "axpymod.h"
        int main(void) {
          tsr_context_t ctx; tsr_module_t mod; tsr_kernel_t k;
          int64_t n = 3;
          float x[3] = {1, 2, 3}, y[3] = {0, 0, 0}, a = 10.0f;
          tsr_tensor_t X = {x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
          tsr_tensor_t Y = {y, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n, NULL, 0};
          void* args[] = {&a, &X, &Y};
          tsr_launch_t launch = {0};
          if (tsrCreateContext(&ctx) || tsrLoadModule(ctx, &axpymod_image,
              sizeof axpymod_image, &mod) || tsrGetKernel(mod, "axpy", &k) ||
              tsrLaunch(k, NULL, launch, args, 3)) { puts(tsrGetLastError()); return 1; }
          printf("%g %g %g\\n", y[0], y[1], y[2]);
          return 0;
        }
    """)
    )
    (tmp_path / "CMakeLists.txt").write_text(
        textwrap.dedent("""
        cmake_minimum_required(VERSION 3.10)
        project(app C)
        add_subdirectory(mod)
        add_executable(app main.c)
        target_link_libraries(app PRIVATE axpymod)
    """)
    )
    build = tmp_path / "build"
    for command in (
        ["cmake", "-S", str(tmp_path), "-B", str(build)],
        ["cmake", "--build", str(build)],
    ):
        done = subprocess.run(command, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run([str(build / "app")], capture_output=True, text=True)
    assert done.stdout.strip() == "10 20 30", done.stdout + done.stderr


def test_a_group_shape_named_by_a_constexpr_is_fixed_by_constexprs():
    @kernel(tile=("BLOCK",))
    def fill(x: mut[f32[n]], BLOCK: ts.constexpr):
        i = ts.group_linear_id() * BLOCK + tile.linear_id()
        if i < n:
            x[i] = 2.0

    image = aot.compile(fill, target="cpu", constexprs={"BLOCK": 32}, layouts="contiguous")
    assert image.tile == (32, 1, 1) and [p.name for p in image.params] == ["x"]
    with pytest.raises(AOTError, match="must be a positive int"):
        aot.compile(fill, target="cpu", layouts="contiguous")
