"""The FlyDSL K2's geometry, in plain Python (no FlyDSL import): the host side, the
tests and the device code share these numbers, index maps and shape rules.

Why a separate module: FlyDSL's MLIR Python bindings abort a process that has already
loaded another MLIR binding of the same kind (NVIDIA's CuTe DSL, which SGLang's CUDA
install brings), so host code must not import FlyDSL just to check a shape.
"""

from __future__ import annotations

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
