"""The arrays of every library in the operator layer: what an op or a graph module runs
on for each argument, and the kind its results go back as.

An op takes what a kernel takes (tessera/arrays.py): NumPy arrays (ml_dtypes' bf16
included), PyTorch tensors, JAX arrays and DLPack objects on the host reach the graph as
NumPy *views* of their memory (no copy: a ``@graph.kernel`` writes into the tensor);
numba-cuda and CuPy device arrays run as they are, and other CUDA arrays (PyTorch CUDA
tensors, any ``__cuda_array_interface__`` object) as a numba-cuda device array on the
same memory. Results go back as the first argument's library (``ArrayKind.result``):
a PyTorch tensor for PyTorch arguments, a JAX array for JAX ones; NumPy and device
arrays of numba-cuda otherwise. Tensors that require grad are refused, as kernels
refuse them.
"""

from __future__ import annotations

import numpy as np

from ..arrays import BF16, ArrayKind, TorchKind, is_device_array, kind_of, kind_of_type
from ..errors import TesseraError
from ..kernel.targets import DEVICE_TARGET

# device arrays the graph runs on as they are (they have shape, dtype, strides, reshape)
_NATIVE = ("DeviceNDArray", "FakeCUDAArray", "MappedNDArray", "ManagedNDArray")


class Operands(list):
    """The arguments as the arrays a graph runs on; ``kind``: the library the results
    go back as (None: NumPy arrays, or device arrays of the target); ``placed``: for
    each array whether it is a device array (read once, as it is taken)."""

    kind: ArrayKind | None = None

    def __init__(self) -> None:
        super().__init__()
        self.placed: list[bool] = []


# Types whose arrays the graph runs on as they are (``_NATIVE``, CuPy's), learnt once per
# type: an op's arguments of these types are taken with one lookup (asking an instance
# for ``__cuda_array_interface__`` builds the whole interface dict).
_native_types: dict[type, bool] = {}


def _native(cls: type) -> bool:
    native = _native_types.get(cls)
    if native is None:
        module = cls.__module__ or ""
        native = _native_types[cls] = kind_of_type(cls) is None and (
            (cls.__name__ in _NATIVE and module.startswith("numba"))
            or (module.startswith("cupy") and hasattr(cls, "__cuda_array_interface__"))
        )
    return native


def operands(name: str, args: tuple) -> Operands:
    """``args`` as arrays: NumPy arrays (lists converted), NumPy views of other
    libraries' host tensors, or device arrays; a TesseraError names an argument that
    cannot be taken."""
    out = Operands()
    placed = out.placed
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            out.append(a)
            placed.append(False)
            continue
        if _native(type(a)):  # numba-cuda's or CuPy's device arrays: as they are
            out.append(a)
            placed.append(True)
            continue
        kind = kind_of(a)
        if kind is not None:
            out.append(_foreign(name, i, kind, a))
            placed.append(not isinstance(out[-1], np.ndarray))
            if out.kind is None:
                out.kind = kind
        elif is_device_array(a):
            out.append(device_array(name, i, a))
            placed.append(True)
        elif isinstance(a, (list, tuple, np.generic)):
            try:
                out.append(np.asarray(a))
                placed.append(False)
            except ValueError as exc:  # a ragged list
                raise TesseraError(
                    f"{name}: argument {i} (a {type(a).__name__}) is not an array: {exc}"
                ) from None
        else:
            raise TesseraError(
                f"{name}: argument {i} is a {type(a).__name__}; the operator layer takes "
                "NumPy arrays, PyTorch tensors, JAX arrays, DLPack objects and device "
                "arrays (a sharded tensor: pass its .local)"
            )
    return out


def _foreign(name: str, i: int, kind: ArrayKind, a):
    """Argument ``i``, a tensor of another library, as a NumPy view or a device array."""
    why = kind.refusal(a)
    if why is not None:
        raise TesseraError(f"{name}: argument {i} is a {kind.label} that {why}")
    view = kind.view(a)
    if view is not None:
        return view
    if not kind.on_device(a):
        raise TesseraError(
            f"{name}: argument {i} is a {kind.label} on a device the operator layer cannot "
            "reach (it takes host and CUDA arrays)"
        )
    if not is_device_array(a):
        a = kind.device_view(a)  # through CuPy
    return device_array(name, i, a)


def device_array(name: str, i: int, a):
    """A CUDA array as one the graph runs on: numba-cuda's and CuPy's as they are, any
    other ``__cuda_array_interface__`` object as a numba-cuda device array on its memory
    (bf16, spelt ``<V2`` by the interface, keeps its dtype)."""
    cls = type(a)
    if cls.__name__ in _NATIVE or (cls.__module__ or "").startswith("cupy"):
        return a
    try:
        face = dict(a.__cuda_array_interface__)
    except Exception as exc:  # noqa: BLE001 - an interface that refuses
        raise TesseraError(
            f"{name}: argument {i} (a {cls.__name__}) has no readable "
            f"__cuda_array_interface__ ({exc})"
        ) from None
    bf16 = face["typestr"] == BF16.str
    if bf16:
        face["typestr"] = "<u2"
    return DEVICE_TARGET.wrap_interface(face, a, bf16)


def give_back(kind: ArrayKind | None, array):
    """A graph's result as the caller's kind: ``kind.result`` for host arrays; a device
    result as a PyTorch CUDA tensor on the same memory for PyTorch callers, as it is
    (a numba-cuda device array) for others."""
    if kind is None:
        return array
    if isinstance(array, np.ndarray):
        return kind.result(array)
    if isinstance(kind, TorchKind):
        torch = kind.torch
        bf16 = array.dtype == BF16
        tensor = torch.as_tensor(array.view(np.uint16) if bf16 else array)  # (on its GPU)
        return tensor.view(torch.bfloat16) if bf16 else tensor
    try:
        return kind.result(array)
    except Exception:  # noqa: BLE001 - a library that cannot take it: the device array
        return array


def give_back_all(kind: ArrayKind | None, results: list) -> list:
    return results if kind is None else [give_back(kind, r) for r in results]
