"""Compiled CPU kernels as object code that a later process runs without importing Numba.

A warm start is worth having only if it is quick, and importing Numba alone costs about a
third of a second, more than loading a kernel. So the disk cache does not hold Numba's
pickled ``CompileResult`` (which only Numba can read) but an :class:`Image`: the object
code Numba's LLVM emitted for the kernel, the names of its Python-callable wrapper and of
its environment pointer, and the external symbols it calls. :func:`load` links that object
with llvmlite's LLJIT and turns the wrapper into a Python function, exactly as Numba does
for a function it has just compiled (``_dynfunc.make_function``): launches then run the
same machine code through the same entry point as in the process that compiled it.

What the object code calls, and where it comes from here:

* the Python C API and libc/libm: this process;
* Numba's C helpers (array unboxing, raising exceptions, the GIL), its reference-counting
  runtime (NRT) and its threading layer (workqueue, OpenMP or TBB, whichever the compiling
  process used): C extension modules of the installed Numba, loaded from their files
  without running Numba's package ``__init__``, and registered in ``sys.modules`` under
  their own names so that a Numba imported later in the process uses the same ones (same
  allocator, one thread pool).

This is Numba's private ABI (symbol names, wrapper convention, helper tables), which any
release may change: images are written and loaded only under the Numba releases the loader
has been tested with (:data:`TESTED_NUMBA`); under any other, kernels are compiled as if
there were no disk cache, and one log line says why. The cache key holds the exact Numba
and llvmlite versions, so an image is only ever loaded by the Numba that wrote it; any
symbol that cannot be found makes :func:`load` raise :class:`NativeLoadError` *before*
linking (LLVM would abort on an unresolved symbol), and the kernel is compiled instead.
"""

from __future__ import annotations

import builtins
import ctypes
import functools
import importlib.machinery
import importlib.util
import json
import logging
import os
import re
import sys
import threading
import types
from dataclasses import dataclass

# the threading layers Numba knows, by the name numba.threading_layer() reports
_LAYER_MODULES = {"workqueue": "workqueue", "omp": "omppool", "tbb": "tbbpool"}
# the threading layer's exports that compiled code calls, under the same names (but for
# parallel_for, which it calls numba_parallel_for)
_LAYER_EXPORTS = (
    "do_scheduling_signed",
    "do_scheduling_unsigned",
    "allocate_sched",
    "deallocate_sched",
    "get_num_threads",
    "set_num_threads",
    "get_thread_id",
    "set_parallel_chunksize",
    "get_parallel_chunksize",
    "get_sched_size",
)


# The Numba releases, (major, minor) from first to last inclusive, whose native images this
# loader has been run with. Widen it only after the test-suite (tests/test_disk_cache.py)
# passes under the new release.
TESTED_NUMBA = ((0, 68), (0, 68))


def numba_release() -> tuple[int, int] | None:
    """The installed Numba's (major, minor), read from its version file without importing
    it (importing Numba is what a warm start avoids); None when it cannot be read."""
    spec = importlib.util.find_spec("numba")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(spec.submodule_search_locations[0], "_version.py")) as f:
            found = re.search(r'"version":\s*"(\d+)\.(\d+)', f.read())
    except OSError:
        return None
    return (int(found.group(1)), int(found.group(2))) if found else None


@functools.cache
def numba_tested() -> bool:
    """Whether the installed Numba is one of :data:`TESTED_NUMBA`; logs one line (logger
    ``tessera``, WARNING) the first time it is not."""
    release = numba_release()
    if release is not None and TESTED_NUMBA[0] <= release <= TESTED_NUMBA[1]:
        return True
    first, last = (".".join(map(str, v)) for v in TESTED_NUMBA)
    found = ".".join(map(str, release)) if release else "an unreadable version"
    logging.getLogger("tessera").warning(
        "tessera: the warm-start loader has been tested with Numba %s to %s, not %s; CPU "
        "kernels are compiled in each process instead of loaded from the disk cache",
        first,
        last,
        found,
    )
    return False


class NativeLoadError(RuntimeError):
    """An image cannot be linked in this process (a symbol or a Numba module is missing)."""


