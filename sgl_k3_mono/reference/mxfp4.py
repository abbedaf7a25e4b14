"""MXFP4 (OCP Microscaling, FP4 E2M1 elements, E8M0 scales, group 32) in plain torch.

The layout is the one Kimi-K3's checkpoint ships (compressed-tensors
`mxfp4-pack-quantized`) and the one SGLang 0.5.23's `Mxfp4MoEMethod` holds after
loading and before any backend-specific post-processing:

    packed [rows, K/2] uint8   element 2j in the LOW nibble of byte j, 2j+1 in the high one
    scales [rows, K/32] uint8  E8M0: value 2^(s - 127), one per 32 consecutive elements of a row

A nibble is sign (bit 3) and a 3-bit magnitude code indexing `E2M1_MAGNITUDES`.

What SGLang does after loading depends on the backend: AITER (gfx950) preshuffles both
tensors (`shuffle_weight_a16w4` / `shuffle_scale_a16w4`, tagged `is_shuffled`), Marlin
and the SM90/SM120 cutlass paths repack. This module decodes the plain layout only (a
tensor tagged `is_shuffled` is refused with ValueError); `mxfp4_aiter.py` states AITER's
permutations and undoes them, and `experts.Mxfp4Experts` reads a store in either.
"""

from __future__ import annotations

import torch

GROUP = 32
"""Elements per E8M0 scale."""

E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
"""|value| of magnitude codes 0..7 (OCP MX v1.0, FP4 E2M1: 1 exponent bias, 1 mantissa bit)."""

E2M1_MAX = 6.0
E2M1_EMAX = 2
"""Exponent of the largest E2M1 normal (6 = 1.5 * 2^2): the OCP scale rule subtracts it."""

_E8M0_NAN = 255


def e2m1_table(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """All 16 codes' values: codes 0..7 positive, 8..15 the same magnitudes negated."""
    mag = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=device)
    return torch.cat([mag, -mag]).to(dtype)


def _refuse_shuffled(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if getattr(t, "is_shuffled", False):
            raise ValueError(
                "mxfp4: this tensor is tagged is_shuffled (an AITER preshuffled layout); "
                "only the plain [rows, K/2] + [rows, K/32] layout is decoded"
            )


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] uint8 -> [..., K] fp32 element values (scales not applied)."""
    if packed.dtype != torch.uint8:
        raise ValueError(f"mxfp4: packed elements must be uint8, got {packed.dtype}")
    table = e2m1_table(device=packed.device)
    byte = torch.arange(256, device=packed.device)
    # Byte j yields element 2j (low nibble) then 2j+1 (high): one [256, 2] lookup per byte.
    pairs = torch.stack([table[byte & 0x0F], table[byte >> 4]], dim=-1)
    out = pairs.index_select(0, packed.reshape(-1).int())
    return out.view(*packed.shape[:-1], packed.shape[-1] * 2)


def e8m0_to_float(scales: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 -> fp32 2^(s-127); 255 is NaN as OCP specifies."""
    if scales.dtype != torch.uint8:
        raise ValueError(f"mxfp4: scales must be uint8 (E8M0), got {scales.dtype}")
    s = scales.to(torch.int32)
    # ldexp keeps 2^-127 (s = 0) exact as an fp32 subnormal.
    out = torch.ldexp(torch.ones_like(s, dtype=torch.float32), s - 127)
    return torch.where(s == _E8M0_NAN, torch.full_like(out, float("nan")), out)


def nan_scale_count(scales: torch.Tensor) -> int:
    """How many E8M0 scales are the NaN code (255): groups whose every element is NaN. A max
    first: the usual answer (none) then costs one reduction and no mask the tensor's size."""
    if scales.numel() == 0 or int(scales.max().item()) < _E8M0_NAN:
        return 0
    return int((scales == _E8M0_NAN).sum().item())


