"""``aot.write_c`` and ``aot.save``: images → a module a C program loads (ABI.md §1, §4).

``write_c`` writes, for module ``name``: ``<name>.h`` (declares ``<name>_image``),
``<name>.c`` (the serialized module as bytes, the table of CPU entry points and one small
shim per entry that passes the runtime's slots to the compiled function), ``<name>_cpu.o``
(the CPU code of every kernel, linked into one object) and the runtime's sources
(``tessera_rt.h``, ``tessera_rt.c`` and the ``.inc`` files it includes, ``dlpack.h``);
with ``cmake=True`` a ``CMakeLists.txt`` as well. ``build_library`` compiles them into
``lib<name>.a`` with the C compiler (``$CC``, else ``cc``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import AOTError, TesseraError
from ..version import __version__
from . import cpu_object, elf
from .build import Image
from .image_format import Blob, KernelEntry, Module

RUNTIME_FILES = (
    "tessera_rt.h",
    "tessera_rt.c",
    "tessera_rt_module.inc",
    "tessera_rt_launch.inc",
    "tessera_rt_cuda.inc",
    "dlpack.h",
)
_C_TYPES = {
    "ptr": ("void*", "p"),
    "i64": ("int64_t", "i64"),
    "i32": ("int32_t", "i32"),
    "i16": ("int16_t", "i16"),
    "i8": ("int8_t", "i8"),
    "b1": ("_Bool", "b1"),
    "f32": ("float", "f32"),
    "f64": ("double", "f64"),
}


def runtime_dir() -> Path:
    """Where the C runtime's sources are (package data; built by the user's compiler)."""
    return Path(__file__).parent / "runtime"


def versions() -> str:
    import llvmlite
    import numba

    return f"tessera {__version__}; numba {numba.__version__}; llvmlite {llvmlite.__version__}"


def module_of(images, name: str) -> tuple[Module, list[bytes]]:
    """The module of ``images`` (one kernel entry per kernel name, its CPU and CUDA code
    together) and the CPU bitcode of its entries, in entry-table order."""
    if isinstance(images, Image):
        images = [images]
    if not images:
        raise TesseraError("aot: no images to put in a module")
    kernels: dict[str, KernelEntry] = {}
    blobs: list[Blob] = []
    bitcode: list[bytes] = []
    for image in images:
        if not isinstance(image, Image):
            raise TesseraError(f"aot: {image!r} is not an image made by tessera.aot.compile")
        entry = kernels.get(image.kernel)
        if entry is None:
            entry = kernels[image.kernel] = KernelEntry(
                image.kernel,
                image.grouped,
                image.grid_rank,
                image.tile,
                image.params,
                image.symbols,
                image.metadata,
                [],
                image.static_shared,
                image.dynamic_arg,
                image.dynamic_itemsize,
            )
        elif (entry.params, entry.grid_rank, entry.tile) != (
            image.params,
            image.grid_rank,
            image.tile,
        ):
            raise AOTError(
                image.kernel,
                "two images of this kernel differ in their parameters, grid or "
                "tile= (compiled from different constexprs?): a module holds one signature "
                "per kernel name",
            )
        elif image.target == "cuda" or not entry.metadata:
            entry.metadata = image.metadata
        for spec in image.specs:
            if spec.target == "cpu":
                code = image.cpu_code[spec.entry_index]
                spec = dataclasses.replace(spec, entry_index=len(bitcode))
                bitcode.append(code)
            else:
                blob = image.blobs[spec.blob]
                spec = dataclasses.replace(spec, blob=len(blobs))
                blobs.append(blob)
            entry.specs.append(spec)
    return Module(name, versions(), list(kernels.values()), blobs), bitcode


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name or ""):
        raise TesseraError(
            f"aot: module name {name!r} must be a C identifier (it names <name>_image)"
        )


def save(images, path, name: str | None = None) -> Path:
    """Write the serialized module of ``images`` (``.tsrm``) to ``path``. It holds CUDA
    code whole; CPU code is linked, not loaded, so a C program loads CPU kernels from
    ``write_c``'s files instead (a CPU context refuses a serialized image)."""
    path = Path(path)
    name = name or re.sub(r"\W", "_", path.stem) or "module"
    _check_name(name)
    module, _ = module_of(images, name)
    path.write_bytes(module.to_bytes())
    return path


def write_c(images, outdir, name: str, cmake: bool = False, cpu: str | None = None) -> list[Path]:
    """Write module ``name`` of ``images`` and the runtime's sources into ``outdir``;
    returns the paths written. ``cpu``: the LLVM CPU the object code is made for (default:
    this machine's, as a Python launch's code is)."""
    _check_name(name)
    out = Path(outdir)
    out.mkdir(parents=True, exist_ok=True)
    module, bitcode = module_of(images, name)
    written = []
    cpu_specs = [(k, s) for k in module.kernels for s in k.specs if s.target == "cpu"]
    if bitcode:
        code = cpu_object.object_code(bitcode, cpu)
        extra = sorted(set(elf.undefined(code)) - cpu_object.ALLOWED)
        if extra:  # what LLVM's code generator added (the IR was checked already)
            kernel = ", ".join(k.name for k in module.kernels)
            raise cpu_object.unsupported(kernel, extra, None)
        written.append(_write(out / f"{name}_cpu.o", code))
    data = module.to_bytes()
    written.append(_write(out / f"{name}.h", _header(name, module).encode()))
    written.append(_write(out / f"{name}.c", _source(name, module, cpu_specs, data).encode()))
    for file in RUNTIME_FILES:
        written.append(Path(shutil.copyfile(runtime_dir() / file, out / file)))
    if cmake:
        written.append(_write(out / "CMakeLists.txt", _cmake(name, bool(bitcode)).encode()))
    return written


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _signature(k: KernelEntry) -> str:
    parts = []
    for p in k.params:
        dims = ", ".join(str(d) for d in p.dims)
        text = f"{p.dtype}[{dims}]" if p.kind == "array" else p.dtype
        parts.append(f"{p.name}: {'mut[' + text + ']' if p.mutable else text}")
    return f"{k.name}({', '.join(parts)})"


