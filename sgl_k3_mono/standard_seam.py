"""The attention-residual seam as SGLang's standard path runs it on sm_90, for the
benchmarks' standard columns (never served).

SGLang 0.5.23 on sm_90 (`srt/layers/attn_residual.py`: `_use_fast` is false below SM100
and `_use_hip_fused` off ROCm) runs `_mix_fused`, a score kernel and a combine kernel in
Triton that store the pre-norm mixture as bf16, then the output RMSNorm. The Triton pair
is SGLang's own and runs wherever Triton does (the kit on the lent GPU); it needs H a
multiple of its 1024-wide block (Kimi-K3: 7168). SGLang's RMSNorm is a CUDA kernel from
sgl_kernel, not on the lent machine, so the norm is torch (same rounding: fp32 math on
the bf16 mixture, one rounding). Where the pair cannot run, the whole seam is torch and
`kind` says so.
"""

from __future__ import annotations

import functools
import importlib
import sys
import types
from typing import Any

import torch


class _Weights:
    """What SGLang's `get_cw` and kernels read off its ReplicatedLinear / RMSNorm modules."""

    def __init__(self, weight: torch.Tensor, eps: float | None = None):
        self.weight = weight
        self.variance_epsilon = eps


# attn_residual takes two class names from SGLang's layer modules, for annotations only;
# those modules need sgl_kernel, which the lent GPU does not have (a build tied to torch 2.14)
_ANNOTATION_ONLY = {"sglang.srt.layers.layernorm": "RMSNorm", "sglang.srt.layers.linear": "ReplicatedLinear"}


@functools.cache
def _import_attn_residual() -> tuple[Any, str]:
    """(SGLang's attn_residual module or None, how it was imported or why not). Imported
    as is, else with the two annotation-only imports stubbed for the import and removed
    again afterwards (the kernels run unchanged). Once a process."""
    try:
        from sglang.srt.layers import attn_residual
        return attn_residual, ""
    except Exception as e:  # noqa: BLE001 (no SGLang, or its layer modules cannot load here)
        first = f"{type(e).__name__}: {str(e)[:160]}"
    saved = {name: sys.modules.get(name) for name in _ANNOTATION_ONLY}
    try:
        for name, cls in _ANNOTATION_ONLY.items():
            stub = types.ModuleType(name)
            setattr(stub, cls, type(cls, (), {}))
            sys.modules[name] = stub
        sys.modules.pop("sglang.srt.layers.attn_residual", None)  # a half-imported attempt
        mod = importlib.import_module("sglang.srt.layers.attn_residual")
        return mod, f"layer classes stubbed for its annotations; plain import: {first}"
    except Exception as e:  # noqa: BLE001
        return None, f"not importable ({first}; with stubs: {type(e).__name__}: {str(e)[:160]})"
    finally:
        for name in _ANNOTATION_ONLY:
            if saved[name] is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = saved[name]


def _sglang_mix(hidden: int, device: torch.device):
    if device.type != "cuda":
        return None
    attn_residual, _ = _import_attn_residual()
    if attn_residual is None:
        return None
    return attn_residual._mix_fused if hidden % attn_residual._BLOCK_H == 0 else None


def seam_kind(hidden: int, device) -> str:
    """What `StandardSeam` runs for this width on this device (and how SGLang's module
    was imported, or why it could not be)."""
    kind = "SGLang _mix_fused (Triton) + torch RMSNorm" if _sglang_mix(hidden, torch.device(device)) else "torch"
    note = _import_attn_residual()[1] if torch.device(device).type == "cuda" else ""
    return kind + (f" [{note}]" if note else "")


class StandardSeam:
    """out_norm(softmax-weighted mix of bank rows 0..nvb-1 and the prefix) -> bf16 [M, H],
    for one layer's seam weights (proj [1, H] or [H], score_norm [H], out_norm [H])."""

    def __init__(self, proj: torch.Tensor, score_norm: torch.Tensor, out_norm: torch.Tensor, eps: float,
                 *, use_sglang: bool = True):
        self.eps, self.out_norm = eps, out_norm.float()
        self.cw = score_norm.float() * proj.float().reshape(-1)
        self._proj, self._norm = _Weights(proj.reshape(1, -1)), _Weights(score_norm, eps)
        self._mix = _sglang_mix(proj.numel(), proj.device) if use_sglang else None
        self.kind = seam_kind(proj.numel(), proj.device) if use_sglang else "torch"

    def mix(self, bank: torch.Tensor, nvb: int, prefix: torch.Tensor) -> torch.Tensor:
        """The pre-norm mixture, bf16 (SGLang stores it so)."""
        if self._mix is not None:
            return self._mix(prefix, bank, nvb, self._proj, self._norm)
        rows = torch.cat([bank[:, :nvb], prefix.unsqueeze(1)], 1).float()
        s = (rows * self.cw).sum(-1) * torch.rsqrt(rows.pow(2).mean(-1) + self.eps)
        return (torch.softmax(s, -1).unsqueeze(-1) * rows).sum(1).bfloat16()

    def __call__(self, bank: torch.Tensor, nvb: int, prefix: torch.Tensor) -> torch.Tensor:
        m = self.mix(bank, nvb, prefix).float()
        return (m * torch.rsqrt(m.pow(2).mean(-1, keepdim=True) + self.eps) * self.out_norm).bfloat16()
