"""The argument ABI of a compiled CUDA kernel: which ``.param`` slots a launch fills.

numba-cuda passes each kernel argument as one or more PTX parameters (its
``_Kernel._prepare_args``); the direct launcher (launcher.py) writes the same slots itself.
The table below is the whole ABI, as data:

* an array of ``ndim`` dims is ``5 + 2 * ndim`` parameters of 8 bytes: ``meminfo`` (0),
  ``parent`` (0), ``nitems``, ``itemsize``, ``data`` (the device pointer), ``shape[0..]``,
  ``strides[0..]`` (in bytes);
* a scalar is one parameter of its own C type (booleans one byte, f16 its 16 bits); a
  complex scalar two, its real and imaginary parts.

:func:`ptx_params` reads the ``.param`` list of a PTX ``.entry``, so a test can check every
slot's width and type against what NVVM made of the signature; a numba-cuda release that
changed the ABI fails that test, not a user's launch.
"""

from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

ARRAY_FIXED = ("meminfo", "parent", "nitems", "itemsize", "data")

# numba scalar type name → (PTX parameter type, bytes, NumPy dtype the slot holds); NVVM
# declares integer parameters unsigned whatever their sign
SCALARS = {
    "int8": ("u8", 1, np.int8),
    "int16": ("u16", 2, np.int16),
    "int32": ("u32", 4, np.int32),
    "int64": ("u64", 8, np.int64),
    "uint8": ("u8", 1, np.uint8),
    "uint16": ("u16", 2, np.uint16),
    "uint32": ("u32", 4, np.uint32),
    "uint64": ("u64", 8, np.uint64),
    "bool": ("u8", 1, np.uint8),
    "float16": ("b16", 2, np.uint16),  # its bits
    "float32": ("f32", 4, np.float32),
    "float64": ("f64", 8, np.float64),
}
# a complex scalar is two parameters: its real and imaginary parts
COMPLEX = {"complex64": "float32", "complex128": "float64"}


class Slot(NamedTuple):
    """One PTX parameter: what it holds (``"x.data"``, ``"a"``), its bytes and PTX type;
    ``kind`` is the SCALARS key of a scalar ("" for an array's words)."""

    name: str
    size: int
    ptx: str
    kind: str = ""


class ArgLayout(NamedTuple):
    """Where one argument's slots start, and what kind of argument it is."""

    first: int  # index of its first slot
    kind: str  # "array" or a SCALARS key
    ndim: int  # arrays: their dims; scalars: 0
    layout: str  # arrays: numba's "C", "F" or "A"


def scalar_kind(numba_type) -> str:
    """The SCALARS key of a numba scalar type (``boolean`` is ``bool``)."""
    name = str(numba_type)
    return "bool" if name == "bool" or name == "boolean" else name


def arg_layouts(argtypes, names=None) -> tuple[list[ArgLayout], list[Slot]]:
    """The slots of a kernel whose numba signature is ``argtypes``: per argument its
    :class:`ArgLayout`, and every slot in order. ``names`` label the slots (tests and
    errors); by default ``arg0``, ``arg1``…"""
    layouts: list[ArgLayout] = []
    slots: list[Slot] = []
    for k, t in enumerate(argtypes):
        label = names[k] if names is not None and k < len(names) else f"arg{k}"
        if hasattr(t, "ndim") and hasattr(t, "layout"):  # numba types.Array
            layouts.append(ArgLayout(len(slots), "array", t.ndim, t.layout))
            for part in ARRAY_FIXED:
                slots.append(Slot(f"{label}.{part}", 8, "u64"))
            slots += [Slot(f"{label}.shape[{d}]", 8, "u64") for d in range(t.ndim)]
            slots += [Slot(f"{label}.strides[{d}]", 8, "u64") for d in range(t.ndim)]
            continue
        kind = scalar_kind(t)
        if kind in COMPLEX:
            ptx, size, _ = SCALARS[COMPLEX[kind]]
            layouts.append(ArgLayout(len(slots), kind, 0, ""))
            slots.append(Slot(f"{label}.real", size, ptx, COMPLEX[kind]))
            slots.append(Slot(f"{label}.imag", size, ptx, COMPLEX[kind]))
            continue
        if kind not in SCALARS:
            raise TypeError(f"no CUDA launch ABI for an argument of type {t}")
        ptx, size, _ = SCALARS[kind]
        layouts.append(ArgLayout(len(slots), kind, 0, ""))
        slots.append(Slot(label, size, ptx, kind))
    return layouts, slots


_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\((.*?)\)", re.S)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+[\w$]+(?:\[(\d+)\])?")
_PTX_BYTES = {"8": 1, "16": 2, "32": 4, "64": 8}


def entry_name(ptx: str) -> str:
    """The symbol of the first ``.entry`` of ``ptx``."""
    match = _ENTRY.search(ptx)
    if match is None:
        raise ValueError("the PTX has no .entry")
    return match.group(1)


def ptx_params(ptx: str) -> list[tuple[str, int]]:
    """The ``.param`` list of the first ``.entry`` of ``ptx``: (type, bytes) each."""
    match = _ENTRY.search(ptx)
    if match is None:
        raise ValueError("the PTX has no .entry")
    params = []
    for kind, count in _PARAM.findall(match.group(2)):
        size = _PTX_BYTES[re.sub(r"\D", "", kind)]
        params.append((kind, size * (int(count) if count else 1)))
    return params
