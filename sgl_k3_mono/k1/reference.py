"""`k1_reference`: the exact math of K1 (attention seam + KDA front) for one TP rank.

K1 = attention-side attn-res seam -> in-projection -> f_b -> causal conv -> gate/decay
-> q/k L2 norm -> beta -> delta rule -> gated output RMSNorm, ending at the TP-local
attention output [M, P_l] before o_proj. Roundings are where SGLang's standard path
stores bf16: the seam output, the in-projection outputs (q|k|v|g, f_a|b), the f_b
output, the conv output, o before the norm, and the normed output.

Modes:
- "decode": M requests, one token each; row i uses state slot `slots[i]`. A row whose
  slot is < 0 (or equals `pad_slot`) is padding: zero output, no state touched.
- "verify": one request, M tokens. The committed state (slot `slots[0]`) is read once;
  token t's post-state goes to `verify.ssm[verify.index, t]` and its conv window to
  `verify.conv[verify.index, t]` (SGLang's intermediate_ssm / intermediate_conv_window
  layouts); the committed pools are left alone. (SGLang's Triton conv update also
  overwrites the committed conv slot with the window after the last token; the
  post-verify commit always replaces it from intermediate_conv_window, so that value
  is never read and the reference does not reproduce it.)

TP is emulated: pass `K1Weights` (unsharded) with `tp`/`rank`, or a `K1LocalWeights`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sgl_k3_mono.k1.weights import K1LocalWeights, K1Weights
from sgl_k3_mono.reference import kda
from sgl_k3_mono.reference.attn_res import SeamResult, attn_seam
from sgl_k3_mono.reference.ops import bf16

MODES = ("decode", "verify")
MAX_ROWS = 8


@dataclass(frozen=True)
class SeamInput:
    """The residual stream arriving at the layer's attention-side seam."""

    prefix: torch.Tensor
    """[M, H] bf16 values: the running residual (embedding at layer 0, x_{L-1} after a MoE layer)."""
    contribution: torch.Tensor | None
    """[M, H] pending plain add (layer 0's reduced dense MLP at layer 1), else None."""
    bank: torch.Tensor
    """[M, NB, H] bf16 attn-res bank."""
    nvb: int
    """Valid bank rows before this read."""
    write: bool
    """Block-write layer (layer % block == 0): bank the prefix, restart the residual."""


@dataclass(frozen=True)
class KDAState:
    """One rank's state pools of one KDA layer (SGLang's layouts)."""

    conv: torch.Tensor
    """[slots, K-1, 3 P_l] bf16, oldest input first, channels q | k | v."""
    ssm: torch.Tensor
    """[slots, h_l, V, K] fp32, K contiguous."""


@dataclass(frozen=True)
class VerifyBuffers:
    """SGLang's speculative scratch for one KDA layer on one rank."""

    conv: torch.Tensor
    """[rows, T, K-1, 3 P_l] bf16: intermediate_conv_window (dense KDA layout)."""
    ssm: torch.Tensor
    """[rows, T, h_l, V, K] fp32: intermediate_ssm."""
    index: int
    """The request's scratch row (intermediate_state_indices[0])."""


