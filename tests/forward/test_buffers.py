"""What the step allocates at build for the real Kimi-K3 at TP 8 (every width, decode
and verify): computed on the meta device, against this rank's routed-expert bytes
alone (a lower bound of its weight bytes). The build logs the same sum."""

from __future__ import annotations

import pytest

from sgl_k3_mono.budget import expert_bytes
from sgl_k3_mono.configs import load_config
from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.forward.plan import StepBuffers, StepPlan
from sgl_k3_mono.k1.host import K1Plan
from sgl_k3_mono.k2.host import K2Peers, K2Plan


def _plans(d: K3Dims, rows: int, mode: str) -> StepPlan:
    k1 = K1Plan.from_dims(d, rows, mode, isa="sm_90", grid=132)
    k2 = K2Plan(rows=rows, isa="sm_90", hidden=d.hidden, attn_width=d.kda_proj_local,
                shared2=2 * d.shared_inter_local, experts=d.experts, latent=d.latent, inter=d.expert_inter_local,
                inter_up=d.expert_inter_local, top_k=d.top_k, bank_rows=d.bank_rows(), eps=d.rms_eps,
                situ_beta=d.situ_beta, situ_linear_beta=d.situ_linear_beta, mxfp4=True, tp=d.tp, grid=132)
    return StepPlan(rows=rows, mode=mode, batch_size=rows if mode == "decode" else 1, k1=k1, k2=k2)


@pytest.mark.parametrize("mode", ["decode", "verify"])
def test_step_buffers_are_under_one_percent_of_the_weights(mode):
    d = K3Dims.from_config(load_config("kimi-k3"), tp=8)
    total = 0
    for m in range(1, 9):
        plan = _plans(d, m, mode)
        peers = K2Peers.emulated(plan.k2, "meta")[0]  # this rank's symmetric buffer, as at TP 8
        total += StepBuffers.allocate(plan, "meta", deadline_s=10, peers=peers).nbytes()
    experts = len([i for i in range(d.layers) if d.is_moe(i)]) * d.experts * expert_bytes(d, "mxfp4")
    print(f"{mode}: step buffers for widths 1..8: {total / 2**20:.2f} MiB; routed experts alone "
          f"{experts / 2**30:.1f} GiB a rank ({100 * total / experts:.4f} %)")
    assert total < 0.01 * experts
