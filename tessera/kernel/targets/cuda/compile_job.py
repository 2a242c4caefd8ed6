"""One CUDA compile as a job for a compile worker (``kernel/compile_pool.py``).

A cubin needs no GPU: numba-cuda's front end and NVVM make PTX, nvJitLink links it for an
architecture named in words (``sm_90``). A job holds what that takes and nothing of the
kernel's front end: the generated Python source (made in the launching process), whether
it uses sm_80's instructions, the argument types (Numba types, which pickle), the
architecture and the launch bounds. The worker compiles it exactly as
``CudaProgram.build`` does (:func:`build_cubin`, which both call) and writes the cubin
cache's entry (cubin_cache.py); the launch that needs the cubin then reads it as a warm
start does, through every check of the disk cache (its MAC under this user's key, its
header repeating the kernel, the whole key and the environment). The worker works the
entry's key out again itself, from its own toolchain's versions and device runtime: a
worker whose toolchain differs names another entry, and its job fails (the launch
compiles).

The architecture is the job's: on a GPU the current device's (what the launch compiles
for), otherwise the one asked for (``k.compile_jobs(..., arch="sm_90")``), so a batch of
cubins can be made, and cached, where there is no GPU.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass, field

from ....config import SETTINGS, config
from ....config import get as setting
from ....errors import TesseraError
from ... import disk_cache
from . import abi, cubin_cache, runtime, shared_memory, toolchain
from . import driver as driver_module


def kernel_function(source: str, filename: str, name: str, namespace: dict):
    """The generated ``_kernel`` of ``source`` as a Python function named ``name`` (its
    entry symbol is ``tessera::<name>`` mangled: profilers show the user's kernel name)."""
    namespace["__name__"] = "tessera"
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102
    function = namespace["_kernel"]
    function.__name__ = function.__qualname__ = name
    return function


def build_cubin(
    function, signature: tuple, arch: str, bound, spill_bound, key: object = None
) -> tuple:
    """(PTX codes, cubin, ptxas's report) of ``function`` for ``arch`` (NVVM, nvJitLink;
    needs no GPU), compiled for launch bound ``bound``; where ptxas spills and
    ``spill_bound`` is not None, compiled again for that bound (one block an SM). ``key``:
    :func:`lowering_key` (a kernel lowered for another arch is not lowered again)."""
    cc = parse_arch(arch)
    codes = toolchain.ptx_codes(function, signature, cc, bound, key)
    cubin, report = toolchain.link(codes, arch)
    if spill_bound is not None and spill_bytes(report):
        codes = toolchain.ptx_codes(function, signature, cc, spill_bound, key)
        cubin, report = toolchain.link(codes, arch)
    return codes, cubin, report


def lowering_key(source: str, name: str, async_copies: bool) -> tuple:
    """What decides a kernel's LLVM IR besides its argument types and launch bound: the
    generated source, the function's name (the entry symbol) and its names
    (runtime.namespace)."""
    return (source, name, async_copies)


def spill_bytes(report: str) -> int:
    """The bytes of spill stores and loads ptxas's ``report`` lists."""
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill (?:stores|loads)", report))


def parse_arch(arch: str) -> tuple[int, int]:
    """``"sm_90"`` → ``(9, 0)`` (a TesseraError for anything else)."""
    match = re.fullmatch(r"sm_(\d+)(\d)a?", arch)
    if not match:
        raise TesseraError(f"arch {arch!r} is not a CUDA architecture such as 'sm_80'")
    return int(match.group(1)), int(match.group(2))


def symbol_name(kernel: str) -> str:
    """A kernel's name as an identifier for its entry symbol (ASCII letters, digits, _)."""
    name = re.sub(r"[^0-9A-Za-z_]", "_", kernel)
    return name if name and not name[0].isdigit() else f"k_{name}"


def entry_symbol(codes: list) -> str:
    """The cubin's entry symbol, from the kernel's PTX (the first code)."""
    return abi.entry_name(codes[0] if isinstance(codes[0], str) else "")


def warm_up() -> None:
    """numba-cuda's first compile in a process sets up its target context, NVVM and
    libdevice, and the device runtime's helpers are made (about a second): done by a
    compile worker before it says it is ready, so that its first cubin is not slower
    than the launching process would make it."""
    import numba

    for async_copies in (True, False):
        runtime.namespace(async_copies)
    source = "def _kernel(a):\n    a[0] = 1.0\n"
    function = kernel_function(source, "<warm-up>", "warm_up", runtime.namespace(True))
    build_cubin(function, (numba.types.float32[::1],), "sm_80", 32, None)


@dataclass(frozen=True)
class CubinJob:
    """Compile one CUDA specialisation for one architecture; write its cubin cache entry."""

    warm_ups = (warm_up,)  # (not a field) what a worker sets up first

    kernel: str
    name: str  # the Python function's name (symbol_name of the kernel's)
    source: str = field(repr=False)  # the generated Python source
    filename: str
    async_copies: bool  # sm_80's cp.async and mma.sync (runtime.namespace)
    argtypes: tuple  # Numba types, as the launch works them out (cuda_signature)
    arch: str
    bound: object  # the launch bound (CudaProgram.launch_bound())
    spill_bound: object  # compiled again for this where ptxas spills, or None
    defined: str  # where the kernel is defined (the entry's meta)
    path: str  # the entry's file, as the launching process names it
    settings: dict = field(repr=False)  # the launching process's (its cache directory too)
    # the same compile in the launching process (its program's compiled()): not sent
    here: object = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "here"}

    @property
    def title(self) -> str:
        return f"kernel '{self.kernel}' ({self.defined}, cubin for {self.arch})"

    def compile_here(self) -> str:
        """Compile in the launching process instead (and write the entry), as the launch
        would."""
        start = time.perf_counter()
        self.here()
        return f"compiled in this process in {time.perf_counter() - start:.2f} s"

    def run(self) -> str:
        """Compile and write the entry (in a worker); what was done, in words. Raises when
        this process names the entry differently from the launching process."""
        with config(**self.settings):
            entry = cubin_cache.entry(
                self.kernel, self.source, self.argtypes, self.arch, self.bound, self.defined
            )
            if entry is None or str(entry.path) != self.path:
                raise RuntimeError(
                    "this process names the entry differently (another environment: "
                    "toolchain versions, device runtime or settings)"
                )
            start = time.perf_counter()
            with cubin_cache.compiling(entry) as waited:
                if waited and entry.path.exists():
                    return "written by another process meanwhile"
                namespace = runtime.namespace(self.async_copies)
                function = kernel_function(self.source, self.filename, self.name, namespace)
                key = lowering_key(self.source, self.name, self.async_copies)
                codes, cubin, _ = build_cubin(
                    function, self.argtypes, self.arch, self.bound, self.spill_bound, key
                )
                entry.write(cubin_cache.pack(entry_symbol(codes), cubin), repr(self.argtypes))
            if not entry.path.exists():
                raise RuntimeError("compiled, but no disk-cache entry was written")
            return f"compiled in {time.perf_counter() - start:.2f} s"


