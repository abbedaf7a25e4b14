"""K2's tile choice, shared by every ISA: which tiles and options a launch of M rows
runs with (k2_tiles, default_tiles: what was measured, and when), the choices made from
the layer's widths and the grid (the K split, where the shared down runs, FR's helpers,
latent_up's norm chunk), and fit_tiles, which makes a block fit the widths or refuses it.
Plain integers and dicts: no torch, no device. host.K2Launch applies them.
"""

from __future__ import annotations

from sgl_k3_mono.k2.options import check_overrides

L2_PREFETCH_SIZES = (0, 128, 256)  # the prefetch-size hints mma_fp4 writes out (0: none)


def _next_pow2(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def _pow2_divisor(*strides: int, cap: int = 16) -> int:
    """The largest power of two (<= cap) dividing every stride."""
    a = cap
    while a > 1 and any(v % a for v in strides):
        a //= 2
    return a


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


def k2_tiles(rows: int, *, dense_gemv: bool, expert_gemv: bool, num_warps: int, user_rows: int = 0,
             mma: bool = False, mxfp4: bool = True) -> dict:
    """The block for one launch of `rows` rows: its tile sizes and options (each key's
    meaning: options.TILE_OPTIONS). Dense phases (o_proj, front, shared down, latent_up):
    tensor cores with [64 outputs, 256 K] weight tiles, or GEMVs (`dense_gemv`). Expert
    phases: the same choice made separately (`expert_gemv`), or, with `mma` (MXFP4 on
    sm_90), mma_fp4's tiles: each warp two 16-row tiles (BI = 16 x warps, BL = 32 x warps).
    GEMV product tiles [rows, N tile, K chunk] are sized to about 32 fp32 registers a
    thread, and the expert down tile narrows as rows grow so its K chunk stays at least 32
    MXFP4 bytes. `user_rows`: XU (GEMV experts only). The row-count choices inside the
    mma branch are default_tiles' measurements, kept here so that a sweep's one-key
    override (K2Launch.set_block) keeps the rest of the default. launch_args shrinks
    tiles that a small model cannot fill. `mxfp4`: the experts' format (bf16 takes the
    dense choices below at 1 row)."""
    rb = _next_pow2(rows)
    budget = 32 * 32 * num_warps
    clamp = lambda v, lo, hi: max(lo, min(hi, _pow2_floor(int(v))))  # noqa: E731
    t = dict(DENSE_GEMV=int(dense_gemv), EXPERT_GEMV=int(expert_gemv), MX4D=1, STAGES=3, num_warps=num_warps, MMA=0,
             SEAM_SPLIT=1, SDU=-1, FR=1, LSQ=int(rows >= 2))
    if dense_gemv:
        t.update(BN=16, BK=clamp(budget // (rb * 16), 64, 512))
    else:
        t.update(BN=64, BK=256)
    if mma:
        t.update(MMA=1, EXPERT_GEMV=0, XU=0, BI=16 * num_warps, BL=32 * num_warps, KUX=2, KUD=1,
                 KSX=-1 if rows in (1, 4) else 1,
                 BKX=256, BKD=128, XPD=1, XPDD=0, XRS=2 if rows == 2 else 0, XRSD=2 if rows == 2 else 0, CARVE=1,
                 XET=2, XL2B=256, XL2BD=256, STAGES=4)
        # o_proj one 64-row tile a program stepping 128 of K: at 1 row one K loop where latent_up's
        # 16-row tiles were 3-4, from 2 rows a shorter K step than the dense phases' 256
        t.update(BNO=64, BKO=128)
        if rows >= 4:  # experts_down's k-blocks (3 at a TP-8 rank) loaded in one step
            t.update(KUD=3)
        if rows == 1:  # 6 / 16 of the shared down's tiles in experts_up (SDU 2), the rest in experts_down;
            # the front's and latent_up's GEMV tiles one pipelined loop a program (FLATD: 34th)
            t.update(SDUQ=6, FLATD=1)
    elif expert_gemv:
        xr = _next_pow2(user_rows) if user_rows else rb
        bl = 64 if xr <= 2 else 32 if xr <= 4 else 16
        t.update(XU=_next_pow2(user_rows) if user_rows else 0, BI=16, BL=bl,
                 BKX=2 * clamp(budget // (xr * 16), 32, 256), BKD=2 * clamp(budget // (xr * bl), 32, 64))
    else:
        t.update(BI=64, BL=128, BKX=256, BKD=128)
    if dense_gemv and rows == 1 and not mma and not mxfp4:
        # bf16 experts: the mma branch's 1-row dense choices too (FLATD, o_proj's own tile; 37th),
        # four stages for FLATX's loops (39th); experts_down's loop over the shared down's tiles in K steps
        # of 128 (its code 33 -> 20 KB), six stages for its two loops (54th: after other code, as in a step)
        t.update(FLATD=1, BNO=64, BKO=128, STAGES=4, BKS=128, STXD=6)
    if not mma and not mxfp4:  # bf16 experts: their items one pipelined loop a program (FLATX: 39th; XU: off)
        t.update(FLATX=1)
    return t


def default_tiles(rows: int, mxfp4: bool = True, mma: bool = False) -> dict:
    """The block a launch of `rows` rows runs unless told otherwise: what the H200 sweeps
    chose (MXFP4 experts, a TP-8 rank's shapes, the whole launch timed). Each choice names
    the session whose section of docs/evidence/k2-sm90.md measured it against its
    runners-up.

    MXFP4 through mma_fp4 (`mma`: K2Plan.mma_experts), 8 warps at every row count: GEMV
    dense phases at 1 row, tensor-core ones from 2 (BK 256: 18th, 19th; four cp.async
    stages: 27th); o_proj its own 64-row tile stepping 128 of K (BNO / BKO: 27th at 1 row,
    28th from 2); experts_up's k-blocks a step ahead in registers (XPD 1: 12th; in
    experts_down too it lost, 14th); experts_down's expert from experts_up's table, the next
    a step ahead, and both phases' loads with a 256-byte L2 prefetch-size hint (XET 2, XL2B
    / XL2BD: 22nd); the fitted carveout (CARVE: 17th); experts_up's K split at 1 and 4 rows
    (KSX -1: 19th, ksx_choice); the cp.async rings at 2 rows only (XRS / XRSD 2: 15th,
    17th-19th); experts_down's three k-blocks in one step from 4 rows (KUD 3: 22nd; 6 us
    slower at 1 row, 31st); routing inside the front (FR: 23rd); the shared down on the
    programs the routed items leave idle where there are any (SDU -1: 14th, 19th), 6 of its
    16ths there at 1 row (SDUQ 6: 23rd); at 1 row the front's and latent_up's GEMV tiles
    and K steps one pipelined loop a program (FLATD: 34th); the latent's squares left by its producer from 2
    rows (LSQ: 25th; at 1 row the shares' load cost 1 us more); the split seam (SEAM_SPLIT:
    12th).

    Without mma (bf16 experts; MXFP4 where mma_fp4 cannot take the plan): GEMV dense phases
    and experts at 1 row, tensor cores from 2. 8 warps at 1 row; with bf16 experts 8 at every
    row count (2 rows: 234 us against 251 with 4; 4 / 8 rows, 37th session on an H100: 275.9
    / 451.6 against 293.8 / 477.0 us, and the 4-warp build's 8-byte stack frame gone), with
    MXFP4 4 from 2 rows (tl.dot_scaled lost 2x with 8). bf16 at 1 row takes the mma
    branch's dense choices, FLATD and o_proj's own 64-row tile stepping 128 of K (37th: 160.9
    against 173.3 us, FLATD alone 167.8), and the GEMV experts' items and K steps one pipelined loop
    a program (FLATX) with four stages (39th, an H100: 133.7 / 134.5 against 161.3 us; FLATX with
    3 stages 137.9 / 138.1; 101 KB of shared memory); experts_down's loop over the shared down's
    tiles in K steps of 128 and six stages for experts_down's loops (BKS / STXD: 54th and 55th,
    H100s, warm / after other code 130.9 / 145.3 us against 132.8 / 146.0; the 1-row step 1042.9
    against 1050.3); FLATX on the tensor cores from 2 rows too
    (39th: 187.4 / 268.6 / 428.9 us at 2 / 4 / 8 rows against 194.6 / 276.7 / 451.5). From 2 rows
    four pipeline stages were 0.8-4.5 % faster with
    bf16 experts on Triton 3.6, but a newer Triton lays that build out in 240 KB of shared
    memory, over the SM's 227 KB, so 3 stays."""
    if mma:
        return k2_tiles(rows, dense_gemv=rows <= 1, expert_gemv=False, num_warps=8, mma=True)
    if rows <= 1:
        return k2_tiles(rows, dense_gemv=True, expert_gemv=True, num_warps=8, mxfp4=mxfp4)
    return k2_tiles(rows, dense_gemv=False, expert_gemv=False, num_warps=4 if mxfp4 else 8, mxfp4=mxfp4)


def most_up_items(rows: int, *, top_k: int, experts: int, inter: int, bi: int) -> int:
    """The most gate/up items experts_up can have in a step: every row's top-k experts
    distinct (at most E of them), I / BI items each."""
    return min(rows * top_k, experts) * (inter // bi)


def sdu_fits(b: dict, *, rows: int, top_k: int, experts: int, inter: int, grid: int) -> bool:
    """SDU's auto choice: on where the most routed gate/up items a step can have (every
    row's top-k distinct) leave programs of the grid idle in experts_up. Measured at a
    TP-8 rank (MXFP4, fourteenth session, one call, `bench k2 --block SDU=1` against the
    default): 135.6 / 147.1 us against 139.6 / 149.3 at 1 / 2 rows (48 / 96 items), but
    197.4 / 280.9 against 195.6 / 274.1 at 4 / 8 rows, where the items fill the grid."""
    return most_up_items(rows, top_k=top_k, experts=experts, inter=inter, bi=b["BI"]) < grid


def ksx_choice(num_warps: int, *, rows: int, top_k: int, experts: int, inter: int, grid: int) -> int:
    """KSX -1 (the default at 1 and 4 rows, an option elsewhere): the K split that best
    fills experts_up's waves. The most gate/up items a step can have, n = min(rows x top-k, E) x I / (16 x
    warps), take ceil(n k / grid) waves of items 1/k as long with a split of k; a split is
    taken where that is at most 0.8 of the unsplit phase (it has costs of its own: the
    groups' sum through shared memory, k times the items). At a TP-8 rank: 2 at 1 and 4
    rows, 4 at 2, none at 8: the fastest split each row count measured (tenth session's
    sweep, and the fourteenth session's KSX 2 row: -4.1 / -11.0 us at 1 / 4 rows, +8.9 at
    8). The nineteenth session's: -4.9 / -4.3 us at 1 / 4 rows, but +1.6 at 2 (the 4-way
    split turns SDU off there), so default_tiles takes it at 1 and 4 rows only."""
    n = most_up_items(rows, top_k=top_k, experts=experts, inter=inter, bi=16 * num_warps)
    if n == 0:
        return 1
    waves = {k: -(-n * k // grid) / k for k in (1, 2, 4) if num_warps % k == 0}
    k = min(waves, key=lambda k: (waves[k], k))
    return k if waves[k] <= 0.8 * waves[1] else 1


def resolve_ksx(b: dict, *, rows: int, top_k: int, experts: int, inter: int, grid: int, mma: bool) -> dict:
    """The tiles with KSX -1 made ksx_choice's split on the mma experts, 1 on every other
    path (fit_tiles takes only a resolved split)."""
    b = dict(b)
    if b.get("KSX", 1) < 0:
        b["KSX"] = ksx_choice(b["num_warps"], rows=rows, top_k=top_k, experts=experts, inter=inter,
                              grid=grid) if mma and b.get("MMA") else 1
    return b


def mma_fits(b: dict, *, latent: int, inter: int) -> bool:
    """mma_fp4's tiles divide the widths: I by BI, L by BL, both K walks (experts_up's
    split over KSX warp groups) by whole loop steps (the tensors' alignment is the plan's:
    K2Plan.experts_aligned)."""
    ksx = b.get("KSX", 1)
    return (inter % b["BI"] == 0 and latent % b["BL"] == 0 and latent % (128 * b["KUX"] * ksx) == 0
            and inter % (128 * b["KUD"]) == 0 and b["num_warps"] % ksx == 0)


def _l2_cut_fits(row_bytes: int, rows: int, threads: int) -> bool:
    """runtime.triton_l2.l2_prefetch_rows can take `rows` whole rows of `row_bytes` over
    `threads`: one piece a thread, a multiple of 16 bytes."""
    pieces = max(threads // rows, 1)
    return row_bytes % (16 * pieces) == 0


def _prefetch_bytes(b: dict, hidden: int, *, ptx: bool) -> int:
    """PF (bytes a front weight row prefetched into L2 during the seam; 0: none) as the
    kernel can take it: whole 16-byte pieces, one a thread over the BNF rows of a tile,
    within the row (H bf16). Only where the PTX runs (sm_90, not the interpreter)."""
    if not ptx or not b.get("PF"):
        return 0
    piece = 16 * max(32 * b["num_warps"] // b.get("BNF", b["BN"]), 1)
    return min(int(b["PF"]), 2 * hidden) // piece * piece


def fit_tiles(b: dict, *, hidden: int, shared2: int, experts: int, latent: int, inter: int,
              mma: bool = False) -> dict:
    """Tiles a model's widths can take: the dense output tile BN must divide every
    segment of the front (shared gate/up, router, latent down) and the hidden width; the
    expert tiles must divide their widths, and a tensor-core K step (BKX / BKD elements)
    is at most the width it walks (rounded down to a power of two) and at least 64 (two
    scale groups; masks cover a ragged tail). MMA tiles become tensor-core ones unless
    `mma` (the plan's mma_experts, on a device that runs the PTX) and they fit (mma_fits)."""
    check_overrides(b, derived_ok=True)
    b = dict(b)
    if b.get("KSX", 1) == -1:  # resolve_ksx's to choose (launch_args resolves it first): fitted unsplit
        f = fit_tiles(dict(b, KSX=1), hidden=hidden, shared2=shared2, experts=experts, latent=latent, inter=inter,
                      mma=mma)
        return dict(f, KSX=-1) if f.get("MMA") else f
    if b.get("KSX", 1) not in (1, 2, 4, 8):
        raise ValueError(f"K2 tiles: KSX={b['KSX']}; the K split takes 1, 2, 4 or 8 warp groups, or -1 "
                         "(ksx_choice's)")
    for key in ("XPD", "XPDD"):  # mma_fp4's register rings hold 1 or 2 k-blocks ahead
        if b.get(key, 0) not in (0, 1, 2):
            raise ValueError(f"K2 tiles: {key}={b[key]}; the register prefetch takes 0, 1 or 2 k-blocks")
    for key in ("XRS", "XRSD"):  # mma_fp4's shared-memory ring: RING_STAGES (0: off)
        if b.get(key, 0) not in (0, 2, 3, 4):
            raise ValueError(f"K2 tiles: {key}={b[key]}; the shared-memory ring takes 0 or 2..4 stages")
    if b.get("CARVE", 0) not in (0, 1):  # the launch's carveout: fitted to its block, or the driver's
        raise ValueError(f"K2 tiles: CARVE={b['CARVE']}; the fitted carveout is 0 or 1")
    for key in ("XL2B", "XL2BD"):  # the expert loads' L2 prefetch-size hint
        if b.get(key, 0) not in L2_PREFETCH_SIZES:
            raise ValueError(f"K2 tiles: {key}={b[key]}; the L2 prefetch-size hint is 0 (none), 128 or 256 bytes")
    if b.get("XET", 0) not in (0, 1, 2):  # experts_down's expert and slots: from the step's table, or found
        raise ValueError(f"K2 tiles: XET={b['XET']}; experts_down reads the expert table (1; 2: the next item's "
                         "expert a step ahead) or not (0)")
    if b.get("XDB", 0) not in (0, 1):  # experts_down's items: every nprog-th, or one run a program
        raise ValueError(f"K2 tiles: XDB={b['XDB']}; experts_down's items are dealt 0 (round the grid) or 1 "
                         "(one run a program)")
    if b.get("FLATD", 0) not in (0, 1):  # the dense phases' K loops: one a tile, or one over the program's tiles
        raise ValueError(f"K2 tiles: FLATD={b['FLATD']}; the dense loops run a tile at a time (0) or over a "
                         "program's tiles at once (1)")
    if b.get("FLATX", 0) not in (0, 1):  # the bf16 experts' K loops: one an item, or one over the program's items
        raise ValueError(f"K2 tiles: FLATX={b['FLATX']}; the bf16 expert loops run an item at a time (0) or over a "
                         "program's items at once (1)")
    if b.get("BNO", 0) not in (0, 16, 32, 64, 128) or b.get("BKO", 0) not in (0, 64, 128, 256, 512):
        raise ValueError(f"K2 tiles: BNO={b.get('BNO', 0)}, BKO={b.get('BKO', 0)}; o_proj's own tile takes 16..128 "
                         "rows and K steps of 64..512 (0: latent_up's tile)")
    for key in ("STX", "STXD", "STU"):  # a loop's own cp.async stages (0: STAGES)
        if b.get(key, 0) not in range(0, 9):
            raise ValueError(f"K2 tiles: {key}={b[key]}; a loop's own stages are 1..8 (0: STAGES)")
    for key in ("BKS", "BKU"):  # a loop's own K step (0: the phase's usual one)
        if b.get(key, 0) not in (0, 16, 32, 64, 128, 256, 512, 1024):
            raise ValueError(f"K2 tiles: {key}={b[key]}; a loop's own K step is a power of two, 16..1024 (0: BK)")
    if b.get("MMA") and b.get("XPD"):  # the register prefetch steps one k-block at a time
        b.update(KUX=1)
    if b.get("MMA") and b.get("XPDD"):
        b.update(KUD=1)
    while b.get("MMA"):  # a warp's 16 rows in each of its group's tiles; its K share in whole steps
        b["BI"] = 16 * b["num_warps"] // b.get("KSX", 1)
        while b["KUX"] > 1 and latent % (128 * b["KUX"] * b.get("KSX", 1)):
            b["KUX"] //= 2
        while b["KUD"] > 1 and inter % (128 * b["KUD"]):  # (KUD 3: a TP-8 rank's I, 3 k-blocks, in one step)
            b["KUD"] -= 1
        if b.get("KSX", 1) == 1 or mma_fits(b, latent=latent, inter=inter):
            break
        b["KSX"] //= 2  # a split the widths cannot take costs the split, not the mma path
    if b.get("MMA") and not (mma and mma_fits(b, latent=latent, inter=inter)):
        b.update(MMA=0, KSX=1, BI=64, BL=128, BKX=256, BKD=128)
    if b.get("XL2") and not (b.get("MMA") and _l2_cut_fits(latent // 2, b["BI"], 32 * b["num_warps"])
                             and _l2_cut_fits(inter // 2, b["BL"], 32 * b["num_warps"])):
        b["XL2"] = 0  # an expert row the prefetch cannot cut into whole 16-byte pieces a thread
    while b["BN"] > 16 and any(v % b["BN"] for v in (hidden, shared2, experts, latent)):
        b["BN"] //= 2
    # the front's own output tile (default BN): [S2 | E | L] in 64-row tiles is 94 items at
    # a TP-8 rank, fewer than the 132 SMs
    # rows an o_proj / latent_up tile owns within its BN-row register tile (default BN)
    b["BNH"] = min(b.get("BNH") or b["BN"], b["BN"])
    if b.get("BNO"):  # o_proj's own tile divides H; its K step defaults to the dense phases'
        while b["BNO"] > 16 and hidden % b["BNO"]:
            b["BNO"] //= 2
        b["BKO"] = b.get("BKO") or b["BK"]
    b["BNF"] = b.get("BNF") or b["BN"]
    while b["BNF"] > 16 and any(v % b["BNF"] for v in (shared2, experts, latent)):
        b["BNF"] //= 2
    # FR's router and shared gate/up tiles: half the front's where it runs on the tensor
    # cores a tile at a time (their tiles then end at about half the front's time), the
    # front's own width with GEMVs or FLATD's one loop
    b["BNR"] = b.get("BNR") or (b["BNF"] if b["DENSE_GEMV"] or b.get("FLATD") else max(b["BNF"] // 2, 16))
    while b["BNR"] > 16 and any(v % b["BNR"] for v in (shared2, experts)):
        b["BNR"] //= 2
    if b.get("FLATD") and b["BNR"] != b["BNF"]:  # one loop walks the front's tiles: one width
        raise ValueError(f"K2 tiles: FLATD=1 walks the front's tiles in one loop, so its router / shared tiles "
                         f"(BNR={b['BNR']}) must be as wide as its latent ones (BNF={b['BNF']})")
    if not b.get("MMA"):
        while b["BI"] > 16 and inter % b["BI"]:
            b["BI"] //= 2
        while b["BL"] > 16 and latent % b["BL"]:
            b["BL"] //= 2
    if not b["EXPERT_GEMV"]:
        b["BKX"] = max(64, min(b["BKX"], _pow2_floor(latent)))
        b["BKD"] = max(64, min(b["BKD"], _pow2_floor(inter)))
    return b


def situ_chunks(shared2: int) -> int:
    """The shared experts' SiTU chunks a row (triton/parts.SITU_CHUNK columns each)."""
    from sgl_k3_mono.k2.triton.parts import SITU_CHUNK

    return -(-shared2 // 2 // SITU_CHUNK.value)


def front_helpers(*, experts: int, shared2: int, latent: int, bnr: int, bnf: int, grid: int, helpers: int) -> int:
    """FR's first helper program (the launch's frh). The front's tiles, [router | shared gate/up] in
    BNR-row tiles then [latent down] in BNF-row ones, dealt round the grid as the kernel
    deals them (tile t to program t mod grid); the helpers are the `helpers` consecutive
    programs (wrapping) whose largest own share of rows is least, so they route soonest;
    of equal windows the last (where the deal leaves the grid's end a tile short)."""
    rows = [0] * grid
    widths = [bnr] * (experts // bnr + shared2 // bnr) + [bnf] * (latent // bnf)
    for t, w in enumerate(widths):
        rows[t % grid] += w
    n = min(helpers, grid)
    return min(range(grid), key=lambda s: (max(rows[(s + i) % grid] for i in range(n)), -s))


def norm_chunk(rows_tile: int, threads: int, width: int, bk: int) -> int:
    """BKN: the K chunk of latent_up's two RMSNorm passes over the reduced latent (each
    chunk is one L2 round trip the pass waits on): about 32 elements a thread, at least
    the dense K step BK, at most the latent width rounded up to a power of two. (At 8
    rows the passes had stepped BK 128: 56 round trips.)"""
    return max(bk, min(_next_pow2(width), _pow2_floor(32 * threads // rows_tile)))