def dequant(packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """packed [..., K/2] uint8 + scales [..., K/32] uint8 -> [..., K] fp32 (exact values)."""
    _refuse_shuffled(packed, scales)
    k = packed.shape[-1] * 2
    if k % GROUP or tuple(scales.shape) != (*packed.shape[:-1], k // GROUP):
        raise ValueError(
            f"mxfp4: packed {tuple(packed.shape)} (K={k}) needs scales "
            f"{(*packed.shape[:-1], k // GROUP)}, got {tuple(scales.shape)}"
        )
    vals = unpack_e2m1(packed).unflatten(-1, (k // GROUP, GROUP))
    return (vals * e8m0_to_float(scales).unsqueeze(-1)).flatten(-2)


def _round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value, ties to the even code, saturating at +-6. x fp32, returns codes."""
    mag = x.abs()
    table = torch.tensor(E2M1_MAGNITUDES, dtype=torch.float32, device=x.device)
    # Midpoints between neighbours; a tie goes to the even code (even mantissa bit).
    mids = (table[1:] + table[:-1]) / 2
    code = torch.bucketize(mag, mids, right=False)  # mag == mid -> lower code
    at_mid = (code < 7) & (mag == mids[code.clamp(max=6)])
    code = torch.where(at_mid & (code % 2 == 1), code + 1, code)
    code = torch.where(torch.isnan(mag), torch.zeros_like(code), code.clamp(max=7))
    sign = torch.signbit(x).to(torch.long) << 3
    return code | sign


def quantize(x: torch.Tensor, *, scale_rounding: str = "down") -> tuple[torch.Tensor, torch.Tensor]:
    """[..., K] float -> (packed [..., K/2] uint8, scales [..., K/32] uint8).

    scale_rounding "down" is the OCP rule, 2^(floor(log2 amax) - emax) (the largest
    element may saturate at 6); "up" picks the smallest power of two with amax/scale <= 6
    (no saturation). Elements round to nearest, ties to even. An all-zero group gets the
    smallest scale code 0.
    """
    if x.shape[-1] % GROUP:
        raise ValueError(f"mxfp4: last dim {x.shape[-1]} is not a multiple of {GROUP}")
    if scale_rounding not in ("down", "up"):
        raise ValueError(f"mxfp4: scale_rounding must be 'down' or 'up', got {scale_rounding!r}")
    g = x.float().unflatten(-1, (x.shape[-1] // GROUP, GROUP))
    amax = g.abs().amax(-1)
    # frexp gives exact exponents where log2 could round across a power of two.
    if scale_rounding == "down":
        _, e = torch.frexp(amax)
        exp = (e - 1) - E2M1_EMAX
    else:
        mant, e = torch.frexp(amax / E2M1_MAX)
        exp = torch.where(mant == 0.5, e - 1, e)
    exp = torch.where(amax > 0, exp, torch.full_like(exp, -127)).clamp(-127, 127).long()
    codes = _round_to_e2m1(g / torch.ldexp(torch.ones_like(amax), exp).unsqueeze(-1))
    codes = codes.flatten(-2)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    return packed, (exp + 127).to(torch.uint8)


def dequant_w13(packed: torch.Tensor, scales: torch.Tensor, inter: int) -> torch.Tensor:
    """One expert's w13 as Mxfp4MoEMethod holds it -> [2*inter, L] fp32, gate rows then up rows.

    The held tensor is [2*I_pad, L/2] with the gate (w1) rows at [0, inter) and the up
    (w3) rows at [I_pad, I_pad + inter); rows past `inter` in each half are padding.
    """
    rows = packed.shape[-2]
    if rows % 2 or inter > rows // 2:
        raise ValueError(f"mxfp4: w13 has {rows} rows, cannot hold 2 x inter={inter}")
    half = rows // 2
    w = dequant(packed, scales)
    return torch.cat([w[..., :inter, :], w[..., half:half + inter, :]], dim=-2)


def dequant_w2(packed: torch.Tensor, scales: torch.Tensor, inter: int) -> torch.Tensor:
    """One expert's w2 [L, I_pad/2] -> [L, inter] fp32 (padding columns dropped)."""
    w = dequant(packed, scales)
    if inter > w.shape[-1]:
        raise ValueError(f"mxfp4: w2 has {w.shape[-1]} columns, fewer than inter={inter}")
    return w[..., :inter]
