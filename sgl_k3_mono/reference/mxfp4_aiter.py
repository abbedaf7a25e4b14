"""The MXFP4 routed-expert layouts SGLang 0.5.23 leaves on ROCm, and a plain-torch
dequantizer for each (the oracle a gfx950 expert reader is tested against).

On ROCm with AITER, `Mxfp4MoEMethod` pads the expert width per rank (I_l = 384 at
TP 8) to I_pad = round_up(I_l, 256) = 512, or to a multiple of 128 (384, no padding)
with SGLANG_AITER_K3_OPT=1, loads w13 [E, 2 I_pad, L/2] (gate rows [0, I_l), up rows
[I_pad, I_pad + I_l)) and w2 [E, L, I_pad/2] with ue8m0 scales [.., K/32], then
preshuffles all four tensors in place (process_weights_after_loading). Which shuffle
depends on AITER's SiTU activation mode, read from the environment at load:

- "a16w4" (the default; also with AITER_SITUV2_A8W4=1): AITER's gate/up-interleaved
  preshuffle. Weights, per expert, with NL = 16 lanes, KL = 4 lane groups, KP = 16 bytes:
    w13 [2, N0, NL, K0, KL, KP] -> [N0, 2, K0, KL, NL, KP]   (N0 = I_pad/16, K0 = (L/2)/64)
    w2  [N0, NL, K0, KL, KP]    -> [N0, K0, KL, NL, KP]      (N0 = L/16,     K0 = (I_pad/2)/64)
  Scales, per expert, rows n = (np, n1, nl) or (n1, np, nl), columns k = (k1, kp, kl)
  with NP = KP' = 2, NL = 16, KL = 4:
    w13 [NP, N1, NL, K1, KP', KL] -> [N1, K1, KL, NL, KP', NP]  (NP splits gate | up)
    w2  [N1, NP, NL, K1, KP', KL] -> [N1, K1, KL, NL, KP', NP]
  The w2 scale shuffle needs (I_pad/32) % 8 == 0, so I_pad = 384 does not load (AITER
  raises at startup); only I_pad = 512 exists in this mode.
- "generic" (AITER_SITUV2_A4W4=1 without A8W4): AITER's generic 16 x 16 preshuffle.
  Weights [.., R, C] bytes -> tiles of 16 rows x 32 bytes, each tile's 16-byte halves
  outermost: [R/16, 16, C/32, 2, 16] -> [R/16, C/32, 2, 16, 16]. Scales, all experts'
  rows stacked [E R, C], padded with zeros to [round_up(E R, 256), round_up(C, 8)]
  then [S/32, 2, 16, C'/8, 2, 4] -> [S/32, C'/8, 4, 16, 2, 2]. A padded scale tensor has
  a different shape from the unshuffled one (w2 at I_pad = 384: 12 -> 16 columns).

These are facts about AITER's `aiter.ops.shuffle` functions as SGLang 0.5.23 calls them
(`shuffle_weight_a16w4(w, 16, gate_up)`, `shuffle_scale_a16w4(s, E, gate_up)`,
`shuffle_weight(w, is_guinterleave=False, gate_up=..)`, `shuffle_scale(s, experts_cnt=E,
is_guinterleave=False, gate_up=..)`); AITER does not install on a CPU machine, so the
functions here are this project's own statement of those permutations, each tested to
be a bijection that the dequantizer inverts exactly. SGLang holds both kinds' scales as 2-D
tensors (it shuffles `scale.view(-1, K/32)`): a16w4's [E R, K/32], generic's padded
[round_up(E R, 256), round_up(K/32, 8)] (AITER fills that padding with `torch.empty`, so it
holds whatever the allocator left). K2 reads these layouts in place through
k2/expert_layout.py's offsets, which tests/launch/test_expert_layout.py holds to the
permutations stated here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import torch

from sgl_k3_mono.reference import mxfp4

LAYOUTS = ("a16w4", "generic")


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass(frozen=True)
class AiterLayout:
    """Which preshuffle and which padded expert width one MoE layer's experts hold."""

    kind: str
    """"a16w4" (gate/up-interleaved preshuffle) or "generic" (16 x 16 preshuffle)."""
    inter: int
    """I_l: the true expert width a rank holds."""
    inter_pad: int
    """I_pad: the width the tensors are allocated with (512 or 384 at TP 8)."""

    def __post_init__(self):
        if self.kind not in LAYOUTS:
            raise ValueError(f"AiterLayout: kind {self.kind!r} is not one of {LAYOUTS}")
        if self.inter_pad < self.inter or self.inter_pad % 128:
            raise ValueError(f"AiterLayout: I_pad {self.inter_pad} for I {self.inter}")

    @classmethod
    def from_env(cls, inter: int, env: Mapping[str, str]) -> "AiterLayout":
        """The layout SGLang 0.5.23 builds under `env` (read at load, as SGLang reads it)."""
        on = lambda k: str(env.get(k, "false")).strip().lower() in ("1", "true", "yes", "on")  # noqa: E731
        kind = "a16w4" if on("AITER_SITUV2_A8W4") or not on("AITER_SITUV2_A4W4") else "generic"
        return cls(kind, inter, _round_up(inter, 128 if on("SGLANG_AITER_K3_OPT") else 256))

    def describe(self) -> str:
        pad = f"expert width padded {self.inter} -> {self.inter_pad}" if self.inter_pad != self.inter \
            else f"expert width {self.inter} unpadded"
        what = "gate/up-interleaved a16w4 preshuffle" if self.kind == "a16w4" else "generic 16x16 preshuffle"
        return f"AITER {what}, {pad}"