def jobs_for(program, args: tuple, grid: tuple[int, ...], arch: str | None) -> list:
    """What a launch of ``program`` (a CudaProgram) with these arguments would compile on
    ``arch`` (None: the current GPU's), as jobs: none under the simulator (it compiles no
    cubin), without a GPU unless ``arch`` is given, when the launch has its code loaded,
    when its entry is on disk (the launch reads it), when there is no entry to write (the
    disk cache is off), and when the launch would raise before compiling (too much shared
    memory for the architecture: the launch says so)."""
    if program.simulated:
        return []
    if arch is None:
        try:
            _, (major, minor), _ = driver_module.DRIVER.device()
        except Exception:  # noqa: BLE001 - no GPU or driver here: nothing will launch
            return []
        arch = f"sm_{major}{minor}"
    program = program.for_args(args)  # the variant a launch with them runs
    if program._launcher is not None:
        return []
    try:
        shared_memory.check(
            program.kir, program.shared_arrays, shared_memory.limit_for(parse_arch(arch)), arch
        )
    except Exception:  # noqa: BLE001 - the launch raises it, as without workers
        return []
    argtypes = program.launch_signature(args, len(grid))
    bound = program.launch_bound()
    defined = str(program.kir.loc)
    entry = cubin_cache.entry(program.kir.name, program.source, argtypes, arch, bound, defined)
    if entry is None or entry.path.exists():
        return []
    job = CubinJob(
        kernel=program.kir.name,
        name=symbol_name(program.kir.name),
        source=program.source,
        filename=program.filename,
        async_copies=program.async_copies,
        argtypes=argtypes,
        arch=arch,
        bound=bound,
        spill_bound=program.launch_bound(1) if program.min_blocks > 1 else None,
        defined=defined,
        path=str(entry.path),
        settings={
            **{name: setting(name) for name in SETTINGS},
            "cache_dir": str(disk_cache.directory()),
        },
        here=functools.partial(program.compiled, argtypes, arch),
    )
    return [job]
