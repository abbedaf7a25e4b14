"""bench k2's standard-path routed experts, SGLang's triton MoE runner composed from its own
Triton ops (k2/sglang_moe.py), against a float64 reference on fresh random inputs. GPU only:
SGLang's fused MoE kernel gives garbage under Triton's CPU interpreter (checked by hand:
a one-pair GEMM reads values of 1e10 where the operands are O(1)), so the CPU has no run of
it to check."""

from __future__ import annotations

import pytest


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (1, 3, 8))
def test_sglang_routed_experts_match_float64(rows):
    import torch

    from sgl_k3_mono.k2.sglang_moe import sglang_routed_experts
    from sgl_k3_mono.numerics import measure

    E, I, L, K = 64, 128, 512, 8
    g = torch.Generator(device="cuda").manual_seed(rows)
    w13 = (torch.randn(E, 2 * I, L, generator=g, device="cuda") / L ** 0.5).bfloat16()
    w2 = (torch.randn(E, L, I, generator=g, device="cuda") / I ** 0.5).bfloat16()
    x = torch.randn(rows, L, generator=g, device="cuda").bfloat16()
    ids = torch.stack([torch.randperm(E, generator=g, device="cuda")[:K] for _ in range(rows)])
    wts = torch.rand(rows, K, generator=g, device="cuda")
    wts = wts / wts.sum(-1, keepdim=True)
    run = sglang_routed_experts(w13, w2, top_k=K, rows=rows, beta=4.0, linear_beta=25.0)
    run(x, ids, wts).fill_(float("nan"))  # poisoned: the next run must write every element
    got = run(x, ids, wts).double()
    ref = torch.zeros(rows, L, dtype=torch.float64, device="cuda")
    for r in range(rows):
        for j in range(K):
            e = int(ids[r, j])
            h = x[r].double() @ w13[e].double().t()
            gate, up = h[:I], h[I:]
            act = (4 * torch.tanh(gate / 4) * torch.sigmoid(gate) * 25 * torch.tanh(up / 25)).bfloat16().double()
            ref[r] += wts[r, j].double() * (act @ w2[e].double().t())
    m = measure(got.float(), ref.float())
    print(f"\nSGMOE rows={rows}: {m}")
    # bf16 GEMM outputs and a bf16 sum of K bf16 slot outputs: a few bf16 ulps of the scale
    assert torch.isfinite(got).all() and m["cosine"] > 0.9999 and m["max_abs"] <= 2 ** -6 * ref.abs().max().item()