# ---- weights ----------------------------------------------------------------------------

def _w_a16w4_dims(x: torch.Tensor, gate_up: bool) -> tuple:
    e, n, kb = x.shape
    halves = 2 if gate_up else 1
    if (n // halves) % 16 or kb % 64:
        raise ValueError(f"mxfp4_aiter: a16w4 weight {tuple(x.shape)} needs rows/{halves} % 16 and K/2 % 64")
    return e, halves, n // halves // 16, kb // 64


def shuffle_weight_a16w4(x: torch.Tensor, gate_up: bool) -> torch.Tensor:
    e, h, n0, k0 = _w_a16w4_dims(x, gate_up)
    v = x.reshape(e, h, n0, 16, k0, 4, 16)
    return v.permute(0, 2, 1, 4, 5, 3, 6).reshape(x.shape).contiguous()


def unshuffle_weight_a16w4(x: torch.Tensor, gate_up: bool) -> torch.Tensor:
    e, h, n0, k0 = _w_a16w4_dims(x, gate_up)
    v = x.reshape(e, n0, h, k0, 4, 16, 16)  # (e, n0, half, k0, kl, nl, kp)
    return v.permute(0, 2, 1, 5, 3, 4, 6).reshape(x.shape).contiguous()


def _w_generic_dims(x: torch.Tensor) -> tuple:
    r, c = x.shape[-2:]
    if r % 16 or c % 32:
        raise ValueError(f"mxfp4_aiter: generic weight {tuple(x.shape)} needs rows % 16 and bytes % 32")
    return r // 16, c // 32


def shuffle_weight_generic(x: torch.Tensor) -> torch.Tensor:
    r0, c0 = _w_generic_dims(x)
    v = x.reshape(-1, r0, 16, c0, 2, 16)
    return v.permute(0, 1, 3, 4, 2, 5).reshape(x.shape).contiguous()


def unshuffle_weight_generic(x: torch.Tensor) -> torch.Tensor:
    r0, c0 = _w_generic_dims(x)
    v = x.reshape(-1, r0, c0, 2, 16, 16)  # (.., r0, c0, half, row, byte)
    return v.permute(0, 1, 4, 2, 3, 5).reshape(x.shape).contiguous()


# ---- scales -----------------------------------------------------------------------------

def _s_a16w4_dims(s: torch.Tensor) -> tuple:
    e, n, k = s.shape
    if n % 32 or k % 8:
        raise ValueError(f"mxfp4_aiter: a16w4 scales {tuple(s.shape)} need rows % 32 and columns % 8 "
                         "(AITER's shuffle fails to load such a layer)")
    return e, n // 32, k // 8


def shuffle_scale_a16w4(s: torch.Tensor, gate_up: bool) -> torch.Tensor:
    """s: [E, N, K/32] -> the same shape, shuffled per expert."""
    e, n1, k1 = _s_a16w4_dims(s)
    if gate_up:
        v = s.reshape(e, 2, n1, 16, k1, 2, 4).permute(0, 2, 4, 6, 3, 5, 1)
    else:
        v = s.reshape(e, n1, 2, 16, k1, 2, 4).permute(0, 1, 4, 6, 3, 5, 2)
    return v.reshape(s.shape).contiguous()


def unshuffle_scale_a16w4(s: torch.Tensor, gate_up: bool) -> torch.Tensor:
    e, n1, k1 = _s_a16w4_dims(s)
    v = s.reshape(e, n1, k1, 4, 16, 2, 2)  # (e, n1, k1, kl, nl, kp, np)
    if gate_up:
        v = v.permute(0, 6, 1, 4, 2, 5, 3)  # -> (e, np, n1, nl, k1, kp, kl)
    else:
        v = v.permute(0, 1, 6, 4, 2, 5, 3)  # -> (e, n1, np, nl, k1, kp, kl)
    return v.reshape(s.shape).contiguous()


def shuffle_scale_generic(s: torch.Tensor) -> torch.Tensor:
    """s: [E, N, K/32] -> [round_up(E N, 256), round_up(K/32, 8)] (zero padded, shuffled)."""
    e, n, k = s.shape
    rows, cols = _round_up(e * n, 256), _round_up(k, 8)
    padded = torch.zeros(rows, cols, dtype=s.dtype, device=s.device)
    padded[:e * n, :k] = s.reshape(e * n, k)
    v = padded.reshape(rows // 32, 2, 16, cols // 8, 2, 4).permute(0, 3, 5, 2, 4, 1)
    return v.reshape(rows, cols).contiguous()


def unshuffle_scale_generic(s: torch.Tensor, experts: int, rows: int, cols: int) -> torch.Tensor:
    """Inverse of shuffle_scale_generic, dropping the padding: -> [experts, rows, cols].
    Any whole 32-row run of the shuffled rows unshuffles alone (one expert's, rows % 32)."""
    sr, sc = s.shape
    if sr % 32 or sc % 8 or sr < experts * rows or sc < cols:
        raise ValueError(f"mxfp4_aiter: generic scales {tuple(s.shape)} cannot hold [{experts}, {rows}, {cols}]")
    v = s.reshape(sr // 32, sc // 8, 4, 16, 2, 2).permute(0, 5, 3, 1, 4, 2)
    return v.reshape(sr, sc)[:experts * rows, :cols].reshape(experts, rows, cols).contiguous()


# ---- the held tensors, both ways ----------------------------------------------------------

@dataclass(frozen=True)
class HeldExperts:
    """The four tensors one MoE layer holds (all experts), in some layout."""

    w13: torch.Tensor
    w13_scale: torch.Tensor
    w2: torch.Tensor
    w2_scale: torch.Tensor


def shuffle(plain: HeldExperts, layout: AiterLayout) -> HeldExperts:
    """SGLang's unshuffled tensors (at I_pad) -> what AITER's post-load leaves (2-D scales)."""
    if layout.kind == "a16w4":
        s13, s2 = shuffle_scale_a16w4(plain.w13_scale, True), shuffle_scale_a16w4(plain.w2_scale, False)
        return HeldExperts(shuffle_weight_a16w4(plain.w13, True), s13.reshape(-1, s13.shape[-1]),
                           shuffle_weight_a16w4(plain.w2, False), s2.reshape(-1, s2.shape[-1]))
    return HeldExperts(shuffle_weight_generic(plain.w13), shuffle_scale_generic(plain.w13_scale),
                       shuffle_weight_generic(plain.w2), shuffle_scale_generic(plain.w2_scale))


def unshuffle(held: HeldExperts, layout: AiterLayout, *, latent: int) -> HeldExperts:
    """The inverse: AITER's layout -> SGLang's unshuffled tensors at I_pad."""
    e, ip = held.w13.shape[0], layout.inter_pad
    if tuple(held.w13.shape) != (e, 2 * ip, latent // 2) or tuple(held.w2.shape) != (e, latent, ip // 2):
        raise ValueError(f"mxfp4_aiter: w13 {tuple(held.w13.shape)} / w2 {tuple(held.w2.shape)} do not hold "
                         f"{layout} at L={latent}")
    if layout.kind == "a16w4":
        s13 = held.w13_scale.reshape(e, 2 * ip, latent // 32)
        s2 = held.w2_scale.reshape(e, latent, ip // 32)
        return HeldExperts(unshuffle_weight_a16w4(held.w13, True), unshuffle_scale_a16w4(s13, True),
                           unshuffle_weight_a16w4(held.w2, False), unshuffle_scale_a16w4(s2, False))
    return HeldExperts(unshuffle_weight_generic(held.w13),
                       unshuffle_scale_generic(held.w13_scale, e, 2 * ip, latent // 32),
                       unshuffle_weight_generic(held.w2), unshuffle_scale_generic(held.w2_scale, e, latent, ip // 32))


def dequant_expert(held: HeldExperts, layout: AiterLayout, e: int, *, latent: int,
                   plain: Optional[HeldExperts] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert e's fp32 (w13 [2 I, L] gate rows then up rows, w2 [L, I]) from AITER's layout,
    the padding dropped: the values a reader of this layout must reproduce exactly.
    `plain`: the unshuffled tensors if already computed (unshuffling all experts is the cost)."""
    p = plain if plain is not None else unshuffle(held, layout, latent=latent)
    return (mxfp4.dequant_w13(p.w13[e], p.w13_scale[e], layout.inter),
            mxfp4.dequant_w2(p.w2[e], p.w2_scale[e], layout.inter))


# ---- one expert of a K2 store, and a rank's store as SGLang leaves it ----------------------

def scale_cols(kind: str, groups: int) -> int:
    """Scale columns a layout holds for `groups` scale groups a row (generic pads to 8)."""
    return _round_up(groups, 8) if kind == "generic" else groups


def scale_rows(kind: str, rows: int) -> int:
    """Rows SGLang's 2-D scale tensor holds for all experts' `rows` (generic pads to 256)."""
    return _round_up(rows, 256) if kind == "generic" else rows


def expert_view(s: torch.Tensor, kind: str, experts: int, rows: int, groups: int) -> torch.Tensor:
    """SGLang's 2-D shuffled scales as [experts, rows, C'] (a view, no copy): a16w4's
    [E R, K/32] reshaped; generic's first E R rows of its padded tensor."""
    cols = scale_cols(kind, groups)
    if s.dim() != 2 or s.shape[1] != cols or s.shape[0] < experts * rows:
        raise ValueError(f"mxfp4_aiter: {kind} scales {tuple(s.shape)} do not hold [{experts}, {rows}, {cols}]")
    return s[:experts * rows].view(experts, rows, cols)


def plain_scales(s: torch.Tensor, kind: str, gate_up: bool, groups: int) -> torch.Tensor:
    """Scales [E, R, C'] in `kind` (as expert_view leaves them) -> plain [E, R, groups]."""
    if kind == "a16w4":
        return unshuffle_scale_a16w4(s, gate_up)
    if kind == "generic":
        e, r, c = s.shape
        return unshuffle_scale_generic(s.reshape(e * r, c), e, r, groups)
    raise ValueError(f"mxfp4_aiter: kind {kind!r} is not one of {LAYOUTS}")


def plain_expert(w13: torch.Tensor, s13: torch.Tensor, w2: torch.Tensor, s2: torch.Tensor, kind: str,
                 *, latent: int, inter_pad: int) -> HeldExperts:
    """One expert's tensors in `kind` (w13 [2 I_pad, L/2], s13 [2 I_pad, C'], w2, s2 as
    expert_view leaves them) -> the plain layout at I_pad, scales' padding dropped."""
    one = lambda t: t.unsqueeze(0)  # noqa: E731
    if kind == "a16w4":
        w13p, w2p = unshuffle_weight_a16w4(one(w13), True), unshuffle_weight_a16w4(one(w2), False)
    elif kind == "generic":
        w13p, w2p = unshuffle_weight_generic(one(w13)), unshuffle_weight_generic(one(w2))
    else:
        raise ValueError(f"mxfp4_aiter: kind {kind!r} is not one of {LAYOUTS}")
    return HeldExperts(w13p[0], plain_scales(one(s13), kind, True, latent // 32)[0],
                       w2p[0], plain_scales(one(s2), kind, False, inter_pad // 32)[0])


def padded_like_sglang(w13: torch.Tensor, s13: torch.Tensor, w2: torch.Tensor, s2: torch.Tensor,
                       inter_pad: int, *, fill: int = 0) -> HeldExperts:
    """A rank's plain unpadded MXFP4 experts (w13 [E, 2 I, L/2] gate then up, w2 [E, L, I/2],
    scales alike) padded to I_pad as Mxfp4MoEMethod.create_weights allocates them: gate rows
    at 0, up rows at I_pad, w2's columns past I; the padding bytes and scales `fill`."""
    e, two_i, half_l = w13.shape
    i, lat = two_i // 2, half_l * 2
    if tuple(w2.shape) != (e, lat, i // 2) or inter_pad < i:
        raise ValueError(f"mxfp4_aiter: w13 {tuple(w13.shape)} / w2 {tuple(w2.shape)} do not pad to {inter_pad}")

    def pad_rows(t):
        out = torch.full((e, 2 * inter_pad, t.shape[2]), fill, dtype=t.dtype, device=t.device)
        out[:, :i], out[:, inter_pad:inter_pad + i] = t[:, :i], t[:, i:]
        return out

    def pad_cols(t, cols):
        out = torch.full((e, lat, cols), fill, dtype=t.dtype, device=t.device)
        out[:, :, :t.shape[2]] = t
        return out

    return HeldExperts(pad_rows(w13), pad_rows(s13), pad_cols(w2, inter_pad // 2), pad_cols(s2, inter_pad // 32))


def held_like_sglang(w13: torch.Tensor, s13: torch.Tensor, w2: torch.Tensor, s2: torch.Tensor,
                     layout: AiterLayout, *, fill: int = 0) -> HeldExperts:
    """The same experts as SGLang 0.5.23 holds them after AITER's post-load: padded
    (padded_like_sglang; `fill` 255 makes every padded code -6 and every padded scale NaN, so
    a reader that touches padding shows it) and shuffled, scales 2-D."""
    e, lat = w13.shape[0], w13.shape[2] * 2
    if w13.shape[1] // 2 != layout.inter:
        raise ValueError(f"mxfp4_aiter: w13 {tuple(w13.shape)} is not {layout}")
    ip = layout.inter_pad
    held = shuffle(padded_like_sglang(w13, s13, w2, s2, ip, fill=fill), layout)
    if layout.kind == "generic" and fill:  # AITER's scale padding is torch.empty: not zeros either
        for name, rows, groups in (("w13_scale", e * 2 * ip, lat // 32), ("w2_scale", e * lat, ip // 32)):
            real = shuffle_scale_generic(torch.ones(e, rows // e, groups, dtype=torch.uint8, device=w13.device))
            getattr(held, name)[real == 0] = fill
    return held


# ---- the installed AITER against these statements -------------------------------------------

def _probe(seed: int, *shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)


def disagreement_with_aiter(kind: str, shuffle_module=None) -> Optional[str]:
    """Run the installed AITER's own shuffles (as SGLang 0.5.23 calls them) on small probe
    tensors of distinct bytes and compare with this module's permutations: None when they
    agree, else what differs. The offsets K2 reads through are tested against this module,
    so an AITER whose layout moved would otherwise be read as the old one; the running
    server's AITER is asked, whatever its version. `shuffle_module`: aiter.ops.shuffle
    (imported when None; ImportError if it is not installed)."""
    if shuffle_module is None:
        import importlib

        shuffle_module = importlib.import_module("aiter.ops.shuffle")
    e, half, k_bytes, groups = 2, 32, 128, 8  # the smallest shapes both kinds' shuffles take
    out = []
    for gate_up in (True, False):
        rows = 2 * half if gate_up else half
        w, s = _probe(1, e, rows, k_bytes), _probe(2, e, rows, groups)
        name = "w13" if gate_up else "w2"
        if kind == "a16w4":
            want_w = shuffle_weight_a16w4(w, gate_up)
            got_w = shuffle_module.shuffle_weight_a16w4(w.clone(), 16, gate_up)
            want_s = shuffle_scale_a16w4(s, gate_up).reshape(-1, groups)
            got_s = shuffle_module.shuffle_scale_a16w4(s.clone().view(-1, groups), e, gate_up)
            real = torch.ones_like(want_s, dtype=torch.bool)
        else:
            want_w = shuffle_weight_generic(w)
            got_w = shuffle_module.shuffle_weight(w.clone(), is_guinterleave=False, gate_up=gate_up)
            want_s = shuffle_scale_generic(s)
            got_s = shuffle_module.shuffle_scale(s.clone().view(-1, groups), experts_cnt=e, is_guinterleave=False,
                                                 gate_up=gate_up)
            real = shuffle_scale_generic(torch.ones_like(s)) != 0  # AITER's padding is torch.empty
        got_w, got_s = got_w.view(torch.uint8).reshape(want_w.shape), got_s.view(torch.uint8)
        if not torch.equal(got_w, want_w):
            out.append(f"{name} weights")
        if tuple(got_s.shape) != tuple(want_s.shape) or not torch.equal(got_s[real], want_s[real]):
            out.append(f"{name} scales")
    return None if not out else f"the installed AITER's {kind} shuffle differs from the layout K2 reads ({', '.join(out)})"
