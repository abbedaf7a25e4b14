"""The MoE reference against SGLang 0.5.23's own CPU code: MoEGate + TopK, the torch
biased top-k, SiTU, RMSNorm and the whole KimiK3MoE.forward on the tiny model.

On the CPU SGLang runs `_forward_unfused` (no merged front off CUDA/HIP), MoEGate's
F.linear gives bf16 logits and FusedMoE runs `moe_forward_native`; the reference's
"sglang_cpu" isa reproduces exactly those roundings.
"""

from __future__ import annotations

import pytest
import torch

from k2_support import copy_moe_into_sglang, dims_of, rows, same_sets, topk_margin
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference.moe import MoeWeights, moe_reference, route
from sgl_k3_mono.reference.ops import bf16, rmsnorm, situ

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def tiny_moe(tiny_config_dir):
    from support.sglang_cpu import build_model

    model = build_model(tiny_config_dir)
    layer = model.language_model.model.layers[1]
    w = MoeWeights.random(dims_of("k3-tiny"), seed=11)
    copy_moe_into_sglang(layer.mlp, w)
    return layer, w


def test_router_logits_and_topk_vs_moegate_and_topk(tiny_moe):
    layer, w = tiny_moe
    moe = layer.mlp
    x = rows(8, w.router.shape[1], seed=1)
    with torch.no_grad():
        logits = moe.gate(x)
        sg = moe.topk(x, logits)
    assert logits.dtype == torch.bfloat16  # CPU MoEGate: F.linear, bf16 out
    ours_logits = bf16(x.float() @ w.router.float().t())
    m = measure(logits.float(), ours_logits)
    print(f"\nMoEGate logits vs reference: {m}")
    assert m["max_abs"] <= 2 ** -7 * ours_logits.abs().max().item()  # at most one bf16 ulp
    # Same logits in: routing must agree (sets, up to exact ties), weights to fp32 rounding.
    # Compiled on the CPU, SGLang ranks on the fp32 sigmoid and weights with the bf16 one.
    wts, ids = route(logits, w.router_bias, w.params.top_k, bf16_weights=True)
    choice = torch.sigmoid(logits.float()) + w.router_bias
    safe = topk_margin(choice, w.params.top_k) > 0
    assert safe.any()
    assert same_sets(sg.topk_ids, ids)[safe].all()
    sg_sorted = sg.topk_weights.gather(1, sg.topk_ids.long().argsort(1))
    ours_sorted = wts.gather(1, ids.argsort(1))
    err = (sg_sorted - ours_sorted)[safe].abs().max().item()
    print(f"TopK weights (compiled, bf16 logits) max_abs {err:.3g}")
    assert err <= 1e-6


@pytest.mark.parametrize("logit_dtype", [torch.bfloat16, torch.float32])
def test_route_vs_biased_grouped_topk_impl(logit_dtype):
    from sglang.srt.layers.moe.topk import biased_grouped_topk_impl

    eager = biased_grouped_topk_impl.__wrapped__  # the torch math, without torch.compile
    g = torch.Generator().manual_seed(3)
    e, k, m = 896, 16, 8
    logits = (2 * torch.randn(m, e, generator=g)).to(logit_dtype)
    bias = 0.01 * torch.randn(e, generator=g)
    sw, si = eager(torch.zeros(m, 4), logits, bias, k, True, 1, 1)
    is_bf16 = logit_dtype == torch.bfloat16  # eager torch: the sigmoid itself is bf16
    wts, ids = route(logits, bias, k, bf16_rank=is_bf16, bf16_weights=is_bf16)
    scores = torch.sigmoid(logits.float())
    if logit_dtype == torch.bfloat16:
        scores = bf16(scores)
    safe = topk_margin(scores + bias, k) > 0
    assert safe.all(), "seed gives an exact tie at the top-k boundary"
    assert same_sets(si, ids).all()
    err = (sw.gather(1, si.long().argsort(1)) - wts.gather(1, ids.argsort(1))).abs().max().item()
    print(f"\nbiased_grouped_topk_impl ({logit_dtype}) weights max_abs {err:.3g}")
    assert err <= 1e-6


