"""The disk cache of compiled kernels (LANGUAGE.md §4): a second process compiles nothing,
processes can fill one cache at once, a corrupt entry is rebuilt with a warning, and every
change that alters the code is a miss.

The subprocess tests count compiles with ``tessera.stats()`` and Numba's own compile events,
never time. Every test uses a cache directory of its own (``tmp_path``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import runpy
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import tessera as ts
from tessera import cli
from tessera.errors import CacheWarning
from tessera.kernel import disk_cache
from tessera.kernel.targets.cpu import native

# Kernels with every kind of runtime support the generated code uses: shared arrays and
# barriers (stack-array intrinsics), a helper, group reductions (the reduction tree), math
# functions, atomics, f16 conversions, a constexpr, and one parallel launch (the parfor
# runtime); ``check()`` runs them all and compares with NumPy.
KERNELS = """
from __future__ import annotations

import math

import numpy as np

import tessera as ts
from tessera import KiB, constexpr, f16, f32, i32, group_linear_id, kernel, mut, tbarrier
from tessera import tile, tshared


@ts.func
def scaled(v):
    return v * 2.0


@kernel(tile=(64,), shared=1 * KiB)
def block_sum(x: f32[n], out: mut[f32[grid_groups]]):
    s = tshared.alloc[f32](64)
    lane = tile.linear_id()
    k = group_linear_id() * 64 + lane
    s[lane] = scaled(x[k]) if k < n else 0.0
    tbarrier()
    stride = 32
    while stride > 0:
        if lane < stride:
            s[lane] += s[lane + stride]
        tbarrier()
        stride //= 2
    if lane == 0:
        out[group_linear_id()] = s[0]


@kernel(tile=(32,), shared=1 * KiB)
def softmax_rows(x: f32[rows, cols], y: mut[f32[rows, cols]]):
    row = group_linear_id()
    lane = tile.linear_id()
    m = -math.inf
    for j in range(lane, cols, 32):
        m = max(m, x[row, j])
    row_max = tile.max(m)
    s = 0.0
    for j in range(lane, cols, 32):
        s += math.exp(x[row, j] - row_max)
    total = tile.sum(s)
    for j in range(lane, cols, 32):
        y[row, j] = math.exp(x[row, j] - row_max) / total


@kernel
def histogram(x: i32[n], hist: mut[i32[bins]]):
    i = tile.linear_id()
    if i < n:
        tile.atomic_add(hist, x[i], 1)


@kernel
def power16(x: f16[n], y: mut[f16[n]], P: constexpr):
    i = tile.linear_id()
    if i < n:
        acc = x[i]
        for _ in range(P - 1):
            acc = acc * x[i]
        y[i] = acc


def check():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 4, 64 * 300).astype(np.float32)
    out = np.zeros(300, np.float32)
    with ts.config(parallel_threshold=0):
        block_sum[300](x, out)
    assert np.array_equal(out, 2 * x.reshape(300, 64).sum(1))
    a = rng.standard_normal((5, 70)).astype(np.float32)
    y = np.zeros_like(a)
    softmax_rows[5](a, y)
    e = np.exp(a - a.max(1, keepdims=True))
    assert np.allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)
    v = rng.integers(0, 8, 1000).astype(np.int32)
    hist = np.zeros(8, np.int32)
    histogram[v.size](v, hist)
    assert np.array_equal(hist, np.bincount(v, minlength=8))
    h = np.array([0.5, 1.5, 2.0, -1.0], np.float16)
    hy = np.zeros_like(h)
    power16[4](h, hy, 3)
    assert np.array_equal(hy, h * h * h)
"""

# One small flat kernel and its helper: the module the in-process tests edit.
SMALL = """
from __future__ import annotations

import tessera as ts
from tessera import f32, kernel, mut, tile


@ts.func
def shift(v):
    return v + 1.0


