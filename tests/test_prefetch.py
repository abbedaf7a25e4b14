"""The L2 prefetch's host rules (runtime/prefetch.py): a bulk request needs 16-byte
aligned starts and sizes, so the launches take a prefetch only where every request they
would issue meets that, and otherwise run without it (never a misaligned request).
What the prefetch does to speed is measured on the H200 (docs/evidence/)."""

from __future__ import annotations

import torch

from sgl_k3_mono.runtime.prefetch import blocks_prefetchable, fit_prefetch


def _bf16(*shape):
    return torch.zeros(*shape, dtype=torch.bfloat16)


def test_fit_prefetch_rounds_caps_and_refuses_misaligned_rows():
    w = _bf16(64, 7168)  # 14336-byte rows
    assert fit_prefetch(0, w) == 0
    assert fit_prefetch(4100, w) == 4096
    assert fit_prefetch(1 << 20, w) == 14336
    assert fit_prefetch(8192, w, _bf16(8, 104)) == 208  # the shortest row caps it
    assert fit_prefetch(8192, w, _bf16(8, 100)) == 0  # 200-byte rows: the second row starts misaligned
    assert fit_prefetch(4096, _bf16(64, 7172)[:, :7168]) == 0  # rows 14344 bytes apart
    assert fit_prefetch(4096, _bf16(64 * 7168 + 1)[1:].view(64, 7168)) == 0  # base off by 2 bytes


def test_blocks_prefetchable_needs_contiguous_aligned_tiles():
    w13 = torch.zeros(8, 768, 1792, dtype=torch.uint8)  # MXFP4 gate/up codes of 8 experts
    sc2 = torch.zeros(8, 3584, 12, dtype=torch.uint8)  # 12-byte scale rows
    assert blocks_prefetchable((w13, 16), (sc2, 16), (_bf16(7168, 1536), 64))
    assert not blocks_prefetchable((sc2, 2))  # a 2-row tile of 12-byte rows is 24 bytes
    assert not blocks_prefetchable((_bf16(64, 7200)[:, :7168], 16))  # rows not contiguous
    assert not blocks_prefetchable((torch.zeros(3, 16, 33, dtype=torch.uint8)[:, :, :32], 16))


def test_k1_and_k2_launches_carry_the_prefetch_they_can_take():
    from sgl_k3_mono.k1.placeholders import tp8_placeholder_launch

    plan, *_, meta = tp8_placeholder_launch("decode", 1)
    assert meta["PF_BYTES"] == plan.prefetch_bytes // 16 * 16

    from sgl_k3_mono.compile_check import _k2_variant

    _, _, meta = _k2_variant("mxfp4", "sm_90", 1, "sm_90")
    _, _, meta_hip = _k2_variant("mxfp4", "sm_90", 1, "gfx950")
    assert meta_hip["PF_NEXT"] is False and meta_hip["PF_FRONT"] == 0  # HIP builds never prefetch
    assert isinstance(meta["PF_NEXT"], bool)