@dataclass(frozen=True)
class K1Output:
    """What K1 leaves behind on one rank."""

    out: torch.Tensor
    """[M, P_l] fp32 holding bf16: gated-normed attention output before o_proj."""
    state: KDAState
    """Pools after the step (new tensors; the inputs are not modified)."""
    verify: VerifyBuffers | None
    """Scratch after a verify step (new tensors), else None."""
    seam: SeamResult
    """The seam's normed input, residual (None after a block write), bank and nvb."""


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _check(lw: K1LocalWeights, seam: SeamInput, state: KDAState, mode: str, slots: torch.Tensor,
           verify: VerifyBuffers | None, pad_slot: int | None) -> int:
    _need(mode in MODES, f"k1_reference: unknown mode {mode!r}; expected one of {MODES}")
    _need(seam.prefix.dim() == 2, f"k1_reference: prefix must be [M, H], got {tuple(seam.prefix.shape)}")
    m, h = seam.prefix.shape
    _need(1 <= m <= MAX_ROWS, f"k1_reference: M={m} rows outside 1..{MAX_ROWS}")
    _need(h == lw.qkvg.shape[1], f"k1_reference: hidden {h} does not match the weights' {lw.qkvg.shape[1]}")
    for name, t in (("prefix", seam.prefix), ("bank", seam.bank)):
        _need(t.dtype in (torch.bfloat16, torch.float32), f"k1_reference: {name} dtype {t.dtype} unsupported")
    kw, c = lw.conv_width, 3 * lw.proj
    _need(state.conv.dim() == 3 and tuple(state.conv.shape[1:]) == (kw - 1, c),
          f"k1_reference: conv state must be [slots, {kw - 1}, {c}], got {tuple(state.conv.shape)}")
    _need(state.conv.dtype == torch.bfloat16, f"k1_reference: conv state must be bf16, got {state.conv.dtype}")
    d = lw.head_dim
    _need(state.ssm.dim() == 4 and tuple(state.ssm.shape[1:]) == (lw.heads, d, d),
          f"k1_reference: ssm state must be [slots, {lw.heads}, {d}, {d}], got {tuple(state.ssm.shape)}")
    _need(state.ssm.dtype == torch.float32, f"k1_reference: ssm state must be fp32, got {state.ssm.dtype}")
    _need(state.conv.shape[0] == state.ssm.shape[0], "k1_reference: conv and ssm pools differ in slots")
    _need(slots.dim() == 1 and not slots.is_floating_point(), "k1_reference: slots must be a 1-D integer tensor")
    n_slots = state.ssm.shape[0]
    _need(bool((slots < n_slots).all()), f"k1_reference: a slot index is >= the pool's {n_slots} slots")
    if mode == "decode":
        _need(slots.numel() == m, f"k1_reference: decode needs one slot per row ({m}), got {slots.numel()}")
        live = [s for s in slots.tolist() if s >= 0 and s != pad_slot]
        _need(len(live) == len(set(live)), "k1_reference: two decode rows share a state slot")
        _need(verify is None, "k1_reference: verify buffers given in decode mode")
    else:
        _need(slots.numel() == 1, f"k1_reference: verify is one request; got {slots.numel()} slots")
        _need(verify is not None, "k1_reference: verify mode needs VerifyBuffers")
        _need(verify.ssm.dim() == 5 and tuple(verify.ssm.shape[2:]) == (lw.heads, d, d)
              and verify.ssm.dtype == torch.float32,
              f"k1_reference: intermediate ssm must be fp32 [rows, T, {lw.heads}, {d}, {d}], got "
              f"{tuple(verify.ssm.shape)} {verify.ssm.dtype}")
        _need(verify.conv.dim() == 4 and tuple(verify.conv.shape[2:]) == (kw - 1, c)
              and verify.conv.dtype == torch.bfloat16,
              f"k1_reference: intermediate conv must be bf16 [rows, T, {kw - 1}, {c}], got "
              f"{tuple(verify.conv.shape)} {verify.conv.dtype}")
        _need(verify.ssm.shape[:2] == verify.conv.shape[:2], "k1_reference: intermediate buffers disagree in rows/T")
        _need(m <= verify.ssm.shape[1], f"k1_reference: {m} tokens exceed the scratch's {verify.ssm.shape[1]} steps")
        _need(0 <= verify.index < verify.ssm.shape[0], f"k1_reference: scratch row {verify.index} out of range")
    return m


