"""What an array is and where it lives: NumPy arrays on the host, GPU arrays (CuPy,
PyTorch, numba-cuda device arrays: anything with ``__cuda_array_interface__``), and the
arrays of other libraries — PyTorch tensors, JAX arrays, anything that speaks DLPack.

A kernel runs on NumPy arrays on the host, so a host tensor of another library reaches
it as a NumPy *view* of the same memory (never a copy: a kernel's writes land in the
tensor). Each library has an :class:`ArrayKind` that makes that view, says why a tensor
cannot be passed (a PyTorch tensor that requires grad), and turns a result back into the
caller's kind (what collectives return). Kinds are learnt once per Python type, so the
launch path pays one dictionary lookup and the library's own cheapest view:
``Tensor.numpy()`` for PyTorch, ``numpy.asarray`` for JAX, ``numpy.from_dlpack`` for
the rest (bf16 read from the capsule by dlpack.py; docs/targets.md, "PyTorch and JAX").
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from .dlpack import bf16_view
from .errors import LaunchError, TesseraError

BF16 = np.dtype(ml_dtypes.bfloat16)
KDL_CPU = 1  # DLPack's device types: host memory
KDL_CUDA, KDL_CUDA_HOST = 2, 3


class ArrayKind:
    """How Tessera reads the arrays of one library (the DLPack protocol unless a
    subclass knows a cheaper way) and gives results back in that library's type."""

    label = "DLPack tensor"
    immutable = False  # JAX arrays: a kernel may read them, never write them

    def view(self, a) -> np.ndarray | None:
        """A NumPy view of host tensor ``a`` (no copy), or None: a device tensor, or one
        that :meth:`refusal` explains."""
        try:
            if int(a.__dlpack_device__()[0]) != KDL_CPU:
                return None
            return np.from_dlpack(a)
        except (BufferError, RuntimeError, TypeError, ValueError):
            pass
        try:  # bf16, which NumPy's DLPack has no dtype for
            return bf16_view(a)
        except (BufferError, RuntimeError, TypeError, ValueError):
            return None

    def on_device(self, a) -> bool:
        return int(a.__dlpack_device__()[0]) in (KDL_CUDA, KDL_CUDA_HOST)

    def refusal(self, a) -> str | None:
        """Why host tensor ``a`` has no view (None when it has one, or is no host tensor)."""
        if int(a.__dlpack_device__()[0]) != KDL_CPU:
            return None
        try:
            np.from_dlpack(a)
        except (BufferError, RuntimeError, TypeError, ValueError) as exc:
            if self.view(a) is None:
                return f"NumPy cannot read it through DLPack ({exc})"
        return None

    def device_view(self, a):
        """A CUDA tensor as an array with ``__cuda_array_interface__`` (through CuPy)."""
        try:
            import cupy
        except ImportError:
            raise TesseraError(
                f"a CUDA {self.label} without __cuda_array_interface__ needs CuPy to be "
                "wrapped (pip install cupy-cuda12x)"
            ) from None
        return cupy.from_dlpack(a)

    def result(self, array):
        """A collective's result (NumPy, or a CuPy array for device tensors) as the
        caller's kind. Other DLPack libraries get NumPy or CuPy arrays back."""
        return array


class TorchKind(ArrayKind):
    """PyTorch tensors. On the host ``Tensor.numpy()`` is the view (bf16 through an
    int16 view: NumPy has no bf16 of its own, ml_dtypes' has the same bits); on the GPU
    the tensor's own ``__cuda_array_interface__``. Tensors that require grad are refused:
    a kernel is invisible to autograd, so its reads and writes would be wrong gradients
    silently; ``x.detach()`` (no copy) says the caller means it."""

    label = "PyTorch tensor"

    def __init__(self, torch):
        self.torch = torch

    def view(self, t) -> np.ndarray | None:
        if t.requires_grad or not t.is_cpu:
            return None
        try:
            return self._numpy(t)
        except (TypeError, RuntimeError):  # e.g. float8, or a lazy conjugate view
            return None

    def _numpy(self, t) -> np.ndarray:
        if t.dtype is self.torch.bfloat16:
            return t.view(self.torch.int16).numpy().view(BF16)
        return t.numpy()

    def on_device(self, t) -> bool:
        return bool(t.is_cuda)

    def refusal(self, t) -> str | None:
        if t.requires_grad:
            return (
                "requires grad; Tessera is invisible to autograd, so pass x.detach() "
                "(the same memory) to use it anyway"
            )
        if not (t.is_cpu or t.is_cuda):
            return f"is on device {t.device}; Tessera takes CPU and CUDA tensors"
        if t.is_cpu:
            try:
                self._numpy(t)
            except (TypeError, RuntimeError) as exc:
                return f"has no NumPy view ({exc}); Tessera never converts silently"
        return None

    def result(self, array):
        torch = self.torch
        if not isinstance(array, np.ndarray):
            return torch.from_dlpack(array)
        if not array.flags.writeable:  # torch tensors are always writable
            array = array.copy()
        if array.dtype == BF16:
            return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(array)