@kernel
def small(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    if i < n:
        y[i] = shift(x[i]) * 2.0
"""

DRIVER = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from numba.core import event
compiles = event.RecordingListener()
event.register("numba:compile", compiles)  # every Numba compilation, helpers included
import tessera, {module}
if len(sys.argv) > 2:  # wait for the others: the processes compile and write at once
    open(os.path.join(sys.argv[2], f"ready.{{os.getpid()}}"), "w").close()
    while not os.path.exists(os.path.join(sys.argv[2], "go")):
        time.sleep(0.01)
{module}.check()
print(json.dumps({{**tessera.stats(), "numba_compiles": len(compiles.buffer)}}))
"""


def _write(path, text):
    path.write_text(textwrap.dedent(text))
    return path


def _start(tmp_path, module, *extra):
    env = {**os.environ, "TESSERA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TESSERA_CACHE", None)
    code = DRIVER.format(module=module)
    return subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path), *extra],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc) -> dict:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1])


def _run(tmp_path, module) -> dict:
    return _finish(_start(tmp_path, module))


def _cached_files(tmp_path):
    return sorted((tmp_path / "cache").glob("*/*"))


def test_a_second_process_compiles_nothing(tmp_path):
    _write(tmp_path / "kern.py", KERNELS)
    first = _run(tmp_path, "kern")
    assert first["compiles"] == 4 and first["disk_cache_hits"] == 0
    assert len(_cached_files(tmp_path)) == 4  # the parallel block_sum, three serial kernels
    second = _run(tmp_path, "kern")
    assert second["compiles"] == 0
    assert second["numba_compiles"] == 0
    assert second["disk_cache_hits"] == 4


def _run_script(tmp_path, script: str, **settings: str) -> dict:
    """Run ``script`` in a new process on this test's cache (and ``settings``, environment
    variables); its last line, as JSON."""
    env = {**os.environ, "TESSERA_CACHE_DIR": str(tmp_path / "cache"), **settings}
    env.pop("TESSERA_CACHE", None)
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


WARM_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import tessera, kern
kern.check()
print(json.dumps({**tessera.stats(), "numba_imported": "numba" in sys.modules}))
"""


def test_a_process_that_only_loads_cached_kernels_never_imports_numba(tmp_path):
    _write(tmp_path / "kern.py", KERNELS)
    _run(tmp_path, "kern")  # fills the cache
    report = _run_script(tmp_path, WARM_DRIVER)
    assert report["disk_cache_hits"] == 4 and report["compiles"] == 0
    assert report["numba_imported"] is False


THREADS_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[1])
import tessera, kern
from tessera.kernel.targets.cpu import native
kern.check()
print(json.dumps({**tessera.stats(), "threads": native.threads()}))
"""


def test_a_cached_parallel_kernel_runs_on_this_processs_thread_count(tmp_path):
    _write(tmp_path / "kern.py", KERNELS)
    _run_script(tmp_path, THREADS_DRIVER, NUMBA_NUM_THREADS="1")
    report = _run_script(tmp_path, THREADS_DRIVER, NUMBA_NUM_THREADS="2")
    assert report["disk_cache_hits"] == 4 and report["compiles"] == 0
    assert report["threads"] == 2


MIXED_DRIVER = """
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import tessera, kern
kern.check()  # every kernel from the cache: the threading layer started without Numba
a = np.random.default_rng(1).standard_normal((64, 50)).astype(np.float32)
y = np.zeros_like(a)
with tessera.config(parallel_threshold=0):  # a variant not cached: compiled by Numba
    kern.softmax_rows[64](a, y)
e = np.exp(a - a.max(1, keepdims=True))
assert np.allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5)
print(json.dumps(tessera.stats()))
"""


def test_cached_and_freshly_compiled_parallel_kernels_share_one_process(tmp_path):
    _write(tmp_path / "kern.py", KERNELS)
    _run(tmp_path, "kern")
    report = _run_script(tmp_path, MIXED_DRIVER)
    assert report["disk_cache_hits"] == 4 and report["compiles"] == 1


