"""A cache that other people can write into, and files planted or edited in it, never run.

Each test plays one attack, as a hostile or careless user would, and checks that the
entry is refused with a :class:`~tessera.CacheWarning` and the kernel compiled (and run
correctly) instead: never linked, never a crash, never a hang. Forged entries are made
the way someone without the user's key can make them: from the file's own bytes, with its
length and (unkeyed) checksum recomputed.

The tests run as root, so ownership is tested by pretending to be another user
(``os.getuid``), and the permission bits for real with ``chmod``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager

import numpy as np
import pytest
from test_disk_cache import _SMALL_CHECK, SMALL, _counts, _launch_small, _load, _write

import tessera as ts
from tessera import cli
from tessera.errors import CacheWarning
from tessera.kernel import disk_cache
from tessera.kernel.targets.cpu import native

KEY_FILE = "secret.key"  # the name docs/targets.md gives it
NESTED = b"[" * 10_000 + b"]" * 10_000  # ten times the recursion limit


def _split(data: bytes) -> tuple[bytes, bytes, bytes]:
    """An entry as (the lines before its JSON header, the header line, the payload)."""
    start = 0
    while not data.startswith(b"{", start):
        start = data.index(b"\n", start) + 1
    end = data.index(b"\n", start)
    return data[:start], data[start:end], data[end + 1 :]


def _forged(data: bytes, payload: bytes | None = None, header: bytes | None = None) -> bytes:
    """``data`` with another payload or header line, its length and checksum recomputed:
    all that someone who can write entries, but not read the user's key, can do."""
    head, old_header, old_payload = _split(data)
    payload = old_payload if payload is None else payload
    if header is None:
        fields = json.loads(old_header)
        fields["payload_bytes"] = len(payload)
        if "payload_sha256" in fields:
            fields["payload_sha256"] = hashlib.sha256(payload).hexdigest()
        header = json.dumps(fields).encode()
    return head + header + b"\n" + payload


def _only_entry(cache):
    (entry,) = cache.glob("cpu/*.nbk")
    return entry


def _small_entry(cache, tmp_path):
    """The cache file of ``small`` (compiled once, in this process)."""
    _launch_small(_load(_write(tmp_path / "small_mod.py", SMALL)))
    return _only_entry(cache)


def _expect_refused(tmp_path, match="ignoring the entry"):
    """Launch ``small`` from a fresh kernel object: warned, compiled, and correct."""
    before = ts.stats()
    with pytest.warns(CacheWarning, match=match):
        _launch_small(_load(tmp_path / "small_mod.py"))
    assert _counts(before) == (1, 0)


def test_a_planted_entry_with_a_recomputed_checksum_is_refused(cache_dir, tmp_path):
    victim = _small_entry(cache_dir, tmp_path)
    path = tmp_path / "small_mod.py"
    _write(path, SMALL.replace("* 2.0", "* 3.0"))  # the code the attacker plants
    _launch_small(_load(path), scale=3.0)
    (planted,) = set(cache_dir.glob("cpu/*.nbk")) - {victim}
    victim.write_bytes(_forged(victim.read_bytes(), payload=_split(planted.read_bytes())[2]))
    _write(path, SMALL)
    _expect_refused(tmp_path)  # computes (x + 1) * 2, not the planted (x + 1) * 3


def test_an_entry_copied_under_another_kernels_name_is_refused(cache_dir, tmp_path):
    other = SMALL.replace("def small(", "def other(").replace("* 2.0", "* 3.0")
    x = np.arange(50, dtype=np.float32)
    _load(_write(tmp_path / "other_mod.py", other))["other"][50](x, np.zeros_like(x))
    (source,) = cache_dir.glob("cpu/other.*.nbk")
    _launch_small(_load(_write(tmp_path / "small_mod.py", SMALL)))
    (victim,) = cache_dir.glob("cpu/small.*.nbk")
    shutil.copyfile(source, victim)  # a valid entry, only for another kernel
    _expect_refused(tmp_path)


def test_an_object_file_with_a_flipped_byte_is_never_linked(cache_dir, tmp_path, monkeypatch):
    victim = _small_entry(cache_dir, tmp_path)
    payload = _split(victim.read_bytes())[2]
    start = payload.index(b"\n") + 1  # the object code, after the image's own header
    at = start + (len(payload) - start) // 2
    flipped = payload[:at] + bytes([payload[at] ^ 0x01]) + payload[at + 1 :]
    victim.write_bytes(_forged(victim.read_bytes(), payload=flipped))
    linked = []

    def load(image, name):  # stands in for the linker: an edited object file can crash it
        linked.append(name)
        raise native.NativeLoadError("the test refuses to link")

    monkeypatch.setattr(native, "load", load)
    _expect_refused(tmp_path)
    assert linked == []


def test_a_deeply_nested_header_is_a_warning_not_a_recursion_error(cache_dir, tmp_path):
    victim = _small_entry(cache_dir, tmp_path)
    victim.write_bytes(_forged(victim.read_bytes(), header=NESTED))
    _expect_refused(tmp_path)


def test_a_deeply_nested_header_under_a_valid_mac_is_still_a_warning(cache_dir, tmp_path):
    victim = _small_entry(cache_dir, tmp_path)
    key = disk_cache.mac_key()
    _, payload = disk_cache.parse(victim.read_bytes(), key)
    victim.write_bytes(disk_cache.pack(NESTED, payload, key))
    _expect_refused(tmp_path, match="malformed header")


