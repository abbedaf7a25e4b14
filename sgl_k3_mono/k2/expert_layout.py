"""Where one MXFP4 code byte and one scale byte of a routed expert sit, in each layout
SGLang 0.5.23 leaves its experts in: the address arithmetic K2's kernels (Triton and
FlyDSL) read the experts through, so neither copies a weight to serve a layout.

Layouts (`LAYOUT_CODES`; reference/mxfp4_aiter.py states the AITER permutations and is the
oracle these offsets are tested against, tests/launch/test_expert_layout.py):

- "plain": `Mxfp4MoEMethod`'s loaded tensors, bytes [E, R, C] row-major (C = K/2), scales
  [E, R, K/32]. SGLang leaves it on CUDA, and on ROCm without AITER.
- "a16w4": AITER's gate/up-interleaved preshuffle, SGLang's default on gfx950.
- "generic": AITER's 16 x 16 preshuffle (AITER_SITUV2_A4W4=1 without A8W4).

Every AITER layout stores a group of 16 rows as one block, 16-byte chunk by chunk:
chunk j of row r (codes 32 j .. 32 j + 31) sits at block(r // 16) + 256 j + 16 (r % 16).
The blocks follow each other in row order, except a16w4's w13, whose gate and up blocks
alternate (block n0 of the gate half, then block n0 of the up half). The scales go by 32
rows and 8 groups: scale (r, g) sits at block(r // 32, g // 8) + 64 (g % 4) + 4 (r % 16)
+ 2 ((g // 4) % 2) + (which 16 rows of the 32); a16w4's w13 pairs a gate block with the
same up block there instead (its "16 rows of 32" bit is the half).

Offsets are in bytes from the expert's first byte of the half being read (w13's gate rows
at 0, its up rows at `up_offsets`), with the strides of the tensors as K2 views them: a
weight row's `row_bytes` (C) and a scale row's `scale_row_bytes` (the scale tensor viewed
[E, R, C'], C' the padded group count for "generic"). Written with + * // % only, so the
same function computes a Python int, a torch index tensor (the tests) and a FlyDSL value.
No torch import: the plugin's entry point imports this module's users lazily anyway.
"""

from __future__ import annotations

LAYOUT_CODES = {"plain": 0, "a16w4": 1, "generic": 2}
"""Each layout's code as the kernels take it (a compile-time constant, XL)."""

CHUNK = 16
"""Bytes of one row's run in a 16-row block: 32 codes, one scale group."""


def code_of(layout: str) -> int:
    if layout not in LAYOUT_CODES:
        raise ValueError(f"expert_layout: {layout!r} is not one of {sorted(LAYOUT_CODES)}")
    return LAYOUT_CODES[layout]


def chunk_stride(xl: int) -> int:
    """Bytes from one 16-byte chunk of a row to its next (codes 32 j -> 32 (j + 1))."""
    return CHUNK if xl == 0 else 16 * CHUNK


def weight_row(row, row_bytes, xl: int, gate_up: bool):
    """Offset of row `row`'s first chunk (row counted within its half of w13)."""
    if xl == 0:
        return row * row_bytes
    blocks = 2 if (xl == 1 and gate_up) else 1  # a16w4's w13: gate and up blocks alternate
    return (row // 16) * (16 * blocks * row_bytes) + (row % 16) * CHUNK


def weight_offset(row, byte, row_bytes, xl: int, gate_up: bool):
    """Offset of code byte `byte` (codes 2 byte, 2 byte + 1) of row `row`."""
    return weight_row(row, row_bytes, xl, gate_up) + (byte // CHUNK) * chunk_stride(xl) + byte % CHUNK


def scale_row(row, scale_row_bytes, xl: int, gate_up: bool):
    """Offset of row `row`'s group-0 scale (row counted within its half of w13)."""
    if xl == 0:
        return row * scale_row_bytes
    if xl == 1 and gate_up:  # a 32-row scale block is gate block n0 with up block n0
        return (row // 16) * (32 * scale_row_bytes) + (row % 16) * 4
    return (row // 32) * (32 * scale_row_bytes) + (row // 16) % 2 + (row % 16) * 4


def scale_col(group, xl: int):
    """Offset of group `group`'s scale from its row's group-0 scale."""
    if xl == 0:
        return group
    return (group // 8) * 256 + (group % 4) * 64 + ((group // 4) % 2) * 2


def scale_offset(row, group, scale_row_bytes, xl: int, gate_up: bool):
    """Offset of the scale of codes 32 group .. 32 group + 31 of row `row`."""
    return scale_row(row, scale_row_bytes, xl, gate_up) + scale_col(group, xl)


def up_offsets(inter_up: int, row_bytes: int, scale_row_bytes: int, xl: int) -> tuple[int, int]:
    """(weight, scale) offsets of w13's up half from an expert's first byte: row
    `inter_up` (I_pad) in the row-ordered layouts; a16w4 puts up block n0 right after gate
    block n0 and its scales one byte after the gate's."""
    if xl == 1:
        return 16 * row_bytes, 1
    return inter_up * row_bytes, inter_up * scale_row_bytes


def check_dims(xl: int, *, inter_up: int, latent: int) -> list[str]:
    """Why the layout cannot hold w13 [2 inter_up, latent / 2] and w2 [latent, inter_up / 2]
    (empty: it can). The kernels' offsets need whole 16-row blocks and 16-byte chunks, and
    the scale blocks whole 32-row, 8-group blocks (AITER's own shuffles need the same)."""
    if xl == 0:
        return []
    out = []
    if inter_up % 32 or latent % 32:
        out.append(f"rows of 32: I_pad {inter_up}, L {latent}")
    if latent % 64 or inter_up % 64:
        out.append(f"16-byte chunks of whole groups: L {latent}, I_pad {inter_up} must be multiples of 64")
    if xl == 1 and (latent // 32 % 8 or inter_up // 32 % 8):
        out.append(f"a16w4 scale blocks of 8 groups: L/32 {latent // 32}, I_pad/32 {inter_up // 32}")
    return out
