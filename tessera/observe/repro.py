"""Repro packs: a crash capture as one zip that replays the launch on any machine.

``tessera pack-repro DIR -o repro.zip`` zips a capture (``crash.py``; a crash directory
gives its newest capture) with an environment hash and ``replay.py``; given a script
instead, it runs the script with TESSERA_CRASH_DIR set to a temporary directory and packs
what the run captured. ``tessera replay repro.zip [--target T]`` (or ``python
repro.zip``) rebuilds the kernel from the pack's ``kernel.py``, launches it on the
recorded arguments with the recorded bounds-check setting and compares: the same error
again (a race the debug target found is found again there), or, for a capture that
recorded outputs (``tessera.observe.record``), the same outputs.

**A replay runs the pack's ``kernel.py``, which is Python code.** A pack sealed by this
user on this machine (``repro_pack.py``) replays at once; any other needs ``trust=True``
(``--trust``) or a yes to a question on a terminal, and is refused otherwise. Every file
of a pack is read within a size limit and checked before anything runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from ..config import config
from ..errors import TesseraError
from ..kernel.kernel import Launchable
from . import repro_pack
from .repro_pack import PackError, ReplayRefused  # noqa: F401 - raised by replay()

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
    into ``output``: its files, ``env_hash.txt``, ``replay.py``, ``__main__.py`` and the
    seal of them all (``seal.txt``, repro_pack.py)."""
    capture = capture_of_script(source, list(script_args)) if source.is_file() else source
    capture = newest_capture(capture)
    files = {
        f.name: f.read_bytes()
        for f in sorted(capture.iterdir())
        if f.is_file() and f.name != repro_pack.SEAL_FILE
    }
    files["env_hash.txt"] = (environment_hash(capture) + "\n").encode()
    files["replay.py"] = files["__main__.py"] = REPLAY.encode()
    sealed = repro_pack.seal(files)
    if sealed is not None:
        files[repro_pack.SEAL_FILE] = sealed
    with zipfile.ZipFile(output, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    if source.is_file():  # the script's temporary crash directory: packed, not needed
        shutil.rmtree(capture.parent, ignore_errors=True)
    return output


def _load_kernel(folder: Path, name: str):
    spec = importlib.util.spec_from_file_location(f"tessera_repro_{name}", folder / "kernel.py")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        why = f"{type(exc).__name__}: {exc}"
        raise PackError(f"the pack's kernel.py fails to load: {why}") from None
    kernel = getattr(module, name, None)
    if not isinstance(kernel, Launchable):
        raise PackError(f"the pack's kernel.py defines no kernel named {name!r}")
    return kernel


def _arguments(files: dict[str, bytes], meta: dict, out) -> list:
    data = repro_pack.arrays(files, "args.npz")
    args = []
    for k, row in enumerate(meta["args"]):
        if row["kind"] == "scalar":
            args.append(row["value"])
            continue
        name = row.get("name", f"argument {k}")
        array = data.get(row.get("data")) if isinstance(row.get("data"), str) else None
        if array is None:
            out(f"note: {name}'s data was not kept; zeros of shape {row['shape']}")
            array = np.zeros(row["shape"], row["dtype"])
        elif list(array.shape) != row["shape"] or array.dtype != np.dtype(row["dtype"]):
            raise PackError(
                f"args.npz: {name} is {array.dtype}{list(array.shape)}, but metadata.json "
                f"records {row['dtype']}{row['shape']}"
            )
        args.append(array)
    return args


def replay(
    path: Path, target: str | None = None, out=print, trust: bool = False, confirm=None
) -> int:
    """Re-run the packed launch; 0 when it reproduces (the same error type, or the same
    outputs), 1 when it does not. A pack this user did not seal on this machine runs only
    with ``trust`` or when ``confirm(question)`` says yes (else :class:`ReplayRefused`);
    a malformed pack is a :class:`PackError`, before anything of it runs."""
    files = repro_pack.read(Path(path))
    meta, settings = repro_pack.metadata(files)
    if "kernel.py" not in files:
        raise PackError("the pack has no kernel.py")
    sealed = repro_pack.sealed_here(files)
    if not (sealed or trust or (confirm is not None and confirm(_question(path)))):
        raise ReplayRefused(
            f"{path} was not made on this machine by this user (no valid seal); replaying it "
            "runs its kernel.py, which is Python code: read it, then run again with --trust"
        )
    with tempfile.TemporaryDirectory(prefix="tessera-replay-") as folder:
        (Path(folder) / "kernel.py").write_bytes(files["kernel.py"])
        return _replay(Path(folder), files, meta, settings, target, sealed, out)


def _question(path) -> str:
    return (
        f"{path} was not made on this machine by this user. Replaying it runs its kernel.py "
        "(Python code, with your permissions). Run it? [y/N] "
    )


def _replay(folder, files, meta, settings, target, sealed, out) -> int:
    target = target or meta.get("target") or "auto"
    args = _arguments(files, meta, out)
    kernel = _load_kernel(folder, meta["kernel"])
    grid = tuple(meta["grid"])
    expected = meta.get("error_type")
    out(f"replaying {meta['kernel']}[{grid}] on {target} (recorded: {expected or 'no error'})")
    checked = settings.get("TESSERA_BOUNDSCHECK") == "1" or meta.get("error_kind") == "bounds"
    checked = checked or not sealed  # a pack from elsewhere never runs an index unchecked
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
    return _compare_outputs(files, meta, args, out)


def _compare_outputs(files: dict[str, bytes], meta: dict, args: list, out) -> int:
    if not meta.get("outputs"):
        out("the launch ran; the capture recorded no outputs to compare with")
        return 0
    recorded = repro_pack.arrays(files, "outputs.npz")
    worst = 0
    for name in meta["outputs"]:
        got, want = np.asarray(args[int(name[3:])]), recorded.get(name)
        if want is None or want.shape != got.shape:
            raise PackError(f"outputs.npz: {name} is missing or not of its argument's shape")
        if np.array_equal(got, want, equal_nan=True):
            out(f"{name}: identical")
            continue
        close = np.allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)
        diff = float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
        out(f"{name}: {'close' if close else 'DIFFERENT'} (max abs difference {diff:g})")
        worst = max(worst, 0 if close else 1)
    return worst


