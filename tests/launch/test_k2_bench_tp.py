"""`bench k2-tp` (k2/bench_tp.py) on the CPU: its arguments and launcher, and its standard
path's all-reduces (`standard_path(reduce=...)`), run over gloo ranks against the
reference across the ranks. The bench itself needs 2-8 GPUs of one host (issue 7)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.ranks import json_records, plain_ranks, told

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


def test_the_bench_runs_through_on_the_cpu_with_its_gpu_pieces_stood_in():
    """`bench k2-tp` end to end over two gloo ranks (bench_tp_smoke_worker.py: the launches,
    peers, timings and shapes stood in; SGLang's fused MoE under Triton's interpreter): a
    table line for each format and row count, the reduces' lines, every piece that cannot
    run here named once a rank with its reason (by rank 0, the one writer), exit 0. What a
    first GPU run would otherwise find out at device-time prices: the script's own mistakes."""
    # each rank its own pipe (plain_ranks), not torchrun's one shared stdout, where a rank's
    # line can land inside another's: a project CI run (rc 0) once missed a table line, most
    # likely so; its stdout was not kept, so every failure below prints both ranks' output
    ranks = plain_ranks(2, HERE / "bench_tp_smoke_worker.py", ["--rows", "1", "--formats", "bf16,mxfp4"],
                        {"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}, timeout=600)
    outputs = told(ranks)
    assert all(rc == 0 for rc, *_ in ranks), outputs
    lines = ranks[0][1].splitlines()  # the table is rank 0's
    for fmt in ("bf16 ", "mxfp4"):
        rows = [x for x in lines if x.startswith(f"K2TP {fmt} TP=2 M=1 ")]
        assert len(rows) == 1, outputs
        (row,) = rows
        assert "ours=1.0us" in row and "reduce[M,H] nccl=1.0us" in row and "symm_one_shot=n/a" in row, row
        assert ("std=1.0us" in row) == (fmt == "bf16 "), row  # (no MXFP4 standard path on sm_90)
    assert sum(x.startswith("K2TP-AR TP=2 M=1 ") for x in lines) == 1, outputs
    assert not any(x.startswith("K2TP") for x in ranks[1][1].splitlines()), outputs  # rank 0 the one writer
    said = [x for x in lines if "not run on rank" in x]
    assert len(said) == len(set(said)), said  # each reason once
    assert all(f"symm-mem one-shot not run on rank {r} (" in " ".join(said) for r in (0, 1)), said
