"""tools/device/tcache.py on the CPU: install puts entries where Triton looks for them (their group
naming the copies) only under the key they were built for; build refuses a Triton other than
the device's. Whether the device's launches find the entries is seen on the device only."""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tcache():
    spec = importlib.util.spec_from_file_location("tcache", ROOT / "tools" / "device" / "tcache.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _entries(tmp_path: Path, key_sha: str) -> Path:
    src = tmp_path / "tc"
    (src / "H1").mkdir(parents=True)
    (src / "H1" / "k.cubin").write_bytes(b"\x7fELF")
    (src / "H1" / "k.json").write_text("{}")
    (src / "H1" / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": "k.cubin", "k.json": "k.json"}}))
    (src / "tcache-manifest.json").write_text(json.dumps({
        "triton": "3.6.0", "key_sha256": key_sha, "cp312_libtriton_sha256": "0" * 64, "specs": ["code"],
        "entries": {"H1": ["k.cubin", "k.json"]}}))
    return src


def test_install_under_the_same_key_points_the_group_at_the_copies(tmp_path, monkeypatch, capsys):
    from triton.runtime.cache import triton_key

    src = _entries(tmp_path, hashlib.sha256(triton_key().encode()).hexdigest())
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    assert _tcache().install(str(src)) == 0
    assert "TCACHE installed 1 of 1" in capsys.readouterr().out
    grp = json.loads((cache / "H1" / "__grp__k.json").read_text())["child_paths"]
    assert grp == {"k.cubin": str(cache / "H1" / "k.cubin"), "k.json": str(cache / "H1" / "k.json")}
    assert (cache / "H1" / "k.cubin").read_bytes() == b"\x7fELF"
    assert _tcache().install(str(src)) == 0  # again: what is there stays
    assert "installed 0 of 1" in capsys.readouterr().out


def test_install_from_the_archive_a_call_carries(tmp_path, monkeypatch, capsys):
    import tarfile

    from triton.runtime.cache import triton_key

    src = _entries(tmp_path, hashlib.sha256(triton_key().encode()).hexdigest())
    with tarfile.open(tmp_path / "tc.txz", "w:xz") as tar:
        tar.add(src, arcname=".")
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    assert _tcache().install(str(tmp_path / "tc.txz")) == 0
    assert "TCACHE installed 1 of 1" in capsys.readouterr().out
    grp = json.loads((cache / "H1" / "__grp__k.json").read_text())["child_paths"]
    assert grp["k.cubin"] == str(cache / "H1" / "k.cubin") and (cache / "H1" / "k.cubin").exists()


def test_install_under_another_key_installs_nothing(tmp_path, monkeypatch, capsys):
    src = _entries(tmp_path, "f" * 64)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    assert _tcache().install(str(src)) == 0
    assert "TCACHE not installed" in capsys.readouterr().out
    assert not cache.exists()


def test_build_refuses_a_triton_other_than_the_devices(tmp_path):
    import triton

    tc = _tcache()
    if triton.__version__ == tc.TRITON_VERSION:
        pytest.skip("this Triton is the device's: build runs (here under .venv-t36)")
    with pytest.raises(SystemExit, match="setup_triton36"):
        tc.build(str(tmp_path / "out"), ["code"], None)


def test_spec_names_are_checked(tmp_path):
    with pytest.raises(SystemExit, match="is not"):
        _tcache()._one("k3:bf16")


def test_a_devices_harvest_merges_into_the_folder_under_its_key_only(tmp_path, monkeypatch, capsys):
    """harvest (there): only what was compiled after the install mark; merge (here): into the
    folder and its .txz, listed as harvest:LABEL, and refused under another key."""
    import os
    import tarfile
    import time

    from triton.runtime.cache import triton_key

    tc = _tcache()
    key = hashlib.sha256(triton_key().encode()).hexdigest()
    cache = tmp_path / "cache"
    for h in ("OLD", "NEW"):
        (cache / h).mkdir(parents=True)
        (cache / h / "k.cubin").write_bytes(h.encode())
        (cache / h / "k.json").write_text("{}")
        (cache / h / "__grp__k.json").write_text("{}")
    (cache / "LAUNCHER").mkdir()
    (cache / "LAUNCHER" / "__triton_launcher.so").write_bytes(b"so")
    mark = tmp_path / "installed"
    mark.touch()
    past = time.time() - 60
    os.utime(cache / "OLD" / "__grp__k.json", (past, past))
    os.utime(mark, (past + 1, past + 1))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    assert tc.harvest(str(tmp_path / "h.txz"), since=str(mark)) == 0
    folder = _entries(tmp_path, key)
    assert tc.merge(str(folder), str(tmp_path / "h.txz"), "s58-call1") == 0
    m = json.loads((folder / "tcache-manifest.json").read_text())
    assert m["entries"] == {"H1": ["k.cubin", "k.json"], "NEW": ["k.cubin", "k.json"]}
    assert m["specs"] == ["code", "harvest:s58-call1"]
    assert json.loads((folder / "NEW" / "__grp__k.json").read_text())["child_paths"]["k.cubin"] == "k.cubin"
    with tarfile.open(str(folder) + ".txz") as tar:
        assert "./NEW/k.cubin" in tar.getnames()
    other = _entries(tmp_path / "o", "e" * 64)
    with pytest.raises(SystemExit, match="another key|is keyed"):
        tc.merge(str(other), str(tmp_path / "h.txz"), "x")
