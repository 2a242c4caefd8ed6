"""Repro packs: a crash capture as one zip that replays the launch on any machine.

``tessera pack-repro DIR -o repro.zip`` zips a capture (``crash.py``; a crash directory
gives its newest capture) with an environment hash and ``replay.py``; given a script
instead, it runs the script with TESSERA_CRASH_DIR set to a temporary directory and packs
what the run captured. ``tessera replay repro.zip [--target T]`` (or ``python
repro.zip``) rebuilds the kernel from the pack's ``kernel.py``, launches it on the
recorded arguments with the recorded bounds-check setting and compares: the same error
again (a race the debug target found is found again there), or, for a capture that
recorded outputs (``tessera.observe.record``), the same outputs.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..config import config
from ..errors import TesseraError

REPLAY = '''"""Replay this repro pack: python replay.py [--target T] (or python repro.zip)."""

import os
import sys

from tessera.observe.repro import main

sys.exit(main([os.path.dirname(__file__) or ".", *sys.argv[1:]]))
'''


def newest_capture(path: Path) -> Path:
    """``path`` if it is a capture, else the newest capture inside it."""
    if (path / "metadata.json").exists():
        return path
    found = sorted(p.parent for p in path.glob("*/metadata.json"))
    if not found:
        raise TesseraError(f"{path} holds no crash capture (no */metadata.json)")
    return max(found, key=lambda p: (p.stat().st_mtime, p.name))


def capture_of_script(script: Path, script_args: list[str]) -> Path:
    """Run ``script`` with TESSERA_CRASH_DIR set to a new temporary directory; the newest
    capture it wrote."""
    folder = Path(tempfile.mkdtemp(prefix="tessera-repro-"))
    env = dict(os.environ, TESSERA_CRASH_DIR=str(folder))
    subprocess.run([sys.executable, str(script), *script_args], env=env, check=False)
    return newest_capture(folder)


def environment_hash(capture: Path) -> str:
    """A digest of the versions and settings the capture ran under: two packs with the same
    hash ran on the same software with the same settings."""
    digest = hashlib.sha256()
    for name in ("versions.json", "settings.json"):
        file = capture / name
        digest.update(file.read_bytes() if file.exists() else b"")
    return digest.hexdigest()


def pack(source: Path, output: Path, script_args: list[str] = ()) -> Path:
    """Zip the capture at ``source`` (a capture, a crash directory or a script to run)
    into ``output``: its files, ``env_hash.txt``, ``replay.py`` and ``__main__.py``."""
    capture = capture_of_script(source, list(script_args)) if source.is_file() else source
    capture = newest_capture(capture)
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as z:
        for file in sorted(capture.iterdir()):
            if file.is_file():
                z.write(file, file.name)
        z.writestr("env_hash.txt", environment_hash(capture) + "\n")
        z.writestr("replay.py", REPLAY)
        z.writestr("__main__.py", REPLAY)
    if source.is_file():  # the script's temporary crash directory: packed, not needed
        shutil.rmtree(capture.parent, ignore_errors=True)
    return output


@contextlib.contextmanager
def _unpacked(path: Path) -> Iterator[Path]:
    """A directory holding the pack's files (``path`` itself when it is one)."""
    if path.is_dir():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="tessera-replay-") as folder:
        with zipfile.ZipFile(path) as z:
            z.extractall(folder)
        yield Path(folder)


def _load_kernel(folder: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"tessera_repro_{name}", folder / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _arguments(folder: Path, meta: dict, out) -> list:
    data = dict(np.load(folder / "args.npz")) if (folder / "args.npz").exists() else {}
    args = []
    for row in meta["args"]:
        if row["kind"] == "scalar":
            args.append(row["value"])
        elif row.get("data") in data:
            args.append(data[row["data"]])
        else:
            out(f"note: {row['name']}'s data was not kept; zeros of shape {row['shape']}")
            args.append(np.zeros(row["shape"], row["dtype"]))
    return args


def replay(path: Path, target: str | None = None, out=print) -> int:
    """Re-run the packed launch; 0 when it reproduces (the same error type, or the same
    outputs), 1 when it does not."""
    with _unpacked(path) as folder:
        return _replay(folder, target, out)


def _replay(folder: Path, target: str | None, out) -> int:
    meta = json.loads((folder / "metadata.json").read_text())
    settings = {r["name"]: r["value"] for r in json.loads((folder / "settings.json").read_text())}
    target = target or meta.get("target") or "auto"
    kernel = _load_kernel(folder, meta["kernel"])
    args = _arguments(folder, meta, out)
    grid = tuple(meta["grid"])
    expected = meta.get("error_type")
    out(f"replaying {meta['kernel']}[{grid}] on {target} (recorded: {expected or 'no error'})")
    checked = settings.get("TESSERA_BOUNDSCHECK") == "1" or meta.get("error_kind") == "bounds"
    scope = dict(target=target, boundscheck=checked)  # never replay a bad index unchecked
    try:
        with config(**scope, crash_dir=""):
            kernel[grid](*args)
    except TesseraError as error:
        out(f"{type(error).__name__}: {error}")
        same = type(error).__name__ == expected
        out("reproduced" if same else f"a different error than the recorded {expected}")
        return 0 if same else 1
    if expected:
        out(f"not reproduced: the launch ran without the recorded {expected}")
        return 1
    return _compare_outputs(folder, meta, args, out)


def _compare_outputs(folder: Path, meta: dict, args: list, out) -> int:
    if not meta.get("outputs"):
        out("the launch ran; the capture recorded no outputs to compare with")
        return 0
    recorded = np.load(folder / "outputs.npz")
    worst = 0
    for name in meta["outputs"]:
        got, want = args[int(name[3:])], recorded[name]
        if np.array_equal(got, want, equal_nan=True):
            out(f"{name}: identical")
            continue
        close = np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        out(f"{name}: {'close' if close else 'DIFFERENT'} (max abs difference {diff:g})")
        worst = max(worst, 0 if close else 1)
    return worst


def main(argv: list[str]) -> int:
    """``replay PACK [--target T]``: what replay.py and ``tessera replay`` run."""
    target = None
    if "--target" in argv:
        at = argv.index("--target")
        target = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    return replay(Path(argv[0]), target)


def read_text(pack_path: Path, name: str) -> str:
    """One file of a pack (for tests and for showing a pack's error)."""
    with zipfile.ZipFile(pack_path) as z:
        return io.TextIOWrapper(z.open(name), encoding="utf-8").read()
