"""`bench k2-tp` (k2/bench_tp.py) on the CPU: its arguments and launcher, and its standard
path's all-reduces (`standard_path(reduce=...)`), run over gloo ranks against the
reference across the ranks. The bench itself needs 2-8 GPUs of one host (issue 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ranks import json_records

HERE = Path(__file__).resolve().parent


def test_arguments_and_launcher():
    from sgl_k3_mono.k2.bench_tp import NO_MULTICAST, launcher_command, parse, ranks_for

    a = parse(["--rows", "1,8", "--formats", "bf16"])
    assert a.rows == (1, 8) and a.formats == ("bf16",)
    with pytest.raises(SystemExit):
        parse(["--rows", "9"])
    assert [ranks_for(n) for n in (1, 2, 3, 4, 6, 8, 16)] == [1, 2, 2, 4, 4, 8, 8]
    cmd = launcher_command(["--rows", "1"], 4)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and cmd[cmd.index("--nproc-per-node") + 1] == "4"
    assert cmd[-4:] == ["-m", "sgl_k3_mono.k2.bench_tp", "--rows", "1"]
    assert NO_MULTICAST == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                            "NVSHMEM_DISABLE_NVLS": "1"}


def test_bench_entry_lists_k2_tp():
    from sgl_k3_mono.bench import LAUNCHES

    assert LAUNCHES["k2-tp"] == "sgl_k3_mono.k2.bench_tp"


@pytest.mark.parametrize("tp", [2, 4])
def test_standard_path_reduces_where_sglang_does_and_matches_the_reference(tp):
    """Two reduces a layer ([M, H] after o_proj, one flat [M x L + M x H] for the MoE), every
    rank the same output, within a few bf16 roundings of the reference (the standard path
    rounds the router logits and the mix to bf16 where the reference keeps fp32)."""
    rows = 3
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                           str(tp), str(HERE / "std_tp_worker.py"), str(rows)], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    recs = json_records(done.stdout)
    assert sorted(r["rank"] for r in recs) == list(range(tp)), done.stdout
    for r in recs:
        print(r)
        assert r["ranks_equal"] and r["cosine"] > 0.9998 and r["rel"] < 0.03, r
        (h_red, moe_red) = r["reduces"]
        assert len(h_red) == 2 and h_red[0] == rows and len(moe_red) == 1, r
