"""The K2 oracle itself: TP emulation, seam semantics, ISA roundings, real per-rank shapes,
and refusals. (Its pieces are checked against SGLang in test_moe_vs_sglang.py and
test_mxfp4.py.)"""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from k2_support import dims_of, rows, same_sets, topk_margin
from sgl_k3_mono.k2 import K2Weights, k2_reference
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference.attn_res import aggregate
from sgl_k3_mono.reference.experts import SeededExperts
from sgl_k3_mono.reference.moe import moe_reference
from sgl_k3_mono.reference.ops import bf16


def _inputs(w: K2Weights, m: int, nb: int = 2, seed: int = 0):
    h = w.hidden
    bank = torch.stack([rows(m, h, seed + 10 + j) for j in range(nb)], dim=1)
    return rows(m, w.attn_width, seed), bank, rows(m, h, seed + 1)


@pytest.fixture(scope="module")
def small():
    d = dims_of("k3-small")  # H 1024, A 1024, E 32 top-8, I 256, L 512, S 512: splits over tp 8
    return {fmt: K2Weights.random(d, seed=3, expert_format=fmt) for fmt in ("bf16", "mxfp4")}


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
@pytest.mark.parametrize("isa", ["gfx950", "sm_90"])
@pytest.mark.parametrize("m", [1, 8])
def test_tp_emulation_agrees_across_tp(small, fmt, isa, m):
    w = small[fmt]
    attn, bank, prefix = _inputs(w, m, seed=m)
    ref = k2_reference(attn, w, tp=1, bank=bank, nvb=2, prefix=prefix, isa=isa)
    choice = torch.sigmoid(ref.moe.router_logits) + w.moe.router_bias
    safe = topk_margin(choice, w.moe.params.top_k) > 1e-3  # far above the tp-induced logit change
    assert safe.sum() >= (m + 1) // 2
    for tp in (2, 4, 8):
        r = k2_reference(attn, w, tp=tp, bank=bank, nvb=2, prefix=prefix, isa=isa)
        assert r.attn_partials.shape == (tp, m, w.hidden) and r.moe.latent_partials.shape[0] == tp
        same = same_sets(r.topk_ids, ref.topk_ids)
        assert same[safe].all(), f"routing changed at tp={tp}"
        # A row within bf16 noise of a top-k tie may legitimately route differently.
        got = measure(r.out[same], ref.out[same])
        print(f"\n{fmt} {isa} M={m} tp={tp} vs tp=1: {got}")
        # Only bf16 roundings of the per-rank partials differ: a few ulps at |x| ~ 4.
        assert got["cosine"] > 0.9999 and got["max_abs"] <= 0.125 and got["rel"] < 1e-2


def test_rows_are_independent_and_modes_agree(small):
    w = small["mxfp4"]
    attn, bank, prefix = _inputs(w, 8, seed=5)
    full = k2_reference(attn, w, tp=4, bank=bank, nvb=2, prefix=prefix, isa="gfx950", mode="verify")
    dec = k2_reference(attn, w, tp=4, bank=bank, nvb=2, prefix=prefix, isa="gfx950", mode="decode")
    assert torch.equal(full.out, dec.out)
    for i in (0, 5):
        one = k2_reference(attn[i:i + 1], w, tp=4, bank=bank[i:i + 1], nvb=2, prefix=prefix[i:i + 1], isa="gfx950")
        assert torch.equal(one.out[0].float(), full.out[i].float())
        assert torch.equal(one.topk_ids[0], full.topk_ids[i])


def test_seam_and_collectives(small):
    w = small["bf16"]
    attn, bank, prefix = _inputs(w, 3, seed=7)
    r = k2_reference(attn, w, tp=4, bank=bank, nvb=2, prefix=prefix, isa="gfx950")
    # The all-reduce: fp32 sum of the bf16 partials in rank order, one rounding.
    acc = r.attn_partials[0] + r.attn_partials[1] + r.attn_partials[2] + r.attn_partials[3]
    assert torch.equal(r.attn_reduced, bf16(acc))
    assert torch.equal(r.attn_partials, bf16(r.attn_partials))
    assert torch.equal(r.prefix, bf16(prefix.float() + r.attn_reduced))
    h2 = aggregate(bank, 2, r.prefix, w.mlp_res_proj, w.mlp_res_norm, w.post_attention_layernorm,
                   w.moe.params.eps, isa="gfx950")
    assert torch.equal(r.h2, h2)
    moe = moe_reference(r.h2, r.prefix, w.moe, tp=4, isa="gfx950")
    assert torch.equal(r.out.float(), moe.out)
    assert torch.equal(r.out.float(), bf16(bf16(moe.routed_out + moe.shared) + r.prefix))
    # After a block write the stream restarted: p = a.
    fresh = k2_reference(attn, w, tp=4, bank=bank, nvb=2, prefix=None, isa="gfx950")
    assert torch.equal(fresh.prefix, fresh.attn_reduced)


def test_isa_roundings_of_the_front(small):
    w = small["bf16"]
    attn, bank, prefix = _inputs(w, 4, seed=9)
    hip = k2_reference(attn, w, tp=2, bank=bank, nvb=2, prefix=prefix, isa="gfx950")
    cuda = k2_reference(attn, w, tp=2, bank=bank, nvb=2, prefix=prefix, isa="sm_90")
    assert torch.equal(hip.moe.router_logits, bf16(hip.moe.router_logits))  # HIP: bf16 front
    assert not torch.equal(cuda.moe.router_logits, bf16(cuda.moe.router_logits))  # CUDA: fp32 front
    for r in (hip, cuda):
        assert torch.equal(r.moe.routed_input, bf16(r.moe.routed_input))
    print(f"\ngfx950 vs sm_90 (same inputs): {measure(hip.out, cuda.out)}")


