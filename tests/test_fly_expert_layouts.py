"""The FlyDSL K2's walk over the MXFP4 experts (k2/flydsl/experts.py and tile.mxfp4_rows,
whose offsets are geometry.expert_rows / up_row / mxfp4_offsets), replayed in plain torch
on tensors held as SGLang holds them: every lane's 16-byte load and scale byte, for every
experts_up item and experts_down row, is the plain layout's. The kernel has never run (no
gfx950 GPU); this checks the arithmetic it traces, the same Python functions."""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.k2.expert_layout import code_of
from sgl_k3_mono.k2.flydsl.geometry import EXPERT_BI, KC, expert_rows, mxfp4_offsets, up_row
from sgl_k3_mono.reference.experts import Mxfp4Experts
from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout, held_like_sglang

E, L, I = 2, 512, 384  # I_l as at TP 8


def _held(kind: str, pad: int):
    g = torch.Generator().manual_seed(pad)
    u8 = lambda *s: torch.randint(0, 256, s, generator=g, dtype=torch.uint8)  # noqa: E731
    plain = (u8(E, 2 * I, L // 2), u8(E, 2 * I, L // 32), u8(E, L, I // 2), u8(E, L, I // 32))
    if kind == "plain":
        return plain, Mxfp4Experts(*plain, I)
    h = held_like_sglang(*plain, AiterLayout(kind, I, pad), fill=255)
    return plain, Mxfp4Experts.from_sglang(h.w13, h.w13_scale, h.w2, h.w2_scale, I, kind)


def _loads(w: torch.Tensor, s: torch.Tensor, row_byte, s_row_byte, k, xl):
    """What a lane's mxfp4_rows load reads: its 16 bytes and its scale byte."""
    w_off, s_off, shift = mxfp4_offsets(row_byte, s_row_byte, k, xl)
    wf, sf = w.reshape(-1), s.reshape(-1)
    assert int((s_off % 4).max()) == 0  # the scale's dword load is aligned
    words = wf[w_off[..., None] + torch.arange(16)]
    dword = sum(sf[s_off + j].long() << (8 * j) for j in range(4))
    return words, (dword >> shift) & 255


@pytest.mark.parametrize("kind, pad", [("plain", I), ("a16w4", 512), ("generic", 512), ("generic", 384)])
def test_fly_experts_read_the_plain_bytes(kind, pad):
    (w13, s13, w2, s2), ex = _held(kind, pad)
    xl = code_of(kind)
    i_up = ex.w13.shape[1] // 2
    # experts_up: items (e, i0), lane l feeds row i0 + l % 16, column group l // 16 of each chunk
    e = torch.arange(E)[:, None, None, None]
    i0 = (torch.arange(I // EXPERT_BI) * EXPERT_BI)[None, :, None, None]
    lane = torch.arange(64)[None, None, :, None]
    c = torch.arange(L // KC)[None, None, None, :]
    k = c * KC + (lane // 16) * 32
    gate = i0 + lane % 16
    up = up_row(i_up, xl) + i0 + lane % 16
    st = (ex.w13.stride(0), ex.w13.stride(1), ex.w13_scale.stride(0), ex.w13_scale.stride(1))
    for got_row, plain_row in ((expert_rows(e, gate, *st, xl, True), gate),
                               (expert_rows(e, up, *st, xl, True, up=xl == 1), I + gate)):
        words, scale = _loads(ex.w13, ex.w13_scale, *got_row, k, xl)
        assert torch.equal(words, w13[e[..., None], plain_row[..., None], (k // 2)[..., None] + torch.arange(16)])
        assert torch.equal(scale, s13[e, plain_row, k // 32].long())
    # experts_down: rows l of w2, over the whole I (K = I: 3 chunks at TP 8)
    row = torch.arange(L)[None, :, None, None]
    e2 = torch.arange(E)[:, None, None, None]
    lane2 = torch.arange(64)[None, None, :, None]
    k2 = torch.arange(I // KC)[None, None, None, :] * KC + (lane2 // 16) * 32
    st2 = (ex.w2.stride(0), ex.w2.stride(1), ex.w2_scale.stride(0), ex.w2_scale.stride(1))
    words, scale = _loads(ex.w2, ex.w2_scale, *expert_rows(e2, row, *st2, xl, False), k2, xl)
    assert torch.equal(words, w2[e2[..., None], row[..., None], (k2 // 2)[..., None] + torch.arange(16)])
    assert torch.equal(scale, s2[e2, row, k2 // 32].long())
