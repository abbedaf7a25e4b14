"""The processes tests start (workers run as scripts from their own folder) import this
checkout's sgl_k3_mono, not an installed copy (conftest sets PYTHONPATH)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_worker_script_imports_the_checkout(tmp_path):
    worker = tmp_path / "worker.py"  # a folder with no sgl_k3_mono of its own, like tests/launch
    worker.write_text("import sgl_k3_mono, pathlib; print(pathlib.Path(sgl_k3_mono.__file__).resolve())\n")
    done = subprocess.run([sys.executable, str(worker)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert Path(done.stdout.strip()).is_relative_to(ROOT / "sgl_k3_mono"), done.stdout