def test_routed_scaling_factor_per_isa(small):
    w = small["bf16"]
    scaled = dataclasses.replace(w, moe=dataclasses.replace(
        w.moe, params=dataclasses.replace(w.moe.params, routed_scaling=2.5)))
    attn, bank, prefix = _inputs(w, 2, seed=11)
    for isa in ("gfx950",):
        with pytest.raises(ValueError, match="routed_scaling_factor"):
            k2_reference(attn, scaled, tp=2, bank=bank, nvb=2, prefix=prefix, isa=isa)
    with pytest.raises(ValueError, match="routed_scaling_factor"):
        moe_reference(prefix, prefix, scaled.moe, tp=1, isa="sglang_cpu")
    base = k2_reference(attn, w, tp=2, bank=bank, nvb=2, prefix=prefix, isa="sm_90")
    r = k2_reference(attn, scaled, tp=2, bank=bank, nvb=2, prefix=prefix, isa="sm_90")
    assert torch.equal(r.moe.latent_partials, bf16(base.moe.latent_partials * 2.5))


def test_real_dims_one_layer_tp8_m8():
    """Real Kimi-K3 per-rank shapes at TP 8, M = 8. The experts are generated lazily per
    routed expert id (all 896 would be 59 GB); a bias on 20 experts keeps the routed union
    small so this stays a ~1 minute CPU test."""
    d = dims_of("kimi-k3")
    assert (d.hidden, d.experts, d.latent, d.expert_inter // 8, d.top_k) == (7168, 896, 3584, 384, 16)
    experts = SeededExperts(d.experts, d.expert_inter, d.latent, seed=3, fmt="mxfp4")
    w = K2Weights.random(d, seed=2, experts=experts)
    bias = w.moe.router_bias.clone()
    bias[torch.arange(0, d.experts, 37)[:20]] += 1.0
    w = dataclasses.replace(w, moe=dataclasses.replace(w.moe, router_bias=bias))
    rank = w.shard(3, 8)
    assert tuple(rank.o_proj.shape) == (7168, 1536)
    assert rank.moe.front_sizes == (1536, 896, 3584) and tuple(rank.moe.shared_down.shape) == (7168, 768)
    w13, w2 = rank.moe.experts.weights(5)
    assert tuple(w13.shape) == (768, 3584) and tuple(w2.shape) == (3584, 384)
    attn, bank, prefix = _inputs(w, 8, nb=8, seed=1)
    t = time.time()
    r = k2_reference(attn, w, tp=8, bank=bank, nvb=8, prefix=prefix, isa="gfx950")
    print(f"\nreal dims TP8 M=8: {time.time() - t:.1f}s, {torch.unique(r.topk_ids).numel()} experts routed")
    assert r.out.shape == (8, 7168) and r.out.dtype == torch.bfloat16
    assert r.topk_ids.shape == (8, 16) and r.moe.latent_partials.shape == (8, 8, 3584)
    assert r.moe.shared_partials.shape == (8, 8, 7168) and r.moe.router_logits.shape == (8, 896)
    for t_ in (r.out.float(), r.moe.latent, r.moe.shared, r.h2):
        assert torch.isfinite(t_).all()
    for t_ in (r.moe.routed_out, r.moe.shared, r.moe.latent):
        assert t_.abs().mean() > 0.05  # non-trivial contributions, not just the prefix
    assert not torch.equal(r.out.float(), prefix.float())
    assert torch.allclose(r.topk_weights.sum(-1), torch.ones(8))


def test_bad_inputs_are_refused(small):
    w = small["mxfp4"]
    attn, bank, prefix = _inputs(w, 2, seed=13)
    ok = dict(tp=2, bank=bank, nvb=2, prefix=prefix, isa="gfx950")

    def bad(match, attn_=attn, weights=w, **kw):
        with pytest.raises(ValueError, match=match):
            k2_reference(attn_, weights, **{**ok, **kw})

    bad("M in 1..8", attn_=torch.zeros(0, w.attn_width, dtype=torch.bfloat16))
    a9, b9, p9 = _inputs(w, 9, seed=1)
    bad("M in 1..8", attn_=a9, bank=b9, prefix=p9)
    bad("unknown isa", isa="gfx942")
    bad("unknown isa", isa="sglang_cpu")  # a test-only rounding, not a K2 target
    bad("unknown mode", mode="prefill")
    bad("tp must be", tp=0)
    bad("does not split", tp=3)
    bad("multiples of 32", tp=16)  # I/16 = 16: an MXFP4 scale group would straddle ranks
    bad("bf16", attn_=attn.float())
    bad("attn_out", attn_=attn[:, :-2])
    bad("bank", bank=bank[:, :, :-1])
    bad("prefix", prefix=prefix.float())
    bad("nvb", nvb=3)
    with pytest.raises(ValueError, match="o_proj"):
        dataclasses.replace(w, o_proj=w.o_proj.float())
    with pytest.raises(ValueError, match="router_bias"):
        dataclasses.replace(w.moe, router_bias=w.moe.router_bias.bfloat16())
    with pytest.raises(ValueError, match="fmt"):
        SeededExperts(4, 64, 64, seed=0, fmt="fp8")
    with pytest.raises(ValueError, match="attn must be"):
        K2Weights.random(dims_of("k3-small"), seed=0, attn="gqa")
