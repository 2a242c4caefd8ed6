"""Ahead-of-time CUDA images without a GPU (ABI.md §4, §6.5): cubins per architecture
whose entry symbols and parameter slots come from the compile that made them, and the C
runtime's CUDA path run against a recording stand-in for the driver (tests/c/fake_cuda.c:
it counts and records calls, runs nothing) loaded through TSR_CUDA_LIBRARY."""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path

import aot_kernels as K
import pytest
from aot_build import HERE, need_cc, run_cc, runtime_object

from tessera import aot
from tessera.aot import elf
from tessera.aot.image_format import Module
from tessera.errors import AOTError
from tessera.kernel.targets.cuda import abi

pytest.importorskip("numba.cuda")
pytestmark = pytest.mark.skipif(
    os.environ.get("NUMBA_ENABLE_CUDASIM") == "1",
    reason="AOT makes real cubins; numba-cuda's simulator compiles nothing",
)
GEMM = dict(BM=64, BN=128, BK=32)  # the f32 register main loop: 4 warps, a 4-stage ring


@functools.cache
def images():
    block_sum = aot.compile(K.block_sum, target="cuda", arch=["sm_80", "sm_90"], ptx=True)
    gemm = aot.compile(K.linear_relu, target="cuda", arch="sm_90", constexprs=GEMM)
    return block_sum, gemm


@functools.cache
def built() -> tuple[Path, Path]:
    """(the C program, the fake driver), built against module ``cudamod``."""
    cc = need_cc()
    out = Path(tempfile.mkdtemp(prefix="tessera-aot-cuda-"))
    aot.write_c(list(images()), out, name="cudamod")
    exe = out / "cuda_launch"
    run_cc(
        [
            *cc.split(),
            "-std=c99",
            "-O2",
            "-Wall",
            "-Werror",
            f"-I{out}",
            str(HERE / "c" / "cuda_launch.c"),
            str(out / "cudamod.c"),
            str(runtime_object()),
            "-o",
            str(exe),
            "-lpthread",
            "-ldl",
        ]
    )
    fake = out / "libfakecuda.so"
    run_cc(
        [
            *cc.split(),
            "-std=c99",
            "-D_POSIX_C_SOURCE=200809L",
            "-O1",
            "-shared",
            "-fPIC",
            str(HERE / "c" / "fake_cuda.c"),
            "-o",
            str(fake),
        ]
    )
    return exe, fake


def run(cc: int = 90, library: str | None = None, nparams: int = 19, busy: bool = False):
    """(the program's output, the calls the fake driver recorded); ``busy``: the stream's
    work never finishes."""
    exe, fake = built()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "calls.log"
        env = dict(
            os.environ,
            TSR_CUDA_LIBRARY=library or str(fake),
            FAKE_CUDA_LOG=str(log),
            FAKE_CUDA_CC=str(cc),
            FAKE_CUDA_NPARAMS=str(nparams),
        )
        if busy:
            env["FAKE_CUDA_BUSY"] = "1"
        done = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=60)
        calls = log.read_text().splitlines() if log.exists() else []
    return done.stdout, calls


def entries(image, arch: str, kind: str = "cubin") -> dict[str, str]:
    return {
        s.layout: s.entry
        for s in image.specs
        if s.arch == arch and image.blobs[s.blob].kind == kind
    }


def test_each_entry_symbol_is_in_its_cubin():
    for image in images():
        for spec in image.specs:
            blob = image.blobs[spec.blob]
            if blob.kind == "cubin":
                assert spec.entry in elf.defined_globals(blob.data)


def test_the_slots_are_the_ptx_param_list():
    block_sum, _ = images()
    for spec in block_sum.specs:
        blob = block_sum.blobs[spec.blob]
        if blob.kind == "ptx":
            params = abi.ptx_params(blob.data.decode().rstrip("\0"))
            assert len(spec.slots) + len(spec.align) == len(params)
            assert len(spec.slots) == 19  # x, partial: 7 each; n, grid_groups; 3 grid dims


def test_an_image_holds_cpu_and_cuda_code_of_one_kernel(tmp_path):
    cpu = aot.compile(K.block_sum, target="cpu", layouts="contiguous")
    path = aot.save([cpu, images()[0]], tmp_path / "both.tsrm")
    module = Module.from_bytes(path.read_bytes())
    (kernel,) = module.kernels
    assert {s.target for s in kernel.specs} == {"cpu", "cuda"}
    assert {b.kind for b in module.blobs} == {"cubin", "ptx"}


def test_an_unknown_arch_is_an_aot_error():
    with pytest.raises(AOTError, match="not a CUDA architecture"):
        aot.compile(K.axpy, target="cuda", arch="ampere")


