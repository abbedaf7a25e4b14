"""The FlyDSL K1's geometry in plain Python (no FlyDSL import, as k2/flydsl/geometry.py
and for the same reason: a process with another MLIR binding loaded aborts on importing
FlyDSL). The device code, the launcher and the CPU tests share these numbers and maps.

The work split is the Triton K1's (k1/triton/kernel.py), taken from the same plan:
  seam     one workgroup a row (rows bid, bid + grid, ...)
  in_proj  tiles of BN_EFF weight rows over [qkvg | f_a | b], walked round-robin from
           tile 0 (the Triton loop `for tile in range(pid, TQ + TF + TB, nprog)`); a
           tile is BN_EFF / 16 MFMA tiles of 16 rows over the whole H, no split-K
  kda      items (row, head, V-slice) in decode, (head, V-slice) in verify, NV slices
           of a head's V rows, the last item of a (row, head) finishing it
"""

from __future__ import annotations

PHASES = ("seam", "in_proj", "kda")
"""K1's phases in launch order: the Triton kernel's numbering (checked by launch.py),
which is the phase id of the stall switch and the error record."""
BIT = {p: 1 << i for i, p in enumerate(PHASES)}
LAUNCH_ID = 0
"""runtime.failure.LAUNCHES.index("k1")."""

WAVES = 4
THREADS = 64 * WAVES
MFMA_ROWS = 16
"""Weight rows of one MFMA tile (k2/flydsl/tile.py)."""
KC = 128
"""Input columns a wave takes per chunk (4 MFMAs of 32)."""
SEAM_VEC = 4
"""Seam: 4 columns a thread per step of THREADS * 4."""
D_FLY = 128
"""The head dim the KDA mapping is written for (K3's): 8 lanes a V row, 16 K columns a lane."""
LANES_PER_ROW = 8
COLS_PER_LANE = D_FLY // LANES_PER_ROW
ROWS_PER_PASS = THREADS // LANES_PER_ROW
"""V rows one pass of the workgroup holds: 32, the plan's largest BV."""
MAX_T = 8
"""Tokens of one item at most (verify: the request's M <= 8)."""
LDS_DECAY = MAX_T * D_FLY
"""fp32 decay of every token of the item, [MAX_T, D]."""
RED_FLOATS = WAVES * THREADS
"""The MFMA tile's wave partials."""
AUX_FLOATS = 32 * WAVES
"""block_sums' per-wave slots (k2/flydsl/block.py's layout)."""
PTR_WORDS = 9
"""The KDA phase's pointer table in LDS (kda.PtrTable), per wave."""
OOB = 0x7FFFFFF0
"""A buffer byte offset past every buffer: the range check returns zeros."""
BUFFER_BYTES = 1 << 31


def check_shapes(H: int, D: int, NB: int, BN_EFF: int, NV: int, BV: int, rows: int) -> None:
    """Every divisibility and size rule of the FlyDSL K1, said before tracing (fail closed)."""
    if H % KC or H % (SEAM_VEC * THREADS):
        raise ValueError(f"K1 FlyDSL: hidden {H} must be a multiple of {SEAM_VEC * THREADS}")
    if D != D_FLY:
        raise ValueError(f"K1 FlyDSL: head_dim {D}; the KDA mapping is written for {D_FLY}")
    if BN_EFF % MFMA_ROWS:
        raise ValueError(f"K1 FlyDSL: in-projection row tile {BN_EFF} is not a multiple of {MFMA_ROWS}")
    if BV > ROWS_PER_PASS or (D // NV) % BV:
        raise ValueError(f"K1 FlyDSL: V block {BV} of slice {D // NV} does not fit a pass of {ROWS_PER_PASS} rows")
    if 2 * (NB + 1) > 32:
        raise ValueError(f"K1 FlyDSL seam: bank of {NB} rows exceeds 15")
    if not 1 <= rows <= MAX_T:
        raise ValueError(f"K1 FlyDSL: {rows} rows outside 1..{MAX_T}")


def proj_segments(NQ: int, NF: int, NB_ROWS: int, BN_EFF: int) -> tuple:
    """(first tile, tiles, rows, first proj column) of qkvg, f_a and b, as the Triton walk."""
    tq = -(-NQ // BN_EFF)
    tf = -(-NF // BN_EFF)
    tb = -(-NB_ROWS // BN_EFF)
    return ((0, tq, NQ, 0), (tq, tf, NF, NQ), (tq + tf, tb, NB_ROWS, NQ + NF))


def first_tile(bid, nblk, start):
    """The first tile >= start workgroup `bid` takes in one round-robin walk from 0."""
    return start + ((bid - start) % nblk + nblk) % nblk


def kda_item(item: int, M: int, HL: int, NV: int, verify: bool) -> tuple:
    """(row, head, V-slice, first token, tokens) of a KDA item, as the Triton kernel's."""
    vs = item % NV
    head = (item // NV) % HL
    if verify:
        return 0, head, vs, 0, M
    return item // (HL * NV), head, vs, item // (HL * NV), 1


def kda_items(M: int, HL: int, NV: int, verify: bool) -> int:
    return HL * NV if verify else M * HL * NV


def kda_lane(tid: int) -> tuple:
    """(row within the pass, first K column) of thread tid in the delta rule."""
    return tid // LANES_PER_ROW, (tid % LANES_PER_ROW) * COLS_PER_LANE


def conv_tap(u: int, i: int, KW: int) -> tuple:
    """Tap i of token u: ("win", window row) or ("x", token index): positions u .. u+KW-1
    of [window rows 0..KW-2 (oldest first), x_0, x_1, ...]."""
    s = u + i
    return ("win", s) if s < KW - 1 else ("x", s - (KW - 1))


def window_after(u: int, KW: int) -> list:
    """The conv window after token u: row r is tap r + 1 (the oldest drops out)."""
    return [conv_tap(u, r + 1, KW) for r in range(KW - 1)]


def qk_channel(tid: int, head: int, P: int, D: int) -> int:
    """The q (tid < D) or k (tid >= D) channel thread tid moves in the finishing step."""
    return (tid // D) * P + head * D + tid % D


def barrier_plan(mask: int) -> dict:
    """Per phase in `mask`: whether a grid barrier follows it (a later phase runs in this
    launch and reads its results)."""
    ran = [p for p in PHASES if mask & BIT[p]]
    return {p: dict(barrier=i + 1 < len(ran)) for i, p in enumerate(ran)}