def test_processes_fill_one_cache_at_once(tmp_path):
    _write(tmp_path / "small_mod.py", SMALL + "\n\n" + _SMALL_CHECK)
    procs = [_start(tmp_path, "small_mod", str(tmp_path)) for _ in range(4)]
    deadline = time.time() + 120
    while len(list(tmp_path.glob("ready.*"))) < 4 and time.time() < deadline:
        time.sleep(0.02)
    (tmp_path / "go").touch()
    results = [_finish(p) for p in procs]
    assert all(r["compiles"] + r["disk_cache_hits"] == 1 for r in results)
    files = _cached_files(tmp_path)
    assert len(files) == 1 and files[0].suffix == ".nbk"  # one entry, no temporary files left
    key = disk_cache.mac_key(tmp_path / "cache")
    disk_cache.parse(files[0].read_bytes(), key)  # complete: MAC, header and length agree
    after = _run(tmp_path, "small_mod")
    assert after["compiles"] == 0 and after["numba_compiles"] == 0
    assert after["disk_cache_hits"] == 1


_SMALL_CHECK = """
def check():
    import numpy as np

    x = np.arange(100, dtype=np.float32)
    y = np.zeros_like(x)
    small[100](x, y)
    assert np.array_equal(y, (x + 1) * 2)
"""


# --- in this process: a fresh Kernel object has an empty memory cache, so it reads the disk


def _load(path):
    """The kernels of the module file ``path``, read afresh (as a new process would)."""
    return runpy.run_path(str(path))


def _launch_small(namespace, expected_shift=1.0, scale=2.0):
    x = np.arange(50, dtype=np.float32)
    y = np.zeros_like(x)
    namespace["small"][50](x, y)
    np.testing.assert_array_equal(y, (x + expected_shift) * scale)


def _counts(before):
    now = ts.stats()
    return now["compiles"] - before["compiles"], now["disk_cache_hits"] - before["disk_cache_hits"]


def test_a_fresh_kernel_object_loads_from_disk(cache_dir, tmp_path):
    path = _write(tmp_path / "small_mod.py", SMALL)
    before = ts.stats()
    _launch_small(_load(path))
    assert _counts(before) == (1, 0)
    _launch_small(_load(path))
    assert _counts(before) == (1, 1)


@pytest.mark.parametrize(
    "edit",
    [
        lambda text: text.replace("* 2.0", "* 3.0  # an edit"),  # the kernel's body
        lambda text: text.replace("v + 1.0", "v + 1.0 + 0.0"),  # only the helper
    ],
    ids=["kernel source", "helper source"],
)
def test_editing_the_source_is_a_miss(cache_dir, tmp_path, edit):
    path = _write(tmp_path / "small_mod.py", SMALL)
    _launch_small(_load(path))
    _write(path, edit(SMALL))
    before = ts.stats()
    _launch_small(_load(path), scale=3.0 if "an edit" in path.read_text() else 2.0)
    assert _counts(before) == (1, 0)
    _write(path, SMALL)  # back to the first text: its entry is still there
    before = ts.stats()
    _launch_small(_load(path))
    assert _counts(before) == (0, 1)


def power(x: ts.f32[n], y: ts.mut[ts.f32[n]], P: ts.constexpr):
    i = ts.tile.linear_id()
    if i < n:
        acc = 1.0
        for _ in range(P):
            acc *= x[i]
        y[i] = acc


def test_a_new_constexpr_value_is_a_miss_and_an_old_one_a_hit(cache_dir):
    x = np.full(8, 2.0, np.float32)
    y = np.zeros_like(x)
    ts.kernel(power)[8](x, y, 3)
    before = ts.stats()
    k = ts.kernel(power)
    k[8](x, y, 4)
    assert y[0] == 16.0 and _counts(before) == (1, 0)
    k2 = ts.kernel(power)
    k2[8](x, y, 3)
    assert y[0] == 8.0 and _counts(before) == (1, 1)


