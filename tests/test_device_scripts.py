"""tools/device/bench.sh, dry: its modes run here with python3 and nvidia-smi stood in by stubs
that log their arguments, so a quoting slip in a mode's command lines shows on the CPU, not in
a device call (of which a session gets few; the forty-second session got none)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STUB = """#!/bin/bash
line=$(printf '%q ' "$@")
printf '%s\n' "$line" >> "$STUB_LOG"  # (one write: the warm steps' stubs append at once)
case "$*" in *total_memory*) echo "${STUB_TUNERS:-2}";; esac
exit 0
"""


def _dry(tmp_path: Path, *args: str, **env: str) -> list[list[str]]:
    """bench.sh ARGS with the stubs first on PATH: every python3 command line it ran, split."""
    bin_ = tmp_path / "bin"
    bin_.mkdir(exist_ok=True)
    (bin_ / "python3").write_text(STUB)
    (bin_ / "nvidia-smi").write_text("#!/bin/bash\necho 'NVIDIA H200'\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    log = tmp_path / "stub.log"
    log.write_text("")
    out = tmp_path / "out"
    full_env = {**os.environ, **env, "PATH": f"{bin_}:{os.environ['PATH']}", "STUB_LOG": str(log),
                "OUT": str(out)}
    r = subprocess.run(["bash", "tools/device/bench.sh", *args], cwd=ROOT, env=full_env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [shlex.split(ln) for ln in log.read_text().splitlines() if ln.strip()]


def _benches(cmds):
    return [c for c in cmds if c[:2] == ["-m", "sgl_k3_mono.k2.bench"]]


def _blocks(cmd):
    return [cmd[i + 1] for i, w in enumerate(cmd) if w == "--block"]


def test_bf16_gate_compiles_each_block_apart(tmp_path):
    cmds = _dry(tmp_path, "bf16-gate", "1:STAGES=5", "2,4:FLATD=1")
    warm = [c for c in _benches(cmds) if "--warm-only" in c]
    assert sorted(_blocks(c)[0] for c in warm) == ["", "1:STAGES=5", "2,4:FLATD=1"]
    assert sum("--warm-part" in c for c in cmds) == 2  # (two tuner processes on a GPU over 100 GB)
    timed = [c for c in _benches(cmds) if "--warm-only" not in c]
    assert len(timed) == 1 and _blocks(timed[0]) == ["", "1:STAGES=5", "2,4:FLATD=1"]


def test_step_std_runs_a_process_a_row_count(tmp_path):
    cmds = [c for c in _dry(tmp_path, "step-std", ROWS="1,2,8", STD_CONFIG="none.json")
            if c[:3] == ["-m", "sgl_k3_mono.cli", "bench"]]
    assert [c[c.index("--rows") + 1] for c in cmds] == ["1", "2", "8"]


def test_k1_variants_compile_apart_and_time_twice_in_turn(tmp_path):
    cmds = [c for c in _dry(tmp_path, "k1", "k1-gl", "", "--g-last off", K1_ROWS="2,4")
            if c[:2] == ["-m", "sgl_k3_mono.k1.bench"]]
    warm = [c for c in cmds if "--warm-only" in c]
    timed = [c for c in cmds if "--warm-only" not in c]
    assert sorted(c[c.index("--warm-only") + 1:] for c in warm) == [[], ["--g-last", "off"]]
    assert [c[c.index("--no-phases") + 1:] for c in timed] == [[], ["--g-last", "off"]] * 2
    assert all(c[c.index("--rows") + 1] == "2,4" for c in cmds)