def test_a_group_writable_entry_is_refused(cache_dir, tmp_path):
    victim = _small_entry(cache_dir, tmp_path)
    victim.chmod(0o664)
    _expect_refused(tmp_path, match="writable by others")
    assert victim.stat().st_mode & 0o777 == 0o600  # written again, privately


# --- entries that are not files: the process reading them must neither block nor fill
# its memory, so they are read by a child process with a deadline and a memory limit

GUARDED = """
import json, resource, sys, warnings
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
sys.path.insert(0, sys.argv[1])
import tessera, small_mod
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    small_mod.check()
print(json.dumps({**tessera.stats(), "warnings": [str(w.message) for w in caught]}))
"""


def _run_guarded(tmp_path) -> dict:
    env = {**os.environ, "TESSERA_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TESSERA_CACHE", None)
    proc = subprocess.run(
        [sys.executable, "-c", GUARDED, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("plant", ["fifo", "symlink to /dev/zero"])
def test_an_entry_that_is_not_a_regular_file_is_not_read(tmp_path, plant):
    _write(tmp_path / "small_mod.py", SMALL + "\n\n" + _SMALL_CHECK)
    assert _run_guarded(tmp_path)["compiles"] == 1
    victim = _only_entry(tmp_path / "cache")
    victim.unlink()
    if plant == "fifo":
        os.mkfifo(victim)
    else:
        victim.symlink_to("/dev/zero")
    report = _run_guarded(tmp_path)  # neither blocks (a FIFO) nor reads forever (/dev/zero)
    assert report["compiles"] == 1 and report["disk_cache_hits"] == 0
    assert any("ignoring the entry" in w for w in report["warnings"])


# --- the cache directory itself


@pytest.mark.parametrize("mode", [0o770, 0o703, 0o777], ids=["0770", "0703", "0777"])
def test_a_group_or_world_writable_cache_directory_is_refused(tmp_path, mode):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(mode)
    path = _write(tmp_path / "small_mod.py", SMALL)
    before = ts.stats()
    with ts.config(cache_dir=str(cache)):
        with pytest.warns(CacheWarning, match="writable by others") as record:
            _launch_small(_load(path))
            _launch_small(_load(path))  # still correct; the refusal is said once
    assert len([w for w in record if w.category is CacheWarning]) == 1
    assert _counts(before) == (2, 0)
    assert not list(cache.iterdir())  # nothing written into it


def test_a_cache_directory_owned_by_another_user_is_refused(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    path = _write(tmp_path / "small_mod.py", SMALL)
    monkeypatch.setattr(os, "getuid", lambda: 4242)
    before = ts.stats()
    with ts.config(cache_dir=str(cache)):
        with pytest.warns(CacheWarning, match="owned by"):
            _launch_small(_load(path))
    assert _counts(before) == (1, 0)
    assert not list(cache.iterdir())


def test_a_new_cache_directory_and_its_key_are_private(cache_dir, tmp_path):
    _small_entry(cache_dir, tmp_path)
    assert cache_dir.stat().st_mode & 0o777 == 0o700
    assert (cache_dir / "cpu").stat().st_mode & 0o777 == 0o700
    assert (cache_dir / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert _only_entry(cache_dir).stat().st_mode & 0o777 == 0o600


def test_deleting_the_key_file_rebuilds_every_entry_with_a_new_key(cache_dir, tmp_path):
    _small_entry(cache_dir, tmp_path)
    old_key = (cache_dir / KEY_FILE).read_bytes()
    (cache_dir / KEY_FILE).unlink()
    before = ts.stats()
    _launch_small(_load(tmp_path / "small_mod.py"))  # its entry cannot be checked: compiled
    assert (cache_dir / KEY_FILE).read_bytes() != old_key
    _launch_small(_load(tmp_path / "small_mod.py"))  # and sealed with the new key
    assert _counts(before) == (1, 1)


def test_a_key_file_others_can_read_refuses_the_cache(cache_dir, tmp_path):
    _small_entry(cache_dir, tmp_path)
    (cache_dir / KEY_FILE).chmod(0o640)
    before = ts.stats()
    with pytest.warns(CacheWarning, match="readable by others"):
        _launch_small(_load(tmp_path / "small_mod.py"))
    assert _counts(before) == (1, 0)


# --- tessera cache list


@contextmanager
def _deadline(seconds: float):
    """Raise TimeoutError in this (the main) thread if the block takes longer."""

    def expire(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


BROKEN_ENTRIES = {
    "header not an object": lambda entry: entry.write_bytes(
        _forged(entry.read_bytes(), header=b"[1, 2]")
    ),
    "deeply nested header": lambda entry: entry.write_bytes(
        _forged(entry.read_bytes(), header=NESTED)
    ),
    "fifo": lambda entry: (entry.unlink(), os.mkfifo(entry)),
    "autotune entry not an object": lambda entry: (
        (entry.parent.parent / "autotune").mkdir(mode=0o700),
        (entry.parent.parent / "autotune" / "k.0.json").write_text("[1, 2]"),
    ),
}


@pytest.mark.parametrize("broken", BROKEN_ENTRIES.values(), ids=BROKEN_ENTRIES.keys())
def test_cache_list_shows_a_broken_entry_as_unusable(cache_dir, tmp_path, capsys, broken):
    broken(_small_entry(cache_dir, tmp_path))
    with _deadline(20):
        assert cli.main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "unusable" in out
    with _deadline(20):
        cli.main(["cache", "clear"])
    assert not list(cache_dir.glob("*/*"))