@dataclass(frozen=True)
class Image:
    """One compiled function: object code plus what linking and calling it needs."""

    object_code: bytes
    wrapper: str  # the CPython wrapper: PyObject *(PyObject *self, args, kwargs)
    env: str  # the global that must point at the wrapper's environment object
    externals: tuple[str, ...]  # symbols the object code needs from outside
    threading_layer: str | None  # the layer a parallel function was compiled against
    # the object code of the functions it calls without linking them (a grouped kernel's
    # chunk), linked beside it, and their environment globals
    callees: tuple[bytes, ...] = ()
    callee_envs: tuple[str, ...] = ()
    # a function whose address the wrapper takes as its first argument (the chunk a
    # shared parallel driver runs: parallel_driver.py), bound when loaded
    bound: str | None = None

    def to_bytes(self) -> bytes:
        header = {
            "wrapper": self.wrapper,
            "env": self.env,
            "externals": list(self.externals),
            "threading_layer": self.threading_layer,
            "callees": [len(c) for c in self.callees],
            "callee_envs": list(self.callee_envs),
            "bound": self.bound,
        }
        body = b"".join((*self.callees, self.object_code))
        return json.dumps(header).encode() + b"\n" + body

    @classmethod
    def from_bytes(cls, data: bytes) -> Image:
        end = data.index(b"\n")
        header = json.loads(data[:end])
        start, callees = end + 1, []
        for size in header["callees"]:
            callees.append(data[start : start + size])
            start += size
        return cls(
            object_code=data[start:],
            wrapper=header["wrapper"],
            env=header["env"],
            externals=tuple(header["externals"]),
            threading_layer=header["threading_layer"],
            callees=tuple(callees),
            callee_envs=tuple(header["callee_envs"]),
            bound=header.get("bound"),
        )


def image_of(cres, callees: tuple = (), bound: str | None = None) -> Image | None:
    """The image of a freshly compiled Numba ``CompileResult`` and of the ones it calls
    without linking them (``callees``; None: one of them refers to objects of this
    process, so it cannot be reused elsewhere; Numba's own cache rule). ``bound``: the
    symbol (of a callee) whose address the function takes as its first argument."""
    everything = (cres, *callees)
    if any(
        c.library.has_dynamic_globals or any(not f.can_cache for f in c.lifted) for c in everything
    ):
        return None
    declared, defined = set(), set()
    for c in everything:
        module = c.library._final_module
        for symbol in (*module.functions, *module.global_variables):
            (declared if symbol.is_declaration else defined).add(symbol.name)
    externals = sorted(n for n in declared - defined if not n.startswith("llvm."))
    layer = None
    if "numba_parallel_for" in externals:
        import numba

        layer = numba.threading_layer()
    return Image(
        object_code=bytes(cres.library._get_compiled_object()),
        wrapper=cres.fndesc.llvm_cpython_wrapper_name,
        env=cres.fndesc.env_name,
        externals=tuple(externals),
        threading_layer=layer,
        callees=tuple(bytes(c.library._get_compiled_object()) for c in callees),
        callee_envs=tuple(c.fndesc.env_name for c in callees),
        bound=bound,
    )


def load(image: Image, name: str):
    """A Python function that runs ``image``'s code (raises :class:`NativeLoadError`)."""
    return _runtime().load(image, name)


def threads() -> int | None:
    """The threading layer's current thread count, if this module started a layer."""
    runtime = _the_runtime
    return runtime.threads() if runtime is not None else None


_the_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()


def _runtime() -> _Runtime:
    global _the_runtime
    with _runtime_lock:
        if _the_runtime is None:
            try:
                _the_runtime = _Runtime()
            except NativeLoadError:
                raise
            except Exception as exc:  # an unusual platform or Numba build: compile instead
                raise NativeLoadError(f"cannot set up the runtime: {exc}") from exc
        return _the_runtime


