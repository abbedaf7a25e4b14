"""The step harness at TP 2 on two GPUs (the x2 machine; TP 4 / 8 where four / eight are
lent: the tiny model, 4 heads, to TP 4; at TP 8 the same with 8 heads, "tiny8"): K1 on each rank's heads, K2 reducing over symmetric-memory
peers inside the launch, the harness's MLA / layer 0 / logits over NCCL. Each rank is
judged against the reference step at the same TP for many steps, and the ranks' logits
must be bit-identical. A rank stalled inside K1 must stop every process with the
message within the deadline + 5 s, none hanging."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from step_cases import tp_cases
from support.ranks import assert_every_rank_stopped, plain_ranks, tp_size

HERE = Path(__file__).resolve().parent

TP = tp_size()
TP_STEPS, TP_STALL = tp_cases(TP)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(TP < 2, reason="needs 2 GPUs (the x2 machine)")]


def test_tp_steps_match_the_reference_step_and_ranks_agree():
    res = plain_ranks(TP, HERE / "tp_worker.py", [*map(str, TP_STEPS), "1"], {}, timeout=400)
    for r, (code, out, err, ended) in enumerate(res):
        assert code == 0 and ended is not None, (r, code, err[-3000:])
        (summary,) = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        print("\nSTEPCMP-TP2 " + json.dumps(summary))
        assert summary["violations"] == [], summary["violations"][:20]
        assert summary["ranks_bitwise_equal"] and summary["row_steps"] == TP_STEPS[2] * TP_STEPS[3], summary


@pytest.mark.parametrize("stalled", sorted({1, TP - 1}) if TP >= 2 else [1])
def test_tp_a_rank_stalled_in_k1_stops_every_process(stalled):
    """One rank (1, and the last where TP > 2) holds inside K1's KDA phase at layer 2 of its
    first step (SGL_K3_MONO_STALL, armed once warm); every other rank finishes its K1 and
    waits in layer 2's K2 for that rank's o_proj partial. All exit with the watcher's code
    and their own message, each within the deadline + 5 s of its warm first step."""
    deadline = 3.0
    res = plain_ranks(TP, HERE / "tp_worker.py", [*map(str, TP_STALL), "0"],
                      {"STALL_AFTER_WARM": f"{stalled}:2:k1:kda", "DEADLINE_S": str(deadline)}, timeout=300)
    expect = {r: f"rank {r}, layer 2, launch K2, phase" for r in range(TP)}
    expect[stalled] = f"rank {stalled}, layer 2, launch K1, phase 'kda'"
    assert_every_rank_stopped(res, expect, deadline)