def _header(name: str, module: Module) -> str:
    guard = f"{name.upper()}_TESSERA_MODULE_H"
    kernels = "\n".join(f" *   {_signature(k)}" for k in module.kernels)
    return f"""/* {name}.h: Tessera module {name}, written by tessera.aot.write_c.
 *
 * Kernels (tsrLaunch's args[i] is parameter i; constexprs are fixed in the module):
{kernels}
 *
 * Load it with tsrLoadModule(ctx, &{name}_image, sizeof {name}_image, &mod).
 */
#ifndef {guard}
#define {guard}

#include "tessera_rt.h"

#ifdef __cplusplus
extern "C" {{
#endif

extern const tsr_image_t {name}_image;

#ifdef __cplusplus
}}
#endif
#endif /* {guard} */
"""


def _source(name: str, module: Module, cpu_specs, data: bytes) -> str:
    lines = [
        f"/* {name}.c: Tessera module {name} (written by tessera.aot.write_c; do not edit). */",
        f'#include "{name}.h"',
        "",
    ]
    shims = []
    for k, spec in sorted(cpu_specs, key=lambda ks: ks[1].entry_index):
        types = ["void*", "void*", "int64_t"]
        types += [_C_TYPES[kind][0] for kind in spec.slots] + ["int64_t"]
        lines.append(f"extern int32_t {spec.entry}({', '.join(types)});")
        values = ", ".join(f"s[{i}].{_C_TYPES[kind][1]}" for i, kind in enumerate(spec.slots))
        shim = f"shim_{spec.entry_index}"
        shims.append(shim)
        lines += [
            f"/* {k.name}, {spec.layout} arrays */",
            f"static int32_t {shim}(const tsr_slot_t* s, int64_t c, int64_t n) {{",
            "  void* ret = 0;",
            "  void* exc = 0;",
            f"  return {spec.entry}(&ret, &exc, c{', ' if values else ''}{values}, n);",
            "}",
            "",
        ]
    if shims:
        lines.append(f"static const tsr_cpu_entry_t entries[] = {{{', '.join(shims)}}};")
    lines.append(f"static const unsigned char module_bytes[{len(data)}] = {{")
    for at in range(0, len(data), 16):
        lines.append("  " + ", ".join(f"0x{b:02x}" for b in data[at : at + 16]) + ",")
    lines.append("};")
    table = "entries" if shims else "0"
    lines += [
        f"const tsr_image_t {name}_image = {{{{'T', 'S', 'R', 'I'}}, TSR_ABI_MAJOR, module_bytes,",
        f"                                  sizeof module_bytes, {table}, {len(shims)}}};",
        "",
    ]
    return "\n".join(lines)


def _cmake(name: str, has_cpu: bool) -> str:
    objects = f" {name}_cpu.o" if has_cpu else ""
    return f"""# Tessera module {name} and the runtime, as a static library (tessera.aot.write_c).
cmake_minimum_required(VERSION 3.10)
project({name} C)
find_package(Threads REQUIRED)
add_library({name} STATIC tessera_rt.c {name}.c{objects})
set_target_properties({name} PROPERTIES C_STANDARD 99 POSITION_INDEPENDENT_CODE ON)
target_include_directories({name} PUBLIC ${{CMAKE_CURRENT_SOURCE_DIR}})
target_link_libraries({name} PUBLIC Threads::Threads ${{CMAKE_DL_LIBS}} m)
"""


def compiler() -> str | None:
    """The C compiler: ``$CC``, else ``cc`` on the PATH (None: there is none)."""
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc.split()[0]) and cc


def build_library(outdir, name: str) -> Path:
    """Compile ``write_c``'s files in ``outdir`` into ``lib<name>.a`` (the runtime, the
    module and its CPU object) with the C compiler; returns the library's path."""
    out = Path(outdir)
    cc = compiler()
    if cc is None:
        raise TesseraError("aot: no C compiler (set CC, or install cc) to build the library")
    ar = shutil.which("ar")
    if ar is None:
        raise TesseraError("aot: no 'ar' on the PATH to make a static library")
    with tempfile.TemporaryDirectory() as tmp:
        objects = []
        for source in ("tessera_rt.c", f"{name}.c"):
            obj = Path(tmp) / (Path(source).stem + ".o")
            _run([*cc.split(), "-std=c99", "-O2", "-fPIC", "-c", str(out / source), "-o", str(obj)])
            objects.append(str(obj))
        cpu = out / f"{name}_cpu.o"
        if cpu.exists():
            objects.append(str(cpu))
        library = out / f"lib{name}.a"
        library.unlink(missing_ok=True)
        _run([ar, "rcs", str(library), *objects])
    return library


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise TesseraError(f"aot: {' '.join(command)} failed:\n{done.stderr.strip()}")