class JaxKind(ArrayKind):
    """JAX arrays. On the host ``numpy.asarray`` is a read-only view; JAX arrays are
    immutable, so they can be read by a kernel but never passed as ``mut``. Results of
    collectives are new JAX arrays on the default device."""

    label = "JAX array"
    immutable = True

    def __init__(self, jax):
        self.jax = jax
        self.host_platforms: set[str] = set()  # learnt from DLPack: no platform names here

    def view(self, a) -> np.ndarray | None:
        platform = a.platform()
        if platform not in self.host_platforms:
            if int(a.__dlpack_device__()[0]) != KDL_CPU:
                return None
            self.host_platforms.add(platform)
        return np.asarray(a)

    def refusal(self, a) -> str | None:
        return None

    def result(self, array):
        numpy = self.jax.numpy
        return numpy.asarray(array) if isinstance(array, np.ndarray) else numpy.from_dlpack(array)


_KINDS: dict[type, ArrayKind | None] = {}
_DLPACK = ArrayKind()
_UNSEEN: ArrayKind = ArrayKind()  # a type not looked at yet


def kind_of(a) -> ArrayKind | None:
    """The :class:`ArrayKind` of ``a``'s type (None: NumPy, a GPU array with
    ``__cuda_array_interface__`` and no library we know, or not an array), learnt once
    per type."""
    return kind_of_type(type(a))


def kind_of_type(cls: type) -> ArrayKind | None:
    """:func:`kind_of` for a type rather than an instance."""
    kind = _KINDS.get(cls, _UNSEEN)
    if kind is _UNSEEN:
        kind = _KINDS[cls] = _learn(cls)
    return kind


def _learn(cls: type) -> ArrayKind | None:
    if issubclass(cls, np.ndarray):
        return None
    for base in cls.__mro__:
        module = base.__module__ or ""
        if module.startswith("torch") and base.__name__ == "Tensor" and "torch" in sys.modules:
            return TorchKind(sys.modules["torch"])
        if module.startswith(("jax", "jaxlib")) and "jax" in sys.modules:
            if base.__name__ in ("Array", "ArrayImpl"):
                return JaxKind(sys.modules["jax"])
    if hasattr(cls, "__cuda_array_interface__"):  # CuPy, numba: launched and moved as they are
        return None
    if hasattr(cls, "__dlpack__") and hasattr(cls, "__dlpack_device__"):
        return _DLPACK
    return None


def host_view(a) -> np.ndarray | None:
    """The launch path's conversion: a NumPy view of a host tensor of a known library,
    or None (then :func:`host_arrays` decides, with the checks and messages)."""
    kind = kind_of(a)
    return None if kind is None else kind.view(a)


def host_arrays(kernel: str, params: list, args: tuple) -> tuple:
    """``args`` with every host tensor of another library replaced by its NumPy view,
    and CUDA tensors that lack ``__cuda_array_interface__`` wrapped by CuPy; a
    LaunchError names the parameter of a tensor that cannot be passed."""
    out = list(args)
    for k, (p, a) in enumerate(zip(params, args)):
        if p.kind != "array" or isinstance(a, np.ndarray):
            continue
        kind = kind_of(a)
        if kind is None:
            continue
        why = kind.refusal(a)
        if why is not None:
            raise LaunchError(kernel, f"parameter '{p.name}' is a {kind.label} that {why}")
        if p.mutable and kind.immutable:
            raise LaunchError(
                kernel,
                f"parameter '{p.name}' is mut[...] but a {kind.label} is immutable; "
                "pass a NumPy array (or a PyTorch tensor) to be written",
            )
        view = kind.view(a)
        if view is not None:
            out[k] = view
        elif kind.on_device(a) and not is_device_array(a):
            try:
                out[k] = kind.device_view(a)
            except TesseraError as exc:
                raise LaunchError(kernel, f"parameter '{p.name}': {exc}") from None
    return tuple(out)


