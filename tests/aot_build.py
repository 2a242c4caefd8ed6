"""Builds the ahead-of-time test module and C programs (tests/test_aot_*.py).

One module, ``testmod``, holds the kernels of aot_kernels.py compiled for the CPU; the C
programs in tests/c/ are compiled against it with the system C compiler (``$CC`` or
``cc``) and run as subprocesses. Everything is built once per test session.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from tessera import aot
from tessera.aot.c_files import compiler

HERE = Path(__file__).parent
GEMM_BLOCKS = dict(BM=32, BN=32, BK=16)
KERNELS = ("block_sum", "axpy", "scale_half", "empty", "tile_linear_bf16")


def need_cc() -> str:
    cc = compiler()
    if cc is None:
        pytest.skip("no C compiler ($CC or cc): the C runtime's tests need one")
    return cc


@functools.cache
def build_dir() -> Path:
    """The module's files, written once: ``testmod.h``, ``testmod.c``, ``testmod_cpu.o``."""
    import aot_kernels as K

    images = [aot.compile(getattr(K, name), target="cpu") for name in KERNELS]
    images.append(aot.compile(K.linear_relu, target="cpu", constexprs=GEMM_BLOCKS))
    out = Path(tempfile.mkdtemp(prefix="tessera-aot-"))
    aot.write_c(images, out, name="testmod", cmake=True)
    return out


@functools.cache
def program(source: str) -> Path:
    """tests/c/<source> compiled and linked with the module and the runtime."""
    return module_program(source, build_dir(), "testmod")


def module_program(source: str, out: Path, module: str) -> Path:
    """tests/c/<source> linked with module ``module`` written in ``out`` (its CPU object
    when it has one) and the runtime; ``MODULE_HEADER``/``MODULE_IMAGE`` name the module."""
    cc = need_cc()
    exe = out / f"{Path(source).stem}_{module}"
    cpu = out / f"{module}_cpu.o"
    run_cc(
        [
            *cc.split(),
            "-std=c99",
            "-O2",
            "-Wall",
            "-Werror",
            f"-I{out}",
            f'-DMODULE_HEADER="{module}.h"',
            f"-DMODULE_IMAGE={module}_image",
            str(HERE / "c" / source),
            str(out / f"{module}.c"),
            str(runtime_object()),
            *([str(cpu)] if cpu.exists() else []),
            "-o",
            str(exe),
            "-lpthread",
            "-ldl",
            "-lm",
        ]
    )
    return exe


@functools.cache
def runtime_object() -> Path:
    cc = need_cc()
    out = build_dir()
    obj = out / "tessera_rt.o"
    run_cc(
        [
            *cc.split(),
            "-std=c99",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-c",
            str(out / "tessera_rt.c"),
            "-o",
            str(obj),
        ]
    )
    return obj


def run_cc(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr}"


class Launch:
    """One run of tests/c/launch.c: its status, message and the arrays after it."""

    def __init__(self, status: int, message: str, arrays: list[np.ndarray]):
        self.status, self.message, self.arrays = status, message, arrays
        self.us_per_launch: float | None = None  # with --time N


def launch(
    kernel: str,
    args: list,
    grid=(1, 1, 1),
    block=(0, 0, 0),
    threads: int = 2,
    options: tuple = (),
    exe: Path | None = None,
) -> Launch:
    """Launch ``kernel`` of testmod from C. ``args``: NumPy arrays (passed as tensors, with
    their strides; written back after the launch), ``("f32", 2.0)`` style scalars, or
    None (a NULL argument)."""
    exe = exe or program("launch.c")
    work = Path(tempfile.mkdtemp(prefix="tessera-aot-run-", dir=build_dir()))
    texts, arrays = [], []
    for k, a in enumerate(args):
        if a is None:
            texts.append("null")
        elif isinstance(a, np.ndarray):
            path = work / f"a{k}.bin"
            text = dl_type(a.dtype)
            if a.flags.c_contiguous:
                path.write_bytes(a.tobytes())
                dims = "x".join(str(d) for d in a.shape) or "-"
                texts.append(f"t:{text}:{path}:{dims}")
            else:  # a strided view: pass its base's memory and the view's strides
                path.write_bytes(np.ascontiguousarray(a.base).tobytes())
                offset = a.__array_interface__["data"][0] - a.base.__array_interface__["data"][0]
                assert offset == 0, "strided test views start at their base's first element"
                dims = "x".join(str(d) for d in a.shape)
                strides = "x".join(str(s // a.itemsize) for s in a.strides)
                texts.append(f"t:{text}:{path}:{dims}:{strides}")
            arrays.append((k, a, path))
        else:
            kind, value = a
            texts.append(f"{kind}:{value}")
    command = [str(exe), *options, kernel, str(threads), *map(str, grid), *map(str, block), *texts]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
    lines = done.stdout.split("\n")
    status = int(lines[0].split()[1])
    timing = [line for line in lines if line.startswith("us_per_launch")]
    out = []
    for _k, a, path in arrays:
        data = np.frombuffer(path.read_bytes(), a.dtype)
        if a.flags.c_contiguous:
            out.append(data.reshape(a.shape).copy())
        else:
            out.append(data.reshape(a.base.shape).copy())
    run = Launch(status, lines[1] if len(lines) > 1 else "", out)
    run.us_per_launch = float(timing[0].split()[1]) if timing else None
    return run


def dl_type(dtype: np.dtype) -> str:
    """DLPack's "code:bits" of a NumPy dtype (bfloat16 from ml_dtypes too)."""
    if dtype.name == "bfloat16":
        return "4:16"
    if dtype == np.bool_:
        return "6:8"
    code = {"i": 0, "u": 1, "f": 2}[dtype.kind]
    return f"{code}:{dtype.itemsize * 8}"


def env_threads() -> int:
    return max(os.cpu_count() or 2, 2)
