"""An image's CUDA code: a cubin (and on request PTX) per architecture (ABI.md §4).

Each cubin is made by the CUDA target's own path (numba-cuda → NVVM → nvJitLink, no GPU
needed) for the architecture named, with the code that architecture gets at a Python
launch (sm_80 and newer: async copies and tensor cores; the staging ring's depth of the
arch). **The entry symbol and the parameter slots are read from the same compile that
produced the blob**: numba-cuda's mangled names carry a per-compile counter, so a name
from another compile would be absent from the cubin. Both are checked: the symbol is in
the cubin's ELF symbol table, and the slots are as many as the PTX ``.param`` list.
"""

from __future__ import annotations

import re

from ..errors import AOTError, TesseraError
from ..kernel.targets import TARGETS
from ..kernel.targets.cuda import abi as cuda_abi
from ..kernel.targets.cuda import shared_memory
from ..kernel.targets.cuda.launcher import storage_dtype
from ..kernel.targets.cuda.program import (
    CudaProgram,
    ampere_for,
    capability_for,
    fp8_for,
    parse_arch,
    stages_for,
)
from ..kernel.targets.cuda.runtime import cuda_module, simulating
from . import elf
from .argtypes import numba_argtypes
from .image_format import Blob, Spec

# numba-cuda's scalar kinds (targets/cuda/abi.py SCALARS) → the image's slot kinds
_SLOT_OF_SCALAR = {
    "int8": "i8",
    "uint8": "i8",
    "bool": "b1",
    "int16": "i16",
    "uint16": "i16",
    "float16": "i16",
    "int32": "i32",
    "uint32": "i32",
    "float32": "f32",
    "int64": "i64",
    "uint64": "i64",
    "float64": "f64",
}


def slot_kinds(argtypes) -> tuple[str, ...]:
    """The image's slot kinds of a CUDA kernel whose numba signature is ``argtypes``."""
    _, slots = cuda_abi.arg_layouts(argtypes)
    kinds = []
    for s in slots:
        if not s.kind:  # an array's words: three pointers, the rest 64-bit integers
            part = s.name.rsplit(".", 1)[-1]
            kinds.append("ptr" if part in ("meminfo", "parent", "data") else "i64")
        else:
            kinds.append(_SLOT_OF_SCALAR[s.kind])
    return tuple(kinds)


def archs_of(name: str, arch) -> list[str]:
    """``arch=`` as a list of checked architecture names (None: this machine's GPU's)."""
    if arch is None:
        found = CudaProgram.device_arch()
        try:
            cuda_module().get_current_device()
        except Exception:  # no GPU to ask
            raise AOTError(
                name,
                'target="cuda" with no GPU here to take the architecture from: pass '
                'arch=, e.g. arch=["sm_80", "sm_90"]',
            ) from None
        return [found]
    archs = [arch] if isinstance(arch, str) else list(arch)
    if not archs:
        raise AOTError(name, "arch= names no architecture")
    for a in archs:
        try:
            major, _ = parse_arch(a)
        except TesseraError:
            raise AOTError(name, f"arch {a!r} is not a CUDA architecture such as 'sm_80'") from None
        if major < 7 or not re.fullmatch(r"sm_\d+a?", a):
            raise AOTError(name, f"arch {a!r}: Tessera's CUDA code needs sm_70 or newer")
    return archs


def compile_cuda(k, spec, params, image, layouts, digest: str, arch, ptx: bool) -> None:
    """Fill ``image`` with the cubins (and PTX) of every arch and layout class."""
    del digest  # CUDA entry names are numba-cuda's, read from each compile

    if simulating():
        raise AOTError(
            k.name,
            'target="cuda" under numba-cuda\'s simulator (NUMBA_ENABLE_CUDASIM=1) '
            "compiles nothing: run without it (no GPU is needed to make cubins)",
        )
    target = TARGETS["cuda"]
    for a in archs_of(k.name, arch):
        ampere = ampere_for(a)
        program = CudaProgram(spec, image.grid_rank, target, ampere, stages_for(a), fp8=fp8_for(a))
        shared_memory.check(
            spec.kir, program.shared_arrays, shared_memory.limit_for(capability_for(a)), a
        )
        aligned = tuple(program._align_positions())
        for layout in layouts:
            import numba

            argtypes = numba_argtypes(
                params, k, layout, image.grid_rank, lambda d: storage_dtype(d.np_dtype)
            )
            signature = argtypes + (numba.boolean,) * len(aligned)
            codes, cubin, log = program.build(signature, a)
            text = codes[0] if isinstance(codes[0], str) else ""
            entry = cuda_abi.entry_name(text)
            if entry not in elf.defined_globals(cubin):
                raise AOTError(k.name, f"the cubin for {a} does not define its entry {entry}")
            kinds = slot_kinds(signature)
            if len(kinds) != len(cuda_abi.ptx_params(text)):
                raise AOTError(
                    k.name,
                    f"{len(kinds)} parameter slots for {len(cuda_abi.ptx_params(text))} "
                    "PTX .params: this numba-cuda changed its kernel ABI",
                )
            slots = kinds[: len(kinds) - len(aligned)]
            common = dict(
                threads=program.threads, align=aligned, shared=program.dynamic_shared_bytes
            )
            image.specs.append(
                Spec("cuda", layout, a, entry, slots, blob=len(image.blobs), **common)
            )
            image.blobs.append(Blob(a, "cubin", cubin))
            if ptx:
                image.specs.append(
                    Spec("cuda", layout, a, entry, slots, blob=len(image.blobs), **common)
                )
                image.blobs.append(Blob(a, "ptx", text.encode() + b"\0"))
            if not image.metadata:  # k.metadata()'s, for any launch
                image.metadata = program.describe(log, a, None)