def transportable(a, name: str = "x") -> tuple[object, ArrayKind | None]:
    """What a collective moves for ``a`` — its NumPy view on the host, a CuPy view of a
    CUDA tensor (the transports speak NumPy and CuPy) — and its kind, whose
    :meth:`ArrayKind.result` turns the result back (None: ``a`` is NumPy's or CuPy's)."""
    kind = kind_of(a)
    if kind is None:
        return a, None
    why = kind.refusal(a)
    if why is not None:
        raise TesseraError(f"{name} is a {kind.label} that {why}")
    view = kind.view(a)
    if view is not None:
        return view, kind
    if kind.on_device(a):
        return kind.device_view(a), kind
    raise TesseraError(f"{name} is a {kind.label} on a device collectives cannot reach")


def is_device_array(a: object) -> bool:
    """A GPU array: ``__cuda_array_interface__`` (CuPy, PyTorch, numba) or a numba-cuda
    device array (the simulator's carry no interface). A tensor whose interface raises
    (a PyTorch tensor that requires grad) is not one: :func:`host_arrays` explains."""
    try:
        return hasattr(a, "__cuda_array_interface__") or type(a).__name__ in DEVICE_ARRAY_TYPES
    except Exception:
        return False


def device_dtype(a) -> np.dtype:
    """The dtype of a GPU array. ``__cuda_array_interface__`` spells bf16 ``<V2`` (PyTorch
    says so, and it is ml_dtypes' own spelling); NumPy reads that as raw bytes."""
    dtype = getattr(a, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype
    typestr = a.__cuda_array_interface__["typestr"]
    return BF16 if typestr == BF16.str else np.dtype(typestr)


def bits_view(a, bits: np.dtype):
    """Array ``a`` seen as ``bits`` (a 16-bit float as uint16) — no copy. PyTorch
    tensors take PyTorch's dtypes, read from an empty NumPy array of ``bits``."""
    kind = kind_of(a)
    if isinstance(kind, TorchKind):
        return a.view(kind.torch.from_numpy(np.empty(0, bits)).dtype)
    return a.view(bits)


def device_info(a) -> tuple[int, tuple, tuple, np.dtype] | None:
    """``(pointer, shape, byte strides, dtype)`` of a GPU array, read through its type's
    cheapest accessor (learnt once per type: numba-cuda device arrays, CuPy, PyTorch CUDA
    tensors, else ``__cuda_array_interface__``), or None: not a GPU array (or a tensor
    that must take the checked path, such as one that requires grad)."""
    reader = DEVICE_READERS.get(type(a))
    if reader is None:
        reader = DEVICE_READERS[type(a)] = _reader_for(type(a))
    return reader(a)


class DeviceArg(tuple):
    """A GPU array as a checked launch passes it on to the target: ``(pointer, shape, byte
    strides, dtype, array)``, read once by the launch's check (the launcher writes these
    words as they are). It still answers what launch observers ask of an array."""

    __slots__ = ()

    @property
    def array(self):
        return self[4]

    @property
    def shape(self) -> tuple:
        return self[1]

    @property
    def strides(self) -> tuple:
        return self[2]

    @property
    def dtype(self) -> np.dtype:
        return self[3]

    @property
    def nbytes(self) -> int:
        count = self[3].itemsize
        for extent in self[1]:
            count *= extent
        return count

    @property
    def __cuda_array_interface__(self) -> dict:
        return self[4].__cuda_array_interface__


def _read_device_arg(a: DeviceArg):
    return a[0], a[1], a[2], a[3]


def _reader_for(cls: type):
    if cls is DeviceArg:
        return _read_device_arg
    kind = kind_of_type(cls)
    if isinstance(kind, TorchKind):
        return _torch_reader(kind.torch)
    module = cls.__module__ or ""
    if module.startswith("cupy") and cls.__name__ == "ndarray":
        return _read_cupy
    if cls.__name__ in ("DeviceNDArray", "MappedNDArray", "ManagedNDArray") and module.startswith(
        "numba"
    ):
        return _read_numba
    if hasattr(cls, "__cuda_array_interface__"):
        return _read_interface
    return _not_a_device_array


def _not_a_device_array(a) -> None:
    return None


_NUMBA_LAYOUTS: dict = {}  # (type, shape, strides, dtype) → what its constructor set


def numba_array(cls: type, shape: tuple, strides: tuple, dtype: np.dtype, gpu_data):
    """``cls(shape, strides, dtype, gpu_data=gpu_data)`` for numba-cuda's DeviceNDArray
    (``shape`` and ``strides`` tuples of ints, ``dtype`` a NumPy dtype): made by the
    constructor once per layout, then as a copy of the attributes it set, ``gpu_data``
    replaced (the constructor works the layout out again each time: a few µs on the op
    path). An empty array is always the constructor's (it drops ``gpu_data``)."""
    key = (cls, shape, strides, dtype)
    attrs = _NUMBA_LAYOUTS.get(key)
    if attrs is None:
        array = cls(shape, strides, dtype, gpu_data=gpu_data)
        if array.size:
            if len(_NUMBA_LAYOUTS) >= _LAYOUTS_KEPT:
                _NUMBA_LAYOUTS.clear()
            attrs = dict(array.__dict__)  # (before any cached property is read)
            attrs["gpu_data"] = None  # (the snapshot holds no memory)
            _NUMBA_LAYOUTS[key] = attrs
        return array
    array = cls.__new__(cls)
    attrs = attrs.copy()
    attrs["gpu_data"] = gpu_data
    array.__dict__ = attrs
    return array


_LAYOUTS_KEPT = 4096


def _read_numba(a):
    return a.device_ctypes_pointer.value or 0, a.shape, a.strides, a.dtype


def _read_cupy(a):
    return a.data.ptr, a.shape, a.strides, a.dtype


def _read_interface(a):
    try:
        interface = a.__cuda_array_interface__
    except Exception:  # a tensor whose interface refuses (requires grad): the checked path
        return None
    shape = tuple(interface["shape"])
    dtype = BF16 if interface["typestr"] == BF16.str else np.dtype(interface["typestr"])
    strides = interface.get("strides")
    if strides is None:
        strides = contiguous_strides(shape, dtype.itemsize)
    return int(interface["data"][0] or 0), shape, tuple(strides), dtype


def _torch_reader(torch):
    dtypes = {}
    for name in ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8"):
        dtypes[getattr(torch, name)] = np.dtype(name)
    dtypes[torch.bool] = np.dtype(np.bool_)
    dtypes[torch.bfloat16] = BF16

    def read(t):
        if not t.is_cuda or t.requires_grad:
            return None
        dtype = dtypes.get(t.dtype)
        if dtype is None:
            return None
        size = dtype.itemsize
        return t.data_ptr(), tuple(t.shape), tuple(s * size for s in t.stride()), dtype

    return read


def contiguous_strides(shape: tuple, itemsize: int) -> tuple:
    """The byte strides of a C-contiguous array of ``shape``."""
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


DEVICE_READERS: dict[type, object] = {}  # per type its reader: what device_info learnt


def layout_class(shape: tuple, strides: tuple, itemsize: int) -> str:
    """The layout class of an array (numba's): ``"C"`` or ``"F"`` when its byte strides are
    exactly the contiguous ones (a dim of extent 1 may have any stride: it is never
    stepped over), else ``"A"`` (strided, broadcast or reversed): what the compiled code
    may assume about it."""
    if len(shape) == 0:
        return "C"
    expected = itemsize
    c_ok = True
    for extent, stride in zip(reversed(shape), reversed(strides)):
        if extent != 1 and stride != expected:
            c_ok = False
            break
        expected *= extent
    if c_ok:
        return "C"
    expected = itemsize
    for extent, stride in zip(shape, strides):
        if extent != 1 and stride != expected:
            return "A"
        expected *= extent
    return "F"


DEVICE_ARRAY_TYPES = ("DeviceNDArray", "FakeCUDAArray", "MappedNDArray", "ManagedNDArray")
