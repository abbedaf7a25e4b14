"""K2 reads MXFP4 experts in the layouts SGLang 0.5.23 leaves on gfx950 (AITER's a16w4 and
generic preshuffles, padded to I_pad), in place:

- k2/expert_layout.py's offsets, which the Triton and FlyDSL kernels compute, address
  exactly the bytes and scales reference/mxfp4_aiter.py's permutations put there (CPU);
- the Triton launch on tensors held as SGLang holds them (2-D scales, padding filled with
  0xff: NaN scales and -6 codes, so a read of padding shows) is within the reference's
  bounds and bitwise the plain layout's launch on the same path (CPU interpreter, and on
  the GPU at the real TP-8 rank shapes, where I_l 384 pads to 512)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from k2_cases import Case  # noqa: E402

from sgl_k3_mono.k2 import expert_layout as xlay  # noqa: E402
from sgl_k3_mono.reference.experts import Mxfp4Experts  # noqa: E402
from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout, held_like_sglang, padded_like_sglang  # noqa: E402

E, L = 3, 512


def _plain_rank(inter: int, seed: int = 0):
    """Random unpadded plain MXFP4 experts (every byte value and scale code a fresh draw)."""
    g = torch.Generator().manual_seed(seed)
    u8 = lambda *s: torch.randint(0, 256, s, generator=g, dtype=torch.uint8)  # noqa: E731
    return u8(E, 2 * inter, L // 2), u8(E, 2 * inter, L // 32), u8(E, L, inter // 2), u8(E, L, inter // 32)


def _gather(t: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """t's bytes at `offsets` from expert e's first byte, for every expert."""
    flat = t.reshape(t.shape[0], -1)
    return flat[:, offsets.reshape(-1)].reshape(t.shape[0], *offsets.shape)


@pytest.mark.parametrize("kind, inter, pad", [("a16w4", 384, 512), ("a16w4", 256, 256), ("generic", 384, 512),
                                              ("generic", 384, 384), ("plain", 384, 384)])
def test_offsets_address_the_bytes_sglang_holds(kind, inter, pad):
    """Every real code byte and scale of every expert, gate / up / w2, read through the
    offsets from the tensors as SGLang holds them, equals the plain layout's."""
    w13, s13, w2, s2 = _plain_rank(inter)
    if kind == "plain":
        ex = Mxfp4Experts(w13, s13, w2, s2, inter)
    else:
        h = held_like_sglang(w13, s13, w2, s2, AiterLayout(kind, inter, pad), fill=255)
        ex = Mxfp4Experts.from_sglang(h.w13, h.w13_scale, h.w2, h.w2_scale, inter, kind)
    xl = xlay.code_of(kind)
    assert xlay.check_dims(xl, inter_up=pad, latent=L) == []
    rb, srb = ex.w13.stride(1), ex.w13_scale.stride(1)
    up_w, up_s = xlay.up_offsets(pad, rb, srb, xl)
    r = torch.arange(inter)[:, None]
    b, gl = torch.arange(L // 2)[None, :], torch.arange(L // 32)[None, :]
    assert torch.equal(_gather(ex.w13, xlay.weight_offset(r, b, rb, xl, True)), w13[:, :inter])
    assert torch.equal(_gather(ex.w13, up_w + xlay.weight_offset(r, b, rb, xl, True)), w13[:, inter:])
    assert torch.equal(_gather(ex.w13_scale, xlay.scale_offset(r, gl, srb, xl, True)), s13[:, :inter])
    assert torch.equal(_gather(ex.w13_scale, up_s + xlay.scale_offset(r, gl, srb, xl, True)), s13[:, inter:])
    r2 = torch.arange(L)[:, None]
    b2, g2 = torch.arange(inter // 2)[None, :], torch.arange(inter // 32)[None, :]
    assert torch.equal(_gather(ex.w2, xlay.weight_offset(r2, b2, ex.w2.stride(1), xl, False)), w2)
    assert torch.equal(_gather(ex.w2_scale, xlay.scale_offset(r2, g2, ex.w2_scale.stride(1), xl, False)), s2)
    # a 16-byte chunk is contiguous in every layout (one vector load a lane)
    assert xlay.weight_offset(5, 17, rb, xl, True) == xlay.weight_offset(5, 16, rb, xl, True) + 1
    # and the store dequantizes through the reference's permutations to the plain values
    for e in range(E):
        want = Mxfp4Experts(w13, s13, w2, s2, inter).weights(e)
        got = ex.weights(e)
        for a, b in zip(got, want):  # scale code 255 drawn too: NaN where the plain layout's is
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    rs13, rs2 = ex.real_scales()
    assert torch.equal(rs13, s13) and torch.equal(rs2, s2)


@pytest.mark.parametrize("env, kind", [({}, "a16w4"), ({"AITER_SITUV2_A4W4": "1"}, "generic")])
def test_sglangs_own_post_load_leaves_what_the_offsets_read(env, kind, monkeypatch):
    """SGLang 0.5.23's own Mxfp4MoEMethod.process_weights_after_loading, its AITER branch run
    on the CPU (AITER's four shuffles stood in by tests/support/fake_aiter.py, which states
    them as reference/mxfp4_aiter.py does): what it leaves on the layer (tagged weights, 2-D
    scales) is what Mxfp4Experts.from_sglang views and the offsets read, byte for byte."""
    import types

    from sglang.srt.layers.quantization import mxfp4 as sg
    from support import fake_aiter

    from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout

    for k in ("AITER_SITUV2_A4W4", "AITER_SITUV2_A8W4", "SGLANG_AITER_K3_OPT"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    fake = fake_aiter.module()
    monkeypatch.setattr(sg, "_use_aiter", True)
    for name in ("shuffle_weight_a16w4", "shuffle_scale_a16w4", "shuffle_weight", "shuffle_scale"):
        monkeypatch.setattr(sg, name, getattr(fake, name), raising=False)
    inter, pad = 384, 512
    w13, s13, w2, s2 = _plain_rank(inter, seed=5)

    padded = padded_like_sglang(w13, s13, w2, s2, pad)  # as Mxfp4MoEMethod.create_weights allocates them
    layer = torch.nn.Module()
    for name, t in (("w13_weight", padded.w13), ("w13_weight_scale", padded.w13_scale), ("w2_weight", padded.w2),
                    ("w2_weight_scale", padded.w2_scale)):
        setattr(layer, name, torch.nn.Parameter(t, requires_grad=False))
    layer.moe_runner_config = types.SimpleNamespace(activation="situ", gate_up_interleaved=False)
    method = types.SimpleNamespace(use_marlin=False, use_mega_moe=False, _fi_kernel=None, use_triton_kernels=False,
                                   use_flashinfer=False, use_deep_gemm=False, num_experts=E, with_bias=False)
    sg.Mxfp4MoEMethod.process_weights_after_loading(method, layer)  # SGLang's own code
    assert layer.w13_weight.is_shuffled and layer.w2_weight.is_shuffled and layer.w13_weight_scale.dim() == 2
    assert AiterLayout.from_env(inter, dict(env)).kind == kind
    ex = Mxfp4Experts.from_sglang(layer.w13_weight.data, layer.w13_weight_scale.data, layer.w2_weight.data,
                                  layer.w2_weight_scale.data, inter, kind)
    xl = xlay.code_of(kind)
    rb, srb = ex.w13.stride(1), ex.w13_scale.stride(1)
    up_w, up_s = xlay.up_offsets(pad, rb, srb, xl)
    r, b, gl = torch.arange(inter)[:, None], torch.arange(L // 2)[None, :], torch.arange(L // 32)[None, :]
    assert torch.equal(_gather(ex.w13, up_w + xlay.weight_offset(r, b, rb, xl, True)), w13[:, inter:])
    assert torch.equal(_gather(ex.w13_scale, xlay.scale_offset(r, gl, srb, xl, True)), s13[:, :inter])
    r2, b2, g2 = torch.arange(L)[:, None], torch.arange(inter // 2)[None, :], torch.arange(inter // 32)[None, :]
    assert torch.equal(_gather(ex.w2, xlay.weight_offset(r2, b2, ex.w2.stride(1), xl, False)), w2)
    assert torch.equal(_gather(ex.w2_scale, xlay.scale_offset(r2, g2, ex.w2_scale.stride(1), xl, False)), s2)


def test_a16w4_scales_hold_gate_and_up_side_by_side():
    """a16w4 pairs gate block n0 with up block n0 in one scale block: a gate scale and the
    up scale of the same row and group are neighbouring bytes."""
    w13, s13, w2, s2 = _plain_rank(256, seed=1)
    h = held_like_sglang(w13, s13, w2, s2, AiterLayout("a16w4", 256, 256))
    ex = Mxfp4Experts.from_sglang(h.w13, h.w13_scale, h.w2, h.w2_scale, 256, "a16w4")
    off = xlay.scale_offset(37, 9, ex.w13_scale.stride(1), 1, True)
    flat = ex.w13_scale[1].reshape(-1)
    assert (flat[off], flat[off + 1]) == (s13[1, 37, 9], s13[1, 256 + 37, 9])


def test_dims_the_offsets_cannot_take_are_named():
    assert xlay.check_dims(0, inter_up=96, latent=96) == []
    assert any("a16w4" in w for w in xlay.check_dims(1, inter_up=384, latent=3584))  # AITER cannot load it either
    assert xlay.check_dims(2, inter_up=384, latent=3584) == []
    assert xlay.check_dims(1, inter_up=512, latent=3584) == []
    with pytest.raises(ValueError, match="not one of"):
        xlay.code_of("marlin")


def test_store_refuses_what_it_cannot_hold():
    w13, s13, w2, s2 = _plain_rank(256)
    h = held_like_sglang(w13, s13, w2, s2, AiterLayout("generic", 256, 256))
    with pytest.raises(ValueError, match="do not hold"):
        Mxfp4Experts.from_sglang(h.w13, h.w13_scale[:, :4], h.w2, h.w2_scale, 256, "generic")
    ex = Mxfp4Experts.from_sglang(h.w13, h.w13_scale, h.w2, h.w2_scale, 256, "generic")
    with pytest.raises(ValueError, match="one rank's"):
        ex.shard(0, 2)
    tagged = torch.zeros(E, 512, L // 2, dtype=torch.uint8)
    tagged.is_shuffled = True
    with pytest.raises(ValueError, match="is_shuffled"):
        Mxfp4Experts(tagged, torch.zeros(E, 512, L // 32, dtype=torch.uint8), w2, s2, 256)


def test_plan_reads_the_layout_and_keeps_mma_fp4_to_plain():
    """The plan takes the layout from the store, refuses stores that disagree, and never
    puts an AITER layout on mma_fp4 (whose loads are plain rows)."""
    from k2_cases import case_dims, held_as

    from sgl_k3_mono.k2.host import K2Plan, experts_layout
    from sgl_k3_mono.k2.reference import K2Weights

    w = K2Weights.random(case_dims(Case("k3-small", 1, "mxfp4")), seed=0, expert_format="mxfp4").shard(0, 1)
    held = held_as(w, "a16w4")
    plain = K2Plan.for_weights(w, 4, isa="sm_90", bank_rows=3, grid=132)
    aiter = K2Plan.for_weights(held, 4, isa="sm_90", bank_rows=3, grid=132)
    assert (plain.expert_layout, aiter.expert_layout) == (0, 1)
    assert plain.mma_experts and not aiter.mma_experts
    with pytest.raises(ValueError, match="different layouts"):
        experts_layout([w, held])


# ---- the Triton launch (CPU interpreter) ------------------------------------------------

# a16w4 needs L % 256 (k3-small; at TP 2 its I_l 128 pads to 256), generic takes k3-tiny
# (I_l 128 pads to 256; its 4 scale groups a row pad to 8); GEMV and tensor-core experts,
# the rows-that-route-it GEMV (XU) and the 3-D GEMV tiles (MX4D 0), sm_90 and gfx950 roundings
AITER_CASES = [Case("k3-small", 1, "mxfp4", "sm_90", nvb=1, seed=70, layout="a16w4"),
               Case("k3-small", 3, "mxfp4", "gfx950", nvb=2, tp=2, seed=71, layout="a16w4"),
               Case("k3-tiny", 2, "mxfp4", "sm_90", nvb=1, seed=72, layout="generic"),
               Case("k3-tiny", 5, "mxfp4", "sm_90", nvb=2, seed=73, layout="generic-opt",
                    tiles="EXPERT_GEMV=1,XU=1"),
               Case("k3-tiny", 4, "mxfp4", "gfx950", nvb=1, tp=2, seed=74, layout="generic",
                    tiles="EXPERT_GEMV=1,MX4D=0")]


def test_k2_triton_interpreted_reads_aiter_layouts_in_place():
    """Within the bounds, and bitwise the plain layout on the same path: the same bytes
    and scales reach the same products in the same order."""
    from test_k2 import _interpreted

    results = _interpreted(AITER_CASES, "--bitwise-vs", "layout=plain-nomma")
    assert all(r["apart_from"]["apart"] == 0 and not r["mma"] for r in results), results


def test_k2_layout_off_the_offsets_is_refused():
    """k3-tiny's L 128 leaves a16w4 scale rows of 4 groups, which AITER cannot shuffle: the
    store cannot be built at all (and a plan that says so is refused by name)."""
    from k2_cases import case_dims, held_as

    from sgl_k3_mono.k2.host import K2Plan
    from sgl_k3_mono.k2.reference import K2Weights

    w = K2Weights.random(case_dims(Case("k3-tiny", 2, "mxfp4")), seed=0, expert_format="mxfp4").shard(0, 1)
    with pytest.raises(ValueError, match="columns % 8"):
        held_as(w, "a16w4")
    with pytest.raises(ValueError, match="a16w4 scale blocks"):
        K2Plan.for_weights(w, 2, isa="sm_90", bank_rows=3, grid=4, expert_layout=1)


# ---- GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("layout, rows", [("a16w4", 1), ("generic", 8)])
def test_k2_gpu_reads_aiter_layouts_in_place(layout, rows):
    """The persistent launch at the real TP-8 rank shapes (I_l 384, padded to 512) on the
    experts as SGLang's AITER post-load holds them, through the GEMV experts (1 row) and
    tl.dot_scaled (8 rows): within the bounds, and bitwise the plain layout's launch on the
    same path. (Two cases: each builds two launches, and the group shares a call's time.)"""
    from k2_cases import case_dims, run_case

    from sgl_k3_mono.k2.synthetic import random_k2_weights

    base = Case("kimi-k3-tp8-rank", rows, "mxfp4", "sm_90", nvb=2, seed=80 + rows, layout=layout)
    w = random_k2_weights(case_dims(base), fmt="mxfp4", device="cuda", seed=base.seed)
    got = run_case(base, "cuda", phase=None, weights=w, keep_out=True)
    ref = run_case(dataclasses.replace(base, layout="plain-nomma"), "cuda", phase=None, weights=w, keep_out=True)
    apart = int((got["out"] != ref["out"]).sum())
    print(f"\nK2AITER {layout} M{rows}: {apart} of {ref['out'].numel()} apart from plain, hidden {got['hidden']}")
    assert got["finite"] and got["violations"] == [] and got["routing_equal"] and not got["mma"]
    assert torch.equal(got["out"], ref["out"])
