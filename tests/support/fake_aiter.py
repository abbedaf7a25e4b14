"""A stand-in for `aiter.ops.shuffle` (AITER does not install on a CPU machine), with the
signatures SGLang 0.5.23 calls: by default it shuffles as reference/mxfp4_aiter.py states
AITER does (its scale padding filled with a nonzero byte, as AITER's torch.empty may
leave it); `moved=True` swaps two axes of each weight layout, an AITER whose layout moved.
It tests the plumbing of the check against the installed AITER, not AITER itself."""

from __future__ import annotations

import sys
import types

import torch

from sgl_k3_mono.reference import mxfp4_aiter as ref


def module(moved: bool = False) -> types.ModuleType:
    def _move(x: torch.Tensor) -> torch.Tensor:
        if not moved:
            return x
        v = x.reshape(*x.shape[:-1], x.shape[-1] // 16, 16)
        return v.flip(-2).reshape(x.shape).contiguous()  # the 16-byte chunks of each row reversed

    def shuffle_weight_a16w4(x, nlane, gate_up):
        assert nlane == 16
        return _move(ref.shuffle_weight_a16w4(x, gate_up))

    def shuffle_scale_a16w4(s, experts_cnt, gate_up):
        return ref.shuffle_scale_a16w4(s.view(experts_cnt, -1, s.shape[1]), gate_up).view(s.shape)

    def shuffle_weight(x, layout=(16, 16), use_int4=False, is_guinterleave=False, gate_up=False):
        assert layout == (16, 16) and not is_guinterleave
        return _move(ref.shuffle_weight_generic(x))

    def shuffle_scale(src, experts_cnt=None, is_guinterleave=False, gate_up=False):
        assert src.dim() == 2 and not is_guinterleave
        out = ref.shuffle_scale_generic(src.view(1, *src.shape))
        pad = ref.shuffle_scale_generic(torch.ones(1, *src.shape, dtype=src.dtype)) == 0
        out[pad] = 7
        return out

    mod = types.ModuleType("aiter.ops.shuffle")
    mod.shuffle_weight_a16w4, mod.shuffle_scale_a16w4 = shuffle_weight_a16w4, shuffle_scale_a16w4
    mod.shuffle_weight, mod.shuffle_scale = shuffle_weight, shuffle_scale
    return mod


def install(monkeypatch, moved: bool = False) -> types.ModuleType:
    """Make `import aiter.ops.shuffle` find the stand-in for the rest of a test."""
    mod = module(moved)
    ops = types.ModuleType("aiter.ops")
    ops.shuffle = mod
    pkg = types.ModuleType("aiter")
    pkg.ops = ops
    for name, m in (("aiter", pkg), ("aiter.ops", ops), ("aiter.ops.shuffle", mod)):
        monkeypatch.setitem(sys.modules, name, m)
    return mod