def in_projection(lw: K1LocalWeights, h: torch.Tensor) -> dict[str, torch.Tensor]:
    """The in-projection as SGLang's standard path stores it (bf16 values, fp32 tensors).

    Returns q|k|v ("qkv" [M, 3 P_l]), "g" [M, P_l], "f_a" [M, D], "b" [M, h_l], "f" [M, P_l].
    """
    hf = h.float()
    qkvg = bf16(hf @ lw.qkvg.float().t())
    bfa = bf16(hf @ lw.bfa.float().t())
    d, p = lw.head_dim, lw.proj
    f_a, b = bfa[:, :d], bfa[:, d : d + lw.heads]
    return {
        "qkv": qkvg[:, : 3 * p],
        "g": qkvg[:, 3 * p :],
        "f_a": f_a,
        "b": b,
        "f": bf16(f_a @ lw.f_b.float().t()),
    }


def _kda_token(lw: K1LocalWeights, proj: dict[str, torch.Tensor], window: torch.Tensor, ssm: torch.Tensor):
    """KDA for N independent tokens with their own windows [N, K-1, C] and states [N, h, V, K]."""
    n, hl, d = window.shape[0], lw.heads, lw.head_dim
    y, new_window = kda.conv_update(window, proj["qkv"], lw.conv)
    q, k, v = (t.reshape(n, hl, d) for t in y.split(lw.proj, -1))
    g = kda.log_decay(proj["f"].reshape(n, hl, d), lw.a_log, lw.dt_bias.reshape(hl, d), lw.lower_bound)
    q = kda.l2norm(q) * d ** -0.5
    k = kda.l2norm(k)
    beta = torch.sigmoid(proj["b"].float())
    o, new_ssm = kda.delta_rule_step(ssm, q, k, v, torch.exp(g), beta)
    o = bf16(o)
    out = bf16(kda.gated_rmsnorm(o, lw.o_norm, proj["g"].reshape(n, hl, d)))
    return out.reshape(n, lw.proj), new_window, new_ssm


def k1_reference(
    weights: K1Weights | K1LocalWeights,
    seam: SeamInput,
    state: KDAState,
    slots: torch.Tensor,
    *,
    mode: str = "decode",
    tp: int = 1,
    rank: int = 0,
    rms_eps: float = 1e-5,
    isa: str = "gfx950",
    pad_slot: int | None = None,
    verify: VerifyBuffers | None = None,
) -> K1Output:
    """K1 for rank `rank` of `tp` (see the module docstring for modes and roundings).

    `weights` unsharded are sharded here; `K1LocalWeights` are used as given (tp/rank
    then only have to be consistent with them). `isa` picks the seam's rounding.
    """
    if isinstance(weights, K1Weights):
        lw = weights.shard(rank, tp)
    elif isinstance(weights, K1LocalWeights):
        lw = weights
    else:
        raise ValueError(f"k1_reference: weights must be K1Weights or K1LocalWeights, got {type(weights).__name__}")
    m = _check(lw, seam, state, mode, slots, verify, pad_slot)

    sr = attn_seam(seam.bank, seam.nvb, seam.prefix, seam.contribution, lw.seam, rms_eps,
                   write=seam.write, isa=isa)
    proj = in_projection(lw, sr.normed)
    conv, ssm = state.conv.clone(), state.ssm.clone()
    out = torch.zeros(m, lw.proj)

    if mode == "decode":
        live = [i for i, s in enumerate(slots.tolist()) if s >= 0 and s != pad_slot]
        if live:
            idx = torch.tensor(live)
            sl = slots[idx].long()
            rows = {key: t[idx] for key, t in proj.items()}
            o, win, s = _kda_token(lw, rows, conv[sl], ssm[sl])
            out[idx], conv[sl], ssm[sl] = o, win, s
        return K1Output(out, KDAState(conv, ssm), None, sr)

    slot = int(slots[0])
    vconv, vssm = verify.conv.clone(), verify.ssm.clone()
    if slot >= 0 and slot != pad_slot:
        win, s = conv[slot : slot + 1], ssm[slot : slot + 1]
        for t in range(m):
            o, win, s = _kda_token(lw, {key: x[t : t + 1] for key, x in proj.items()}, win, s)
            out[t] = o[0]
            vconv[verify.index, t], vssm[verify.index, t] = win[0], s[0]
    return K1Output(out, state, VerifyBuffers(vconv, vssm, verify.index), sr)
