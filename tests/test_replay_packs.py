"""``tessera replay`` of crafted packs: bounded reads, checked metadata, nothing unpickled,
and a clear PackError (one line and exit status 2 from the command) before anything runs
(issue 26, item 11b)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from replay_helpers import crafted, made_here, npz

from tessera.observe.repro import PackError, replay


@pytest.fixture
def made(tmp_path):
    return made_here(tmp_path)[1]


def _meta(files: dict, **changes) -> bytes:
    meta = json.loads(files["metadata.json"])
    meta.update(changes)
    return json.dumps(meta).encode()


def _replay(tmp_path, files, **changes):
    return replay(crafted(tmp_path, files, **changes), trust=True, out=lambda line: None)


def test_metadata_without_a_kernel_name_is_a_pack_error(tmp_path, made):
    meta = json.loads(made["metadata.json"])
    del meta["kernel"]
    with pytest.raises(PackError, match="'kernel'"):
        _replay(tmp_path, made, **{"metadata.json": json.dumps(meta).encode()})


def test_a_huge_shape_without_data_is_refused_before_allocating(tmp_path, made):
    meta = json.loads(made["metadata.json"])
    meta["args"][0] = {"name": "x", "kind": "array", "shape": [2**40], "dtype": "float32"}
    with pytest.raises(PackError, match="zeros of shape"):
        _replay(tmp_path, made, **{"metadata.json": json.dumps(meta).encode()})


def test_deeply_nested_metadata_is_a_pack_error(tmp_path, made):
    deep = b'{"kernel": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with pytest.raises(PackError, match="nested"):
        _replay(tmp_path, made, **{"metadata.json": deep})


def test_an_array_of_pickled_objects_is_never_unpickled(tmp_path, made):
    objects = npz(arg0=np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(PackError, match="Python objects"):
        _replay(tmp_path, made, **{"args.npz": objects})


def test_an_npy_header_larger_than_its_data_is_a_pack_error(tmp_path, made):
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        buffer, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)}
    )
    forged = io.BytesIO()
    import zipfile

    with zipfile.ZipFile(forged, "w") as z:
        z.writestr("arg0.npy", buffer.getvalue() + b"\0" * 64)
    with pytest.raises(PackError, match="declares shape"):
        _replay(tmp_path, made, **{"args.npz": forged.getvalue()})


def test_data_of_another_shape_than_recorded_is_a_pack_error(tmp_path, made):
    other = npz(arg0=np.zeros(1000, np.float32), arg1=np.zeros(16, np.float32))
    with pytest.raises(PackError, match="metadata.json records"):
        _replay(tmp_path, made, **{"args.npz": other})


def test_an_object_dtype_in_metadata_is_a_pack_error(tmp_path, made):
    meta = json.loads(made["metadata.json"])
    meta["args"][0].update(dtype="object")
    meta["args"][0].pop("data", None)
    with pytest.raises(PackError, match="not a numeric dtype"):
        _replay(tmp_path, made, **{"metadata.json": json.dumps(meta).encode()})


def test_a_negative_grid_is_a_pack_error(tmp_path, made):
    with pytest.raises(PackError, match="'grid'"):
        _replay(tmp_path, made, **{"metadata.json": _meta(made, grid=[-5])})


def test_outputs_naming_no_argument_are_a_pack_error(tmp_path, made):
    with pytest.raises(PackError, match="'outputs'"):
        _replay(tmp_path, made, **{"metadata.json": _meta(made, outputs=["arg99"])})


def test_a_pack_member_outside_the_pack_is_never_written(tmp_path, made):
    path = crafted(tmp_path, made, **{"../escaped.txt": b"x", "seal.txt": None})
    assert replay(path, trust=True, out=lambda line: None) == 0
    assert not (tmp_path.parent / "escaped.txt").exists()


def test_not_a_zip_is_a_pack_error(tmp_path):
    bogus = tmp_path / "bogus.zip"
    bogus.write_bytes(b"not a zip")
    with pytest.raises(PackError, match="cannot read"):
        replay(bogus, trust=True, out=lambda line: None)


def test_the_command_prints_one_line_for_a_crafted_pack(tmp_path, made):
    path = crafted(tmp_path, made, **{"metadata.json": _meta(made, grid="lots")})
    result = subprocess.run(
        [sys.executable, "-m", "tessera.cli", "replay", str(path), "--trust"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TESSERA_TARGET": "cpu"},
    )
    assert result.returncode == 2
    assert result.stderr.startswith("tessera replay: metadata.json: 'grid'")
    assert "Traceback" not in result.stderr