def test_situ_vs_situ_and_mul_native():
    from sglang.srt.layers.activation import SituAndMul

    act = SituAndMul(beta=4.0, linear_beta=25.0)
    x = rows(8, 512, seed=4, scale=8.0)  # reaches both softcaps
    g, u = x.float().chunk(2, dim=-1)
    ours = bf16(situ(g, u, 4.0, 25.0))
    theirs = act.forward_native(x).float()
    print(f"\nSiTU vs SituAndMul.forward_native: {measure(theirs, ours)}")
    assert torch.equal(theirs, ours)
    x32 = x.float() * 1.37
    g, u = x32.chunk(2, dim=-1)
    assert torch.allclose(act.forward_native(x32), situ(g, u, 4.0, 25.0), rtol=1e-6, atol=1e-6)


def test_rmsnorm_vs_rmsnorm_native():
    from sglang.srt.layers.layernorm import RMSNorm

    norm = RMSNorm(384, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_((1 + 0.1 * torch.randn(384)).bfloat16())
    x = rows(8, 384, seed=5, scale=3.0)
    ours = bf16(rmsnorm(x.float(), norm.weight, 1e-5))
    theirs = norm.forward_native(x).float()
    print(f"\nRMSNorm vs forward_native: {measure(theirs, ours)}")
    assert torch.equal(theirs, ours)


@pytest.mark.parametrize("m", [1, 3, 8])
def test_whole_moe_vs_kimik3moe_forward(tiny_moe, m):
    layer, w = tiny_moe
    moe = layer.mlp
    assert moe._front_w is None and not moe._eligible_for_fused_front  # CPU: unfused path
    x = rows(m, w.router.shape[1], seed=20 + m)
    prefix = rows(m, w.router.shape[1], seed=40 + m)
    with torch.no_grad():
        theirs = moe(x, prefix_sum=prefix.clone()).float()
        their_shared = moe.shared_experts(x).float()
    ref = moe_reference(x, prefix, w, tp=1, isa="sglang_cpu")
    mm, ms = measure(theirs, ref.out), measure(their_shared, ref.shared)
    print(f"\nKimiK3MoE.forward M={m}: {mm}; shared experts: {ms}")
    # Bitwise on AVX2 hosts; an AVX-512-BF16 host rounds one of the bf16 GEMMs of 3 rows
    # differently from the other (2.4e-4, one bf16 ulp, seen on such an EPYC): within an ulp.
    assert torch.allclose(their_shared, ref.shared, rtol=2 ** -7, atol=0), ms
    # Only the fp32 order of the k-way expert sum differs (SGLang's topk order is unsorted).
    assert mm["cosine"] > 0.99999 and mm["max_abs"] <= 2 ** -7 * ref.out.abs().max().item()
    for isa in ("gfx950", "sm_90"):  # the GPU roundings stay within bf16 noise of the CPU path
        g = measure(theirs, moe_reference(x, prefix, w, tp=1, isa=isa).out)
        print(f"  vs reference isa={isa}: {g}")
        assert g["cosine"] > 0.9999


def test_k2_weights_from_sglang_layer_reads_separate_and_merged_front(tiny_moe):
    from sglang.srt.models.kimi_k3 import _merge_weights_as_views

    from sgl_k3_mono.k2 import K2Weights

    layer, w = tiny_moe
    moe = layer.mlp
    kw = K2Weights.from_sglang_layer(layer)
    assert torch.equal(kw.o_proj, layer.self_attn.o_proj.weight)
    assert torch.equal(kw.moe.router, w.router) and torch.equal(kw.moe.latent_up, w.latent_up)
    assert torch.equal(kw.moe.experts.w13, w.experts.w13)
    # What CUDA/HIP post-load does (it returns early on the CPU): merge the front as views.
    front, sizes = _merge_weights_as_views([moe.shared_experts.gate_up_proj, moe.gate, moe.routed_expert_down_proj])
    moe._front_w, moe._front_sizes = front, sizes
    try:
        merged = MoeWeights.from_sglang(moe)
    finally:
        moe._front_w, moe._front_sizes = None, None
        for prop in ("_eligible_for_fused_front", "_front_fp32"):
            moe.__dict__.pop(prop, None)
    for name in ("shared_gate_up", "router", "latent_down"):
        assert torch.equal(getattr(merged, name), getattr(w, name)), name
    assert torch.equal(kw.moe.shard(0, 2).front, merged.shard(0, 2).front)


def test_from_sglang_refuses_a_sharded_module(tiny_moe):
    layer, _ = tiny_moe

    class Sharded:
        tp_size = 8

    with pytest.raises(ValueError, match="shards"):
        MoeWeights.from_sglang(Sharded())
    with pytest.raises(ValueError, match="not a MoE layer"):
        from sgl_k3_mono.k2 import K2Weights

        K2Weights.from_sglang_layer(type("Dense", (), {"_is_moe_layer": False})())