def main(argv: list[str]) -> int:
    """``replay PACK [--target T] [--trust]``: what replay.py (``python repro.zip``) runs;
    ``tessera replay`` parses its own options and calls :func:`run`."""
    target = None
    if "--target" in argv[:-1]:
        at = argv.index("--target")
        target = argv[at + 1]
        argv = argv[:at] + argv[at + 2 :]
    trust = "--trust" in argv
    argv = [a for a in argv if a != "--trust"]
    if len(argv) != 1:
        print("usage: replay PACK [--target T] [--trust]", file=sys.stderr)
        return 2
    return run(Path(argv[0]), target, trust)


def run(path: Path, target: str | None, trust: bool) -> int:
    """A replay from the command line: a refused or malformed pack is one line on stderr
    and exit status 2; on a terminal, an unsealed pack asks first."""
    confirm = _ask if sys.stdin is not None and sys.stdin.isatty() else None
    try:
        return replay(path, target, trust=trust, confirm=confirm)
    except TesseraError as error:
        print(f"tessera replay: {str(error).splitlines()[0]}", file=sys.stderr)
        return 2


def _ask(question: str) -> bool:
    try:
        return input(question).strip().lower() in ("y", "yes")
    except EOFError:
        return False


def read_text(pack_path: Path, name: str) -> str:
    """One file of a pack (for tests and for showing a pack's error)."""
    with zipfile.ZipFile(pack_path) as z:
        return io.TextIOWrapper(z.open(name), encoding="utf-8").read()