def numba_extension(name: str) -> types.ModuleType:
    """Numba's C extension module ``name`` (e.g. ``numba._helperlib``), loaded from its file
    without importing the ``numba`` package; the one in ``sys.modules`` if already loaded."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    spec = importlib.util.find_spec("numba")  # locates the package; does not import it
    if spec is None or not spec.submodule_search_locations:
        raise NativeLoadError("Numba is not installed")
    base = os.path.join(spec.submodule_search_locations[0], *name.split(".")[1:])
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if os.path.exists(base + suffix):
            path = base + suffix
            break
    else:
        raise NativeLoadError(f"Numba's extension module {name} was not found")
    loader = importlib.machinery.ExtensionFileLoader(name, path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    sys.modules[name] = module
    return module


class _Runtime:
    """One per process: the LLJIT, the symbol table and the threading layer."""

    def __init__(self):
        import llvmlite.binding as llb

        llb.initialize_native_target()
        llb.initialize_native_asmprinter()
        self._llb = llb
        self._jit = llb.create_lljit_compiler()
        self._lock = threading.Lock()
        self._count = 0
        self._layer = None  # the loaded threading layer module
        self._get_num_threads = None
        helperlib = numba_extension("numba._helperlib")
        dynfunc = numba_extension("numba._dynfunc")
        nrt_fresh = "numba.core.runtime._nrt_python" not in sys.modules
        nrt = numba_extension("numba.core.runtime._nrt_python")
        if nrt_fresh:  # what importing numba.core.runtime.nrt would do
            nrt.memsys_use_cpython_allocator()
        self._dynfunc = dynfunc
        # the names Numba's codegen gives these tables' entries (numba.core.base, nrt.py)
        symbols = {"_Py_NoneStruct": id(None)}
        for table in (helperlib.c_helpers, dynfunc.c_helpers):
            symbols.update({"numba_" + k: v for k, v in table.items()})
        symbols.update(
            {k if k.startswith("_") else "NRT_" + k: v for k, v in nrt.c_helpers.items()}
        )
        for value in builtins.__dict__.values():
            if isinstance(value, type) and issubclass(value, BaseException):
                symbols["PyExc_" + value.__name__] = id(value)
        self._symbols = symbols
        self._libraries = [ctypes.pythonapi, ctypes.CDLL(None)]
        # libm and Intel's SVML (which Numba uses for vector math when it is installed)
        for name in ("libm.so.6", "libsvml.so"):
            try:
                self._libraries.append(ctypes.CDLL(name))
            except OSError:
                continue

    def threads(self) -> int | None:
        return self._get_num_threads() if self._get_num_threads is not None else None

    def _start_layer(self, layer: str) -> None:
        """Load and start the threading layer, as Numba's ``_launch_threads`` does."""
        if self._layer is not None:
            if self._layer_name != layer:
                running = self._layer_name
                raise NativeLoadError(f"compiled for the {layer} threading layer, not {running}")
            return
        parallel = sys.modules.get("numba.np.ufunc.parallel")
        if parallel is not None and parallel._is_initialized and parallel._threading_layer != layer:
            raise NativeLoadError(
                f"compiled for the {layer} threading layer; Numba runs {parallel._threading_layer}"
            )
        if layer not in _LAYER_MODULES:
            raise NativeLoadError(f"unknown threading layer {layer!r}")
        try:
            module = numba_extension("numba.np.ufunc." + _LAYER_MODULES[layer])
        except ImportError as exc:  # e.g. TBB or OpenMP's library missing
            raise NativeLoadError(f"cannot load the {layer} threading layer: {exc}") from exc
        count = _default_threads()
        ctypes.CFUNCTYPE(None, ctypes.c_int)(module.launch_threads)(count)  # once per process
        if parallel is None or not parallel._is_initialized:
            ctypes.CFUNCTYPE(None, ctypes.c_int)(module.set_num_threads)(count)
        self._symbols.update({name: getattr(module, name) for name in _LAYER_EXPORTS})
        self._symbols["numba_parallel_for"] = module.parallel_for
        self._get_num_threads = ctypes.CFUNCTYPE(ctypes.c_int)(module.get_num_threads)
        self._layer, self._layer_name = module, layer

    def _address(self, symbol: str) -> int:
        address = self._symbols.get(symbol)
        if address:
            return address
        for library in self._libraries:
            try:
                return ctypes.cast(getattr(library, symbol), ctypes.c_void_p).value
            except AttributeError:
                continue
        raise NativeLoadError(f"the compiled code calls {symbol}, which this process lacks")

    def load(self, image: Image, name: str):
        with self._lock:
            if image.threading_layer is not None:
                self._start_layer(image.threading_layer)
            builder = self._llb.JITLibraryBuilder()
            for code in (*image.callees, image.object_code):
                builder.add_object_img(code)
            for symbol in image.externals:  # all resolved first: never link a missing one
                builder.import_symbol(symbol, self._address(symbol))
            envs = (image.env, *image.callee_envs)
            builder.export_symbol(image.wrapper)
            for symbol in envs:
                builder.export_symbol(symbol)
            if image.bound is not None:
                builder.export_symbol(image.bound)
            self._count += 1
            try:
                tracker = builder.link(self._jit, f"tessera_{self._count}")
                wrapper, env_slots = tracker[image.wrapper], [tracker[e] for e in envs]
                bound = None if image.bound is None else tracker[image.bound]
            except Exception as exc:  # LLVM's own complaint (duplicate or odd object)
                raise NativeLoadError(f"cannot link: {exc}") from exc
        module = types.ModuleType(f"tessera_cpu_{name}")
        env = self._dynfunc.Environment(module.__dict__)
        for slot in env_slots:  # the kernel and its chunk share the generated module
            ctypes.c_void_p.from_address(slot).value = id(env)
        function = self._dynfunc.make_function(
            module, name, f"compiled Tessera kernel {name}", wrapper, env, (tracker, env)
        )
        return function if bound is None else functools.partial(function, bound)


def _default_threads() -> int:
    """Numba's default thread count: NUMBA_NUM_THREADS, else the CPUs this process may use."""
    configured = os.environ.get("NUMBA_NUM_THREADS", "").strip()
    if configured:
        return int(configured)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