def test_other_versions_or_cpu_are_a_miss(cache_dir, monkeypatch):
    x = np.full(8, 2.0, np.float32)
    y = np.zeros_like(x)
    ts.kernel(power)[8](x, y, 2)
    real = disk_cache.environment()
    monkeypatch.setattr(disk_cache, "environment", lambda: (*real[:-1], ("target", "other cpu")))
    before = ts.stats()
    ts.kernel(power)[8](x, y, 2)
    assert _counts(before) == (1, 0) and y[0] == 4.0


def test_a_numba_the_loader_was_not_tested_with_compiles_and_says_so_once(
    cache_dir, monkeypatch, caplog
):
    monkeypatch.setattr(native, "TESTED_NUMBA", ((0, 1), (0, 2)))
    native.numba_tested.cache_clear()
    x = np.full(8, 2.0, np.float32)
    y = np.zeros_like(x)
    try:
        before = ts.stats()
        for _ in range(2):
            ts.kernel(power)[8](x, y, 5)
        assert _counts(before) == (2, 0) and y[0] == 32.0
        assert not list(cache_dir.glob("*/*"))  # nothing written either
        lines = [r.getMessage() for r in caplog.records if "warm-start loader" in r.getMessage()]
        assert len(lines) == 1 and "tested with Numba 0.1 to 0.2, not " in lines[0]
    finally:
        native.numba_tested.cache_clear()


