"""The FlyDSL K2's geometry, in plain Python (no FlyDSL import): the host side, the
tests and the device code share these numbers, index maps and shape rules.

Why a separate module: FlyDSL's MLIR Python bindings abort a process that has already
loaded another MLIR binding of the same kind (NVIDIA's CuTe DSL, which SGLang's CUDA
install brings), so host code must not import FlyDSL just to check a shape.
"""

from __future__ import annotations

from sgl_k3_mono.k2.expert_layout import chunk_stride, scale_col, scale_row, up_offsets, weight_row

PHASES = ("o_proj", "seam", "front", "route", "experts_up", "experts_down", "combine", "reduce", "latent_up")
"""K2's phases in launch order: the Triton kernel's numbering (launch.py checks they agree),
which is also the phase id in the stall switch and the error record."""
BIT = {p: 1 << i for i, p in enumerate(PHASES)}
"""PHASE_MASK bit of each phase."""

WAVES = 4
THREADS = 64 * WAVES
BN = 16
"""Weight rows a tile (one 16 x 16 MFMA tile)."""
ROWS = 16
"""The MFMA's B columns: the step's rows padded to 16 (= host.ROW_PAD, the act scratch's rows)."""
KC = 128
"""Input columns a wave takes per chunk: 4 MFMAs of 32."""
LDS_FLOATS = WAVES * THREADS
"""The per-wave partial tiles: 4 KB."""
AUX_FLOATS = 32 * WAVES
"""Block reductions: up to 32 values a wave."""
LDS_INTS = 2 * THREADS + WAVES
"""The step's distinct experts by number, a copy of its routed ids, the scan's wave totals."""
LIST, IDS, TOTALS = 0, THREADS, 2 * THREADS
"""Offsets in the int LDS array."""
EXPERT_BI = BN
"""experts_up item: 16 rows of gate and the 16 matching rows of up (one MFMA tile each)."""
EXPERT_BL = WAVES * BN
"""experts_down item: 64 latent rows, one 16-row MFMA tile a wave over the whole I."""
COMBINE_BL = 64
"""combine / reduce tile: 8 rows x 32 threads x 2 columns."""
SEAM_VEC = 4
"""Seam: 4 columns a thread per step of THREADS * 4 (one 8-byte load)."""
OOB = 0x7FFFFFF0
"""A buffer byte offset past every buffer: the range check returns zeros, reads nothing."""


def check_k(k: int, what: str) -> None:
    """The tile's divisibility, said before tracing (a traced kernel would read past rows)."""
    if k % KC:
        raise ValueError(f"K2 FlyDSL {what}: input width {k} must be a multiple of {KC}")


def check_shapes(H: int, A: int, S2: int, E: int, L: int, I: int, rows: int, topk: int, nb: int) -> None:
    """Every divisibility and size rule of the FlyDSL phases, before tracing."""
    if H % 16 or S2 % 16 or E % 16 or L % 16:
        raise ValueError(f"K2 FlyDSL: H={H}, 2S={S2}, E={E}, L={L} must be multiples of 16")
    check_k(A, "o_proj")
    check_k(H, "front")
    check_k(L, "latent_up / experts_up")
    check_k(I, "experts_down")
    check_k(S2 // 2, "shared down")
    if H % (SEAM_VEC * THREADS):
        raise ValueError(f"K2 FlyDSL seam: H={H} must be a multiple of {SEAM_VEC * THREADS}")
    if L % EXPERT_BL or L % COMBINE_BL or (L + H) % COMBINE_BL:
        raise ValueError(f"K2 FlyDSL: L={L} must be a multiple of {EXPERT_BL}")
    if I % EXPERT_BI:
        raise ValueError(f"K2 FlyDSL: I={I} must be a multiple of {EXPERT_BI}")
    if rows * topk > THREADS or rows > 8:
        raise ValueError(f"K2 FlyDSL: {rows} rows x top-{topk} routed pairs exceed one workgroup's {THREADS} threads")
    if 2 * (nb + 1) > 32:
        raise ValueError(f"K2 FlyDSL seam: bank of {nb} rows exceeds 15")


def out_row(tid):
    """Weight row (within the tile) of the result thread `tid` holds after the LDS sum."""
    return (tid // 64) * 4 + tid % 4


def out_col(tid):
    """Step row of the result thread `tid` holds after the LDS sum."""
    return (tid // 4) % 16


def first_tile(bid, nblk, start):
    """The first tile index >= start this workgroup takes when the grid walks tiles
    round-robin from 0 (so consecutive segments share one balanced walk)."""
    return start + ((bid - start) % nblk + nblk) % nblk


def barrier_plan(mask: int, tp: int) -> dict:
    """Trace-time plan of one launch running the phases in `mask`: per phase, whether a
    grid barrier follows it (a later phase reads its results, or its partials are
    published to the peers, which needs them complete grid-wide), whether it publishes a
    ready tag, and whether it waits for the peers' tags (only when the publishing phase
    runs in this launch: a phase launched alone reads the emulated peers as they are,
    as the Triton kernel's phase-alone launches do)."""
    ran = [p for p in PHASES if mask & BIT[p]]
    plan = {}
    for i, p in enumerate(ran):
        publish = tp > 1 and p in ("o_proj", "combine")
        plan[p] = dict(barrier=i + 1 < len(ran) or publish, publish=publish,
                       wait=tp > 1 and ((p == "seam" and "o_proj" in ran) or (p == "reduce" and "combine" in ran)))
    return plan


# ---- where an MXFP4 expert's bytes sit (k2/expert_layout.py's layouts) --------------------

def expert_rows(e, row, w_e: int, w_n: int, s_e: int, s_n: int, XL: int, gate_up: bool, up: bool = False):
    """(weight, scale) byte offsets of expert e's row (w13: within its gate or, with `up`,
    a16w4's up half) in layout XL, from the tensors' first bytes, for tile.mxfp4_rows. The
    plain layout's are the expressions the kernel always had (the same ISA)."""
    if XL == 0:
        return e * w_e + row * w_n, e * s_e + row * s_n
    uw, us = up_offsets(0, w_n, s_n, XL) if up else (0, 0)
    return e * w_e + uw + weight_row(row, w_n, XL, gate_up), e * s_e + us + scale_row(row, s_n, XL, gate_up)


def up_row(i_up: int, XL: int) -> int:
    """Row of w13's up half that `expert_rows` adds to a gate row: I_UP in row order; a16w4
    reaches its up half by `up` instead (the next 16-row block)."""
    return 0 if XL == 1 else i_up


def mxfp4_offsets(row_byte, s_row_byte, k, XL: int = 0):
    """(16-byte load, scale dword, the scale byte's shift in it) of a row's 32 codes from
    column k (a multiple of 32): the plain layout's 4 lane groups share one aligned dword of
    scales (s_row_byte % 4 == 0); AITER's keep a row's 16 bytes together, 256 bytes a step,
    and its scale is one byte of the aligned dword around scale_col's offset."""
    if XL == 0:
        return row_byte + k // 2, s_row_byte + (k // KC) * 4, ((k // 32) % 4) * 8
    off = s_row_byte + scale_col(k // 32, XL)
    return row_byte + (k // 32) * chunk_stride(XL), off - off % 4, (off % 4) * 8
