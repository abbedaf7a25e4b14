"""K2's tile options: every key a launch's block may hold, what it selects, and whether a
caller may set it (K2Launch.set_block: the benchmark's `--block`, the tests' cases, the
step comparison's K2 block). A key outside this table is refused by name, with the nearest
known keys: an unknown key used to be carried along and ignored, so a sweep row labelled
with a misspelt option timed the defaults.

Which values each option takes is checked where it is applied (tiles.fit_tiles and
host.K2Launch.launch_args); which values the defaults take, and what they were measured
against, is tiles.default_tiles' and docs/evidence/k2-sm90.md's. Plain Python: no torch.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class TileOption:
    """One key of a K2 block."""

    name: str
    """The key, as the kernel's constexpr (or the launch's `num_warps`) spells it."""
    doc: str
    """What it selects, and its values."""
    settable: bool = True
    """A caller may override it; False: the launch derives it from the others."""


_OPTIONS = (
    # -- the paths ---------------------------------------------------------------------------
    TileOption("DENSE_GEMV", "1: o_proj, the front, the shared down and latent_up as GEMVs (rows rounded up to a "
               "power of two, products as FMAs in the weights' load layout); 0: on the tensor cores, rows padded "
               "to 16."),
    TileOption("EXPERT_GEMV", "1: the routed experts as GEMVs (MXFP4 decoded by hand); 0: on the tensor cores "
               "(tl.dot, tl.dot_scaled for MXFP4) unless MMA takes them."),
    TileOption("MMA", "1 (sm_90, MXFP4, where the plan allows it): the routed experts through mma_fp4, the codes "
               "decoded into the tensor-core registers; each warp two 16-row tiles."),
    TileOption("num_warps", "Warps a program (4 or 8)."),
    TileOption("STAGES", "cp.async stages of the dense K loops."),
    # -- the dense phases' tiles ---------------------------------------------------------------
    TileOption("BN", "Rows of the dense phases' register tile (o_proj, the front, the shared down, latent_up); "
               "halved until it divides every width it tiles."),
    TileOption("BK", "K step of the dense phases."),
    TileOption("BNH", "Rows of H a latent_up (and o_proj, unless BNO) tile owns within its BN-row register tile "
               "(below BN: e.g. 56 rows make one tile an SM of H 7168); at most BN."),
    TileOption("BNF", "Rows of the front's register tile (default BN), halved until it divides [S2 | E | L]."),
    TileOption("BNO", "o_proj's own register tile (16..128 rows; 0: latent_up's tile)."),
    TileOption("BKO", "o_proj's own K step (64..512; 0: the dense phases' BK)."),
    TileOption("BKN", "K chunk of latent_up's two RMSNorm passes over the reduced latent (unset: "
               "tiles.norm_chunk's)."),
    TileOption("FLATD", "1 (sm_90): the front's (with FR) and latent_up's tiles a program owns and their K steps "
               "as one pipelined loop, so a tile's last steps overlap the next tile's first loads instead of the "
               "pipeline draining and refilling at every tile (the same products in the same order: the same bits); "
               "GEMV steps with DENSE_GEMV (the 1-row default since the 34th session), tensor-core ones without (an "
               "option from 2 rows, 40th; the front's router / shared tiles then take BNF's width); 0: a K loop a "
               "tile."),
    TileOption("PF", "Bytes of each front weight row asked of L2 during the seam (bulk prefetch, sm_90 PTX "
               "only; 0: none); cut to whole 16-byte pieces a thread."),
    # -- the seam --------------------------------------------------------------------------------
    TileOption("SEAM_SPLIT", "1: the seam spread over several programs a row, one H slice each "
               "(runtime/triton_seam.py), where the rows' slices fit the grid; 0: one program a row."),
    TileOption("SPASS", "2 (a probe): the split seam run twice in one launch through one copy of its code, so a "
               "trace shows a pass with its code fetched (the same bits); 1: once."),
    # -- routing and the shared experts ----------------------------------------------------------
    TileOption("FR", "1 (sm_90): routing and the shared experts' SiTU inside the front, on helper programs, "
               "each once the tiles it reads are counted stored (no routing phase, no barrier); 0: a phase of "
               "their own."),
    TileOption("BNR", "With FR: rows of the router's and the shared gate/up's front tiles, dealt first (unset: "
               "BNF as GEMVs, half of it on the tensor cores)."),
    TileOption("SDU", "Where the shared experts' down projection runs: 0 in experts_down; 1 in experts_up after "
               "the routed items round the grid; 2 in experts_up on the programs the routed items leave idle; "
               "-1: tiles.sdu_fits' choice (2 or 0)."),
    TileOption("SDUQ", "With SDU on: how many sixteenths (1..16) of the shared down's tiles run in experts_up, "
               "the rest in experts_down (each tile the same arithmetic wherever it runs)."),
    # -- the routed experts ----------------------------------------------------------------------
    TileOption("BI", "experts_up's I tile (with MMA: 16 x warps / KSX)."),
    TileOption("BL", "experts_down's L tile (with MMA: 32 x warps)."),
    TileOption("BKX", "experts_up's K step on the tensor cores, in K elements (GEMV: its K chunk)."),
    TileOption("BKD", "experts_down's K step on the tensor cores, in K elements (GEMV: its K chunk)."),
    TileOption("FLATX", "1 (sm_90, bf16 experts: GEMVs over every row, or tensor cores): experts_up's and "
               "experts_down's routed items a program owns and their K steps as one pipelined loop each (gate and "
               "up in the same step), then experts_down's shared tiles as one more, so an item's last loads overlap "
               "the next item's first instead of the pipeline draining at every item (each item's products in its "
               "own order; the GEMVs' register layout may order their final sum otherwise); 0: a K loop an item."),
    TileOption("STX", "cp.async stages of experts_up's flat loop (FLATX) alone (unset: STAGES). With a shorter "
               "BKX, more stages keep as many bytes in flight from less code: the code a served K2 fetches again "
               "after other kernels' (53rd session: BKX 128 cut that phase's 68 KB to 17 KB and its loss after "
               "other code from 3.6 to 1.2-1.5 us at 1 row; STAGES 6 for every loop gave the warm time back but "
               "cost experts_down and latent_up)."),
    TileOption("STXD", "The same for experts_down's flat loops (its routed items, then the shared down's tiles) "
               "(unset: STAGES)."),
    TileOption("BKS", "K step of experts_down's flat loop over the shared down's tiles (FLATX; unset: BK with "
               "DENSE_GEMV, BKD without): its code, run once a launch, is as long as the step (18 KB at 1 row bf16 "
               "with BK 512, CPU compile)."),
    TileOption("BKU", "latent_up's own K step (unset: BK; the front and the shared down's tiles in experts_up keep "
               "BK)."),
    TileOption("STU", "latent_up's own cp.async stages (unset: STAGES)."),
    TileOption("MX4D", "MXFP4 GEMV experts: 1, products in 4-D tiles; 0, in [rows, N, bytes] tiles."),
    TileOption("XU", "GEMV experts: each expert computes only the rows that route it, XU at a time (0: every "
               "row)."),
    TileOption("KUX", "MMA: experts_up's 128-code k-blocks a loop step (halved until they divide its K share)."),
    TileOption("KUD", "MMA: experts_down's 128-code k-blocks a loop step (3: a TP-8 rank's I in one step)."),
    TileOption("KSX", "MMA: warp groups splitting experts_up's K (1, 2, 4, 8; more, smaller items where few "
               "experts are routed; summed through shared memory); -1: tiles.ksx_choice's."),
    TileOption("XPD", "MMA: experts_up's k-blocks loaded that many steps ahead of their mmas in registers "
               "(0, 1, 2)."),
    TileOption("XPDD", "MMA: the same register prefetch for experts_down (0, 1, 2)."),
    TileOption("XRS", "MMA: experts_up's weights and scales through a cp.async ring of that many stages in shared "
               "memory (2..4; 0: the register loop)."),
    TileOption("XRSD", "MMA: the same ring for experts_down."),
    TileOption("CARVE", "1 (sm_90): the compiled launch's shared-memory carveout fitted to its block "
               "(runtime/triton_smem.fit_carveout), so L1 keeps the rest; 0: the driver's choice."),
    TileOption("XL2", "MMA: each expert item's weight rows asked of L2 whole as it starts (1), and the program's "
               "next item's too (2); 0: off."),
    TileOption("XL2B", "MMA: experts_up's weight and scale loads carry an L2 prefetch-size hint of 128 or 256 "
               "bytes (0: none)."),
    TileOption("XL2BD", "MMA: the same hint for experts_down."),
    TileOption("XET", "MMA: experts_down reads each item's expert and its rows' slots from the table experts_up "
               "leaves (1), and loads the next item's expert a step ahead (2); 0: finds them itself."),
    TileOption("XDB", "experts_down's items dealt to each program as one run of consecutive items (1) instead "
               "of every nprog-th (0)."),
    # -- the latent ------------------------------------------------------------------------------
    TileOption("LSQ", "1 (sm_90): combine (TP 1) or the reduce (TP > 1) leaves each latent tile's share of its "
               "rows' sum of squares for latent_up's norm; 0: latent_up sums the squares itself."),
    # -- derived by the launch -------------------------------------------------------------------
    TileOption("SDUT", "The shared down's tiles that run in experts_up (from SDU and SDUQ).", settable=False),
    TileOption("FRH", "FR's first helper program (tiles.front_helpers).", settable=False),
)

TILE_OPTIONS: Mapping[str, TileOption] = {o.name: o for o in _OPTIONS}
"""Every key a K2 block may hold, by name."""


def check_overrides(over: Mapping[str, object], *, derived_ok: bool = False) -> None:
    """Refuse, all at once, the keys of a block override that no K2 option has, and (unless
    `derived_ok`: a whole block, as tiles.fit_tiles takes it) those the launch derives."""
    unknown = [k for k in over if k not in TILE_OPTIONS]
    derived = [] if derived_ok else [k for k in over if k in TILE_OPTIONS and not TILE_OPTIONS[k].settable]
    if not unknown and not derived:
        return
    settable = sorted(k for k, o in TILE_OPTIONS.items() if o.settable)
    why = []
    for k in unknown:
        near = difflib.get_close_matches(k, settable, n=3)
        why.append(f"{k!r} is no K2 option" + (f" (did you mean {', '.join(near)}?)" if near else ""))
    for k in derived:
        why.append(f"{k!r} is derived by the launch ({TILE_OPTIONS[k].doc})")
    raise ValueError("K2 block: " + "; ".join(why) + f". Options: {', '.join(settable)}")
