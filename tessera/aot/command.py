"""``tessera aot``: compile kernels of a script ahead of time into a C module (ABI.md §1).

::

    tessera aot kernels.py:block_sum kernels.py:gemm --target cpu --target cuda:sm_80,sm_90 \\
        --constexpr BM=64 -o build/ [--name blocksum] [--lib] [--cmake] [--metadata] [--ptx]

Each ``FILE:KERNEL`` is a ``@kernel`` (or autotuned kernel) defined at the top level of a
Python file, which is imported (its ``if __name__ == "__main__"`` part does not run).
``--constexpr NAME=VALUE`` (a Python literal, else a string) and ``--dtype NAME=DTYPE``
apply to every kernel that takes NAME. ``--lib`` builds ``lib<name>.a`` with ``$CC`` or
``cc``; ``--metadata`` writes ``<name>.yaml``, the kernels' metadata (seed 004 §11.2).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import sys
from pathlib import Path

from .. import dtypes as D
from ..errors import TesseraError
from .build import compile as compile_kernel
from .c_files import build_library, write_c


def add_parser(sub) -> None:
    p = sub.add_parser(
        "aot", help="compile kernels ahead of time into a C module (docs/embedding.md)"
    )
    p.add_argument("kernels", nargs="+", metavar="FILE:KERNEL", help="kernels to compile")
    p.add_argument(
        "--target",
        action="append",
        required=True,
        metavar="T",
        help="cpu, or cuda:sm_80,sm_90 (repeat for both)",
    )
    p.add_argument("-o", "--output", required=True, metavar="DIR", help="where to write")
    p.add_argument("--name", help="the module's name (default: the first kernel's)")
    p.add_argument("--constexpr", action="append", default=[], metavar="NAME=VALUE")
    p.add_argument("--dtype", action="append", default=[], metavar="NAME=DTYPE")
    p.add_argument(
        "--layout",
        action="append",
        choices=("contiguous", "strided"),
        help="the layout classes to compile (default: both)",
    )
    p.add_argument("--ptx", action="store_true", help="add PTX to the cubins")
    p.add_argument("--lib", action="store_true", help="build lib<name>.a with $CC or cc")
    p.add_argument("--cmake", action="store_true", help="write a CMakeLists.txt")
    p.add_argument("--metadata", action="store_true", help="write <name>.yaml")


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except TesseraError as exc:
        print(f"tessera aot: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    constexprs = dict(_pair(text, _literal) for text in args.constexpr)
    dtypes = dict(_pair(text, _dtype) for text in args.dtype)
    layouts = tuple(args.layout) if args.layout else ("contiguous", "strided")
    images = []
    for text in args.kernels:
        kernel = load_kernel(text)
        names = {p.name for p in getattr(kernel, "params", ())}
        mine = {k: v for k, v in constexprs.items() if k in names}
        types = {k: v for k, v in dtypes.items() if k in names}
        for target in args.target:
            kind, _, archs = target.partition(":")
            arch = archs.split(",") if archs else None
            images.append(
                compile_kernel(
                    kernel,
                    target=kind,
                    arch=arch,
                    ptx=args.ptx,
                    constexprs=mine,
                    dtypes=types,
                    layouts=layouts,
                )
            )
    name = args.name or images[0].kernel
    written = write_c(images, args.output, name, cmake=args.cmake)
    if args.metadata:
        text = "".join(yaml_document(image.metadata) for image in images)
        written.append(Path(args.output) / f"{name}.yaml")
        written[-1].write_text(text)
    if args.lib:
        written.append(build_library(args.output, name))
    for path in written:
        print(path)
    return 0


def load_kernel(text: str):
    """The kernel ``FILE:NAME`` names (its file imported as a module)."""
    file, _, name = text.rpartition(":")
    if not file or not name:
        raise TesseraError(f"{text!r}: name a kernel as FILE:KERNEL (kernels.py:block_sum)")
    path = Path(file)
    if not path.is_file():
        raise TesseraError(f"{text!r}: there is no file {file}")
    sys.path.insert(0, str(path.resolve().parent))
    try:
        spec = importlib.util.spec_from_file_location(f"tessera_aot_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.pop(0)
    kernel = getattr(module, name, None)
    if kernel is None or not hasattr(kernel, "params"):
        raise TesseraError(f"{text!r}: {file} defines no kernel named {name}")
    return kernel


def _pair(text: str, convert) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key.isidentifier():
        raise TesseraError(f"{text!r}: write NAME=VALUE")
    return key, convert(value)


def _literal(value: str) -> object:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def _dtype(value: str):
    dtype = D.BY_NAME.get(value)
    if dtype is None:
        raise TesseraError(f"{value!r} is not a Tessera dtype (f16, bf16, f32, i32, ...)")
    return dtype


def yaml_document(meta: dict) -> str:
    """``meta`` as a YAML document, nested values in flow style (seed 004 §11.2's look)."""
    lines = ["---"]
    for key, value in meta.items():
        lines.append(f"{key}: {_flow(value)}")
    return "\n".join(lines) + "\n"


def _flow(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    plain = text.replace("_", "").replace(" ", "").isalnum() and text not in ("yes", "no")
    return text if plain else '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
