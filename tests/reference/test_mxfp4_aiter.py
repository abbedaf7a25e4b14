"""The AITER MXFP4 expert layouts (reference/mxfp4_aiter.py): the layout SGLang 0.5.23
picks from the environment (its own selection function, which runs on the CPU), each
shuffle a bijection its unshuffle inverts, byte positions that pin the permutation, and
the dequantized experts equal to the plain layout's, padding dropped."""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.reference import mxfp4
from sgl_k3_mono.reference.mxfp4_aiter import (AiterLayout, HeldExperts, dequant_expert, shuffle,
                                               shuffle_scale_a16w4, shuffle_weight_a16w4, unshuffle)

E, L, I = 2, 512, 384  # I_l = 384 as at TP 8; L small but with the real divisibility


def _plain(inter_pad: int, seed: int = 0) -> tuple[HeldExperts, torch.Tensor, torch.Tensor]:
    """Random experts quantized to MXFP4 in SGLang's unshuffled, padded layout."""
    g = torch.Generator().manual_seed(seed)
    w13 = torch.zeros(E, 2 * inter_pad, L)
    w2 = torch.zeros(E, L, inter_pad)
    w13[:, :I] = torch.randn(E, I, L, generator=g)
    w13[:, inter_pad:inter_pad + I] = torch.randn(E, I, L, generator=g)
    w2[:, :, :I] = torch.randn(E, L, I, generator=g)
    p13, s13 = mxfp4.quantize(w13)
    p2, s2 = mxfp4.quantize(w2)
    return HeldExperts(p13, s13, p2, s2), w13, w2


@pytest.mark.parametrize("env, kind, pad", [
    ({}, "a16w4", 512),
    ({"AITER_SITUV2_A8W4": "1"}, "a16w4", 512),
    ({"AITER_SITUV2_A4W4": "1"}, "generic", 512),
    ({"AITER_SITUV2_A4W4": "1", "AITER_SITUV2_A8W4": "1"}, "a16w4", 512),
    ({"AITER_SITUV2_A4W4": "1", "SGLANG_AITER_K3_OPT": "1"}, "generic", 384),
])
def test_layout_from_env_agrees_with_sglang(env, kind, pad, monkeypatch):
    from sglang.srt.layers.quantization import mxfp4 as sg

    for k in ("AITER_SITUV2_A8W4", "AITER_SITUV2_A4W4"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    lay = AiterLayout.from_env(I, env)
    assert (lay.kind, lay.inter_pad) == (kind, pad)
    assert (lay.kind == "a16w4") == sg._aiter_situ_uses_gu_interleaved_weights()  # SGLang's own choice


@pytest.mark.parametrize("kind, pad", [("a16w4", 512), ("generic", 512), ("generic", 384)])
def test_unshuffle_inverts_shuffle_and_dequant_matches_plain(kind, pad):
    plain, w13, w2 = _plain(pad)
    lay = AiterLayout(kind, I, pad)
    held = shuffle(plain, lay)
    assert not torch.equal(held.w13, plain.w13)  # it is a different layout
    back = unshuffle(held, lay, latent=L)
    for name in ("w13", "w13_scale", "w2", "w2_scale"):
        assert torch.equal(getattr(back, name), getattr(plain, name)), name
    for e in range(E):
        g13, g2 = dequant_expert(held, lay, e, latent=L)
        assert torch.equal(g13, mxfp4.dequant_w13(plain.w13[e], plain.w13_scale[e], I))
        assert torch.equal(g2, mxfp4.dequant_w2(plain.w2[e], plain.w2_scale[e], I))
        # and close to the values quantized (MXFP4's own error, not the layout's)
        want13 = torch.cat([w13[e, :I], w13[e, pad:pad + I]])
        assert (g13 - want13).abs().max() <= want13.abs().max() / 4


def test_a16w4_byte_positions():
    """[N0, half, K0, KL, NL, KP]: 16 bytes of row 0, then row 1, ...; after 16 rows the
    next 16 bytes of row 0; after one K sweep the up half's first row."""
    ip = 512
    x = torch.arange(E * 2 * ip * (L // 2), dtype=torch.int64).remainder(251).to(torch.uint8)
    x = x.view(E, 2 * ip, L // 2)
    s = shuffle_weight_a16w4(x, True)[0].flatten()
    assert torch.equal(s[0:16], x[0, 0, 0:16])
    assert torch.equal(s[16:32], x[0, 1, 0:16])
    assert torch.equal(s[256:272], x[0, 0, 16:32])
    sweep = (L // 2 // 64) * 4 * 16 * 16
    assert torch.equal(s[sweep:sweep + 16], x[0, ip, 0:16])
    assert torch.equal(s[2 * sweep:2 * sweep + 16], x[0, 16, 0:16])


def test_a16w4_scales_need_the_256_padding():
    """I_pad 384 (SGLANG_AITER_K3_OPT=1) leaves w2 scales 12 columns: the a16w4 scale
    shuffle cannot take them (AITER fails the load), so only 512 exists in that mode."""
    s = torch.zeros(E, L, 384 // 32, dtype=torch.uint8)
    with pytest.raises(ValueError, match="columns % 8"):
        shuffle_scale_a16w4(s, False)


def test_wrong_shapes_are_refused():
    plain, _, _ = _plain(512)
    held = shuffle(plain, AiterLayout("a16w4", I, 512))
    with pytest.raises(ValueError, match="do not hold"):
        unshuffle(held, AiterLayout("a16w4", I, 384), latent=L)


@pytest.mark.parametrize("kind", ["a16w4", "generic"])
def test_the_check_against_the_installed_aiter(kind):
    """disagreement_with_aiter runs AITER's functions with SGLang's arguments on probes: a
    stand-in that shuffles as stated agrees (its scale padding garbage, as AITER's may be);
    one whose weight layout moved is named."""
    from support import fake_aiter

    from sgl_k3_mono.reference.mxfp4_aiter import disagreement_with_aiter

    assert disagreement_with_aiter(kind, fake_aiter.module()) is None
    assert disagreement_with_aiter(kind, fake_aiter.module(moved=True)) == (
        f"the installed AITER's {kind} shuffle differs from the layout K2 reads (w13 weights, w2 weights)")