CORRUPTIONS = {
    "truncated": lambda data: data[: len(data) // 2],
    "empty": lambda data: b"",
    "garbled payload": lambda data: data[:-200] + bytes(b ^ 0x5A for b in data[-200:]),
    "garbled header": lambda data: data[:30] + b"{not json" + data[40:],
    "other format": lambda data: b"something else entirely\n" + data,
    "valid MAC, broken image": lambda data: _with_payload(data, b"\x80\x04garbage"),
    "image calling a missing symbol": lambda data: _with_payload(data, _needing_missing(data)),
}


def _needing_missing(data):
    """The entry's image, now also naming a symbol no process has among its externals."""
    image = native.Image.from_bytes(disk_cache.parse(data, disk_cache.mac_key())[1])
    externals = (*image.externals, "tessera_test_no_such_symbol")
    return dataclasses.replace(image, externals=externals).to_bytes()


def _with_payload(data, payload):
    """The entry with another payload, sealed with the user's own key (as only a bug in the
    backend, not an edit, could make it)."""
    key = disk_cache.mac_key()
    header, _ = disk_cache.parse(data, key)
    header["payload_bytes"] = len(payload)
    return disk_cache.pack(json.dumps(header).encode(), payload, key)


@pytest.mark.parametrize("corrupt", CORRUPTIONS.values(), ids=CORRUPTIONS.keys())
def test_a_corrupt_entry_warns_and_is_rebuilt(cache_dir, tmp_path, corrupt):
    path = _write(tmp_path / "small_mod.py", SMALL)
    _launch_small(_load(path))
    (entry,) = cache_dir.glob("cpu/*.nbk")
    entry.write_bytes(corrupt(entry.read_bytes()))
    before = ts.stats()
    with pytest.warns(CacheWarning, match="ignoring the entry"):
        _launch_small(_load(path))
    assert _counts(before) == (1, 0)
    disk_cache.parse(entry.read_bytes(), disk_cache.mac_key())  # rewritten whole
    _launch_small(_load(path))
    assert _counts(before) == (1, 1)


def test_cache_off_reads_and_writes_nothing(tmp_path):
    path = _write(tmp_path / "small_mod.py", SMALL)
    with ts.config(cache_dir=str(tmp_path / "cache"), cache="off"):
        before = ts.stats()
        _launch_small(_load(path))
        _launch_small(_load(path))
        assert _counts(before) == (2, 0)
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_cache_warns_once_and_still_runs(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    path = _write(tmp_path / "small_mod.py", SMALL)
    with ts.config(cache_dir=str(blocker / "cache")):
        with pytest.warns(CacheWarning, match="cannot write") as record:
            _launch_small(_load(path))
            ts.kernel(power)[4](np.ones(4, np.float32), np.zeros(4, np.float32), 2)
    assert len([w for w in record if w.category is CacheWarning]) == 1


def test_an_image_with_an_unknown_symbol_is_refused_before_linking():
    image = native.Image(
        object_code=b"not even an object file: linking would fail loudly",
        wrapper="w",
        env="e",
        externals=("tessera_test_no_such_symbol",),
        threading_layer=None,
    )
    with pytest.raises(native.NativeLoadError, match="tessera_test_no_such_symbol"):
        native.load(image, "k")


def test_the_runtime_sources_cover_every_module_lending_names_to_generated_code():
    from tessera.kernel.targets.cpu import program, runtime

    lenders = {runtime.__name__}
    for value in runtime.namespace().values():
        owner = getattr(value, "__module__", None) or ""
        if owner.startswith("tessera."):
            lenders.add(owner)
        py_func = getattr(value, "py_func", None)  # a Numba function compiled from ours
        if py_func is not None and py_func.__module__.startswith("tessera."):
            lenders.add(py_func.__module__)
    files = {sys.modules[name].__file__.rsplit(os.sep, 1)[-1] for name in lenders}
    assert files <= {name.rsplit("/", 1)[-1] for name in program.RUNTIME_SOURCES}


ARGUMENT_SAMPLES = [
    np.zeros(4, np.float32),
    np.zeros(4, np.float64),
    np.zeros((2, 2), np.float32),
    np.zeros((2, 2), np.float32, order="F"),
    np.zeros((4, 4), np.float32)[:, ::2],
    np.zeros(8, np.float32)[::2],
    np.zeros(4, np.float32).copy().view(np.int32),
    np.frombuffer(bytes(16), np.float32),  # read-only
    np.zeros(17, np.uint8)[1:].view(np.float32),  # unaligned
    np.zeros(4, np.uint16),
    np.float32(1.0),
    np.int32(1),
    np.bool_(True),
    1,
    2**63,
    1.0,
    True,
]


def test_argument_types_are_at_least_as_fine_as_numbas():
    import numba

    from tessera.kernel.targets.cpu.program import argument_types

    keys = [argument_types((a,)) for a in ARGUMENT_SAMPLES]
    typed = {}
    for key, value in zip(keys, ARGUMENT_SAMPLES):
        typed.setdefault(key, set()).add(str(numba.typeof(value)))
    assert all(len(types) == 1 for types in typed.values()), typed


def test_cache_list_and_clear(cache_dir, tmp_path, capsys):
    cli.main(["cache", "list"])
    assert "0 entries" in capsys.readouterr().out
    _launch_small(_load(_write(tmp_path / "small_mod.py", SMALL)))
    cli.main(["cache", "list"])
    out = capsys.readouterr().out
    assert str(cache_dir) in out and "1 entry," in out
    (line,) = [t for t in out.splitlines() if t.startswith("small ")]
    assert "serial" in line and "KiB" in line and "small_mod.py" in line
    assert time.strftime("%Y-%m-%d") in line
    cli.main(["cache", "clear"])
    assert "removed 1 file " in capsys.readouterr().out
    assert not list(cache_dir.glob("*/*"))


def test_the_default_directory_follows_the_platform(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert disk_cache.default_directory() == tmp_path / "tessera"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/ignored")
    assert disk_cache.default_directory() == disk_cache.Path.home() / ".cache" / "tessera"
    with ts.config(cache_dir=""):
        assert disk_cache.directory() == disk_cache.default_directory()


def test_the_suite_never_uses_the_users_cache():
    assert disk_cache.directory() != disk_cache.default_directory()