def test_the_runtime_loads_the_exact_cubin_and_launches_with_the_kernels_slots():
    out, calls = run(cc=90)
    assert "tsrLaunch(sum, stream, launch, args, 2) 0" in out, out
    block_sum, gemm = images()
    names = entries(block_sum, "sm_90")
    assert f"cuModuleGetFunction {names['contiguous']}" in calls
    assert calls.count("cuModuleLoadData cubin") == 4  # 2 layouts x 2 kernels
    x, partial = (int(v, 16) for v in out.split("x ")[1].split("\n")[0].split(" partial "))
    launch = next(c for c in calls if c.startswith(f"cuLaunchKernel {names['contiguous']}"))
    head, params = launch.split(" params ")
    shared = next(s.shared for s in block_sum.specs if s.arch == "sm_90")
    assert head.endswith(f"grid 4 1 1 block 256 1 1 shared {shared} stream own")
    values = [int(v, 16) for v in params.split()]
    # x: meminfo, parent, nitems, itemsize, data, shape, stride; partial; n, grid_groups; grid
    assert values == [0, 0, 1000, 4, x, 1000, 4, 0, 0, 4, 4, partial, 4, 4, 1000, 4, 4, 1, 1]


def test_shared_memory_over_48_kib_is_opted_in_once():
    out, calls = run(cc=90)
    _, gemm = images()
    (spec,) = [s for s in gemm.specs if s.layout == "contiguous"]
    assert spec.shared > 48 * 1024
    optins = [c for c in calls if c.startswith("cuFuncSetAttribute")]
    assert optins == [f"cuFuncSetAttribute {spec.entry} 8 {spec.shared}"]
    launches = [c for c in calls if c.startswith(f"cuLaunchKernel {spec.entry}")]
    assert len(launches) == 2
    assert f"grid 6 1 1 block 128 1 1 shared {spec.shared} stream default" in launches[0]


def test_a_gpu_of_a_newer_minor_takes_the_cubin_of_its_major():
    out, calls = run(cc=86)
    names = entries(images()[0], "sm_80")
    assert f"cuModuleGetFunction {names['contiguous']}" in calls


def test_a_gpu_of_a_newer_major_jit_compiles_the_ptx():
    out, calls = run(cc=100)
    assert "cuModuleLoadData ptx" in calls


def test_a_gpu_older_than_every_blob_is_edevice():
    out, _ = run(cc=75)
    assert "tsrLoadModule(ctx, &cudamod_image, sizeof cudamod_image, &mod) 6" in out
    assert "no cubin for sm_75 and no PTX in cudamod" in out


def test_a_missing_driver_is_edevice_with_the_dlopen_error():
    out, _ = run(library="/nonexistent/libcuda.so.1")
    assert "tsrCreateContextEx(&desc, &ctx) 6 cannot load the CUDA driver: " in out
    assert "/nonexistent/libcuda.so.1" in out


def test_a_host_tensor_on_a_gpu_context_is_einval():
    out, _ = run(cc=90)
    assert (
        "host tensor on a GPU context 2 launch of kernel 'block_sum': parameter 'x' is in "
        "memory of device type 1" in out
    )


def test_a_stream_that_does_not_finish_by_its_deadline_is_etimeout():
    out, _ = run(cc=90, busy=True)
    assert (
        "tsrStreamSynchronize(stream, 1000) 3 tsrStreamSynchronize: the stream's work did "
        "not finish in 1000 ms" in out
    )


def test_the_images_metadata_is_what_k_metadata_reports():
    import numpy as np

    _, gemm = images()
    a, b = np.zeros((100, 72), np.float32), np.zeros((72, 150), np.float32)
    args = (a, b, np.zeros(150, np.float32), np.zeros((100, 150), np.float32), *GEMM.values())
    meta = K.linear_relu.metadata(*args, grid=(2, 3), arch="sm_90")
    for key in ("name", "arch", "group", "tile", "epilogue", "occupancy"):
        assert gemm.metadata[key] == meta[key], key
    # registers aside: the image holds both steady loops and chooses at run time, a launch
    # from Python compiles the one its arrays allow (B's 600-byte rows: the general one)
    image, launch = gemm.metadata["resources"], meta["resources"]
    assert image["smem_per_cta"] == launch["smem_per_cta"] and image["spill_bytes"] == 0
    assert launch["spill_bytes"] == 0 and 0 < launch["regs_per_thread"] <= 255
    assert meta["tile"] == {"M": 64, "N": 128, "K": 32, "stages": 4}  # the f32 main loop's ring
    assert gemm.metadata["grid"] == "per launch" and meta["grid"] == [2, 3]
