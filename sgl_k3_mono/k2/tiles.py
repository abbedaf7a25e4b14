"""K2's tile choice, shared by every ISA: which tiles and options a launch of M rows
runs with (k2_tiles, default_tiles: what was measured, and when), the choices made from
the layer's widths and the grid (the K split, where the shared down runs, FR's helpers,
latent_up's norm chunk), and fit_tiles, which makes a block fit the widths or refuses it.
Plain integers and dicts: no torch, no device. host.K2Launch applies them.
"""

from __future__ import annotations

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
             mma: bool = False) -> dict:
    """Tile sizes for one launch. Dense phases (o_proj, front, shared down, latent up):
    tensor cores with rows padded to 16 and [64 outputs, 256 K] weight tiles, or GEMV
    (rows rounded up to a power of two, products as FMAs in the weights' load layout, no
    detour through shared memory). Expert phases: the same choice, made separately; on
    the tensor cores MXFP4 experts go through tl.dot_scaled (matmul.dot_mxfp4_scaled),
    BKX / BKD counting K elements a step. GEMV product tiles [rows, N tile, K chunk] are
    sized to about 32 fp32 registers a thread, and the expert down tile narrows as rows
    grow so its K chunk stays >= 32 MXFP4 bytes. `user_rows` (XU, GEMV experts only):
    each expert computes only the rows that route it, that many at a time, instead of
    every row (0: every row). `mma` (MMA, MXFP4 on sm_90): the experts through mma_fp4,
    each warp two 16-row tiles (gate and up rows of one I tile: BI = 16 x warps; two L
    tiles: BL = 32 x warps), KUX / KUD 128-code k-blocks a loop step, KSX warp groups
    splitting experts_up's K (BI = 16 x warps / KSX; summed through shared memory; more
    items where few experts are routed: 48 for 132 SMs at M 1 with KSX 1; -1, the default
    at 1 and 4 rows: ksx_choice's split, resolve_ksx), XPD (1; 2 an option, 0 the plain
    loop) experts_up's k-blocks loaded that many steps ahead of their mmas in registers
    (mma_fp4.mxfp4_mma_tiles' PD; one k-block a step), XPDD the same for experts_down (0: its K is 3 k-blocks at a TP-8
    rank, and the unrolled ring of XPD 1 issues 6 loads and 4 mmas for them), XL2 (an
    option, 0 off) each expert item's weight rows asked of L2 whole as it starts (1), and the
    program's next item's too (2). SEAM_SPLIT (1): the seam over several programs a row
    (runtime/triton_seam.py), where the rows' slices fit the grid. SDU: the shared
    experts' down tiles run in experts_up, on the programs the routed items leave idle (48
    routed items for 132 programs at M 1), not in experts_down (the same arithmetic, so the
    same bits): 1 after the routed items round the grid (so a program that ran one may run
    tiles after it), 2 dealt over the idle programs only; -1 (the default) is sdu_fits'
    choice (2 or 0), 0 / 1 / 2 force it. SDUQ (16, all of them; 1..16): with SDU on, that
    many sixteenths of the shared down's tiles run in experts_up, the rest in experts_down
    (each tile the same arithmetic wherever it runs, so the same bits).
    XRS / XRSD (2..4; 0: the register loop): experts_up's / experts_down's weights and
    scales stream through mma_fp4's cp.async ring of that many stages in shared memory
    (the same arithmetic, so the same bits; both 2 at 2 rows, else 0). CARVE
    (1 on the mma path; 0 an option): the compiled launch's shared-memory carveout is
    fitted to its block (runtime/triton_smem.fit_carveout), so L1 keeps the rest of the SM
    where Triton would ask for the largest shared part. With mma the tensor-core dense
    phases step BK 256 at every row count (default_tiles says what was measured). BKN:
    latent_up's RMSNorm chunk (unset: norm_chunk's). BNO / BKO (0: latent_up's tile sets
    both; 64 / 128 with mma, default_tiles says what was measured): o_proj's own register
    tile and K step (at 1 row latent_up's 16-row GEMV tiles are 3-4 a program of 3 K steps
    each, each restarting the load pipeline; a 64-row tile is one a program, one K loop).
    STAGES: the dense K loops' cp.async stages, 4 with mma, else 3 (default_tiles says what was measured). XL2B /
    XL2BD (0 none; 128 or 256): experts_up's / experts_down's mma_fp4 weight and scale
    loads (or ring copies) carry that prefetch-size hint, so a load that misses L2 brings
    the aligned segment around it in from HBM, the row's next k-blocks with it (the same bytes, so the same bits). XET
    (0 / 1; mma_fp4 only): experts_down reads each item's expert and its rows' slots from a
    table experts_up's last program writes (routing.write_expert_table), instead of a
    CTA-wide sum an item and a scan of the rows' slots (the same items, so the same bits);
    2: and loads the program's next item's expert while this one runs. XDB (an option, 0
    off; no gain in the twentieth session): experts_down's items dealt to each program as
    one run of consecutive items (an expert's L tiles, over the same x rows) instead of
    every nprog-th (the same items, so the same bits). FR (0 / 1; sm_90): the routing and
    the shared experts' SiTU run inside the front, on the helper programs whose own front
    tiles end first (front_helpers), each once the tiles it reads are counted stored,
    so no routing phase and no barrier of its own; the router's and the shared gate/up's
    tiles are then BNR rows (half BNF on the tensor cores, BNF as GEMVs), dealt first.
    LSQ (0 / 1; sm_90; 1 from 2 rows): combine (TP 1) or the reduce (TP > 1) leaves each
    latent tile's share of its rows' sum of squares, so latent_up's norm sums those
    shares (one fixed order, the same on every program and rank) instead of a pass over
    the latent, a chain of L2 round trips; the squares are summed in another order, so
    the norm may differ from LSQ 0's in the last bits. Measured (twenty-fifth session,
    MXFP4, a TP-8 rank): latent_up 22.5 / 24.6 / 25.9 -> 19.7 / 21.5 / 22.5 us at 2 / 4 / 8
    rows; at 1 row the pass is one chunk and the shares' load cost 1 us more, so 0 there.
    SPASS (2; a probe, off): the split seam runs twice in one launch, one copy of its code
    (triton_seam.split_seam_persistent's PASSES), so a trace shows a pass with its code
    fetched (tools/device/seam_probe.py; the same bits).
    launch_args shrinks tiles that a small model cannot fill."""
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
        if rows == 1:  # 6 / 16 of the shared down's tiles in experts_up (SDU 2), the rest in experts_down
            t.update(SDUQ=6)
    elif expert_gemv:
        xr = _next_pow2(user_rows) if user_rows else rb
        bl = 64 if xr <= 2 else 32 if xr <= 4 else 16
        t.update(XU=_next_pow2(user_rows) if user_rows else 0, BI=16, BL=bl,
                 BKX=2 * clamp(budget // (xr * 16), 32, 256), BKD=2 * clamp(budget // (xr * bl), 32, 64))
    else:
        t.update(BI=64, BL=128, BKX=256, BKD=128)
    return t


def default_tiles(rows: int, mxfp4: bool = True, mma: bool = False) -> dict:
    """Per-M choice from the H200 sweeps (docs/evidence/k2-sm90.md, a TP-8 rank's shapes,
    the whole launch timed): 1 row: GEMV dense phases, 8 warps; 2 rows and more:
    tensor-core dense phases. MXFP4 experts through mma_fp4 where the plan allows it
    (`mma`: K2Plan.mma_experts), with 8 warps at every M; otherwise GEMV experts at 1 row
    and tensor-core experts from 2, 8 warps for bf16 at 2 rows (234 us against 251 with
    4), else 4 (MXFP4 through tl.dot_scaled, which loses 2x with 8). experts_up's K split
    (KSX) was faster in the tenth session's sweep (MXFP4, a TP-8 rank: 134 us against 146
    at 1 row with KSX 2, 154 against 161 at 2 rows with 4, 205 against 222 at 4 rows with
    2, 301 against 314 at 8 rows with 2 and 16 warps), but the 16-step real MXFP4 forward
    with it left its KL bound once, so it stayed off until the nineteenth session (below)
    ran that forward over three seeds (docs/evidence/k2-sm90.md). The mma
    experts load each k-block one step ahead (XPD 1 in both expert phases: 142 / 155 /
    206 / 289 us against 150 / 161 / 220 / 311 at 1 / 2 / 4 / 8 rows, twelfth session;
    the same arithmetic, so the same bits), now in experts_up only: with it in experts_down
    too (XPDD 1) the launch took 142.8 / 153.6 / 203.7 / 282.6 us against 139.6 / 149.3 /
    195.6 / 274.1 (fourteenth session, one call). Four pipeline stages (STAGES 4) measured 0.8-4.5 %
    faster with bf16 experts on the H200's Triton 3.6, but a newer Triton lays the same
    build out in 240 KB of shared memory, over the SM's 227 KB, so 3 stays.

    Fifteenth session, the same build timed in one call each (MXFP4, a TP-8 rank, us at
    1 / 2 / 4 / 8 rows; docs/evidence/k2-sm90.md): at 2 rows the experts stream through
    mma_fp4's shared-memory ring (XRS 2 / XRSD 2: 133.7 / 178.4 / 247.0 at 2 / 4 / 8 rows
    against 146.0 / 193.9 / 273.1); from 3 rows the tensor-core dense phases step 128 of K
    (BK 128: 144.3 / 179.0 / 237.6), and not both (256.5 at 8 rows). At 1 row neither
    (136.0 with the ring, 134.1 without).

    Seventeenth session (one call, traced): the launch's carveout is fitted to its block
    (CARVE 1; Triton 3.6 had asked for the largest shared part past 48 KB, which Nsight
    Compute showed as a 233 KB configuration, and the driver gave 64 KB below it), and
    from 3 rows experts_down streams through the ring too (XRSD 2): 135.8 / 132.1 / 177.7 /
    232.1 us against the default's 135.5 / 134.5 / 179.3 / 237.5 (CARVE alone: 136.0 /
    132.7 / 179.2 / 236.8). The down ring without the fitted carveout had cost experts_up's
    register loop 116.9 us against 76.9 at 8 rows: L1 had lost its room. At 1 row the
    down ring stays off (135.8 against 136.0 with CARVE alone: no gain).

    Eighteenth session (traced, one call each): latent_up's two norm passes step BKN
    (norm_chunk: 512 at 16 rows, one chunk at 1 row) where they had stepped BK, a chain of
    L2 round trips: latent_up 17.9 / 23.0 / 26.4 / 28.2 us at 1 / 2 / 4 / 8 rows against
    35.3 / 28.4 / 31.5 / 32.3 with BKN 128, the launch 128.2 / 132.0 / 176.9 / 234.1. BK 256
    (Triton's own shared memory 81 920 -> 163 840 B) with experts_down's ring (40 960 B
    more) costs experts_up's register loop 32 us at 8 rows; BK 256 without the ring took
    168.6 against 176.0 at 4 rows (the dense phases 11 us faster, experts_down 4 slower)
    and 234.1 against 233.6 at 8 (experts_down 7 slower, experts_up 6). So at 3 and 4 rows
    BK 256 and no down ring (161.6 / 171.7 against 167.6 / 178.0 in a second call). That
    call also had it 1.6-5.2 us faster at 5-8 rows; not the default there yet: untested on
    the GPU. k2_tiles' mma branch holds these, so a sweep's one-key override (set_block)
    keeps them.

    Nineteenth session (one call, traced; docs/evidence/k2-sm90.md): BK 256 without the
    down ring from 5 rows too (181.8 / 209.9 / 229.6 us at 5 / 6 / 8 rows against 186.6 /
    214.6 / 233.8 with BK 128 and the ring), and the shared down's tiles dealt over the
    programs the routed items leave idle (SDU 2: 132.7 / 128.3 us at 1 / 2 rows against
    133.7 / 130.7 where they had followed the routed items round the grid, SDU 1). At 1
    and 4 rows the K split is ksx_choice's (KSX -1, 2 at a TP-8 rank): 127.8 / 167.3 us
    against 132.7 / 171.6; at 2 rows its 4-way split took 129.9 against 128.3 (and turned
    SDU off), and at 3 and 5-8 rows it was not timed, so there it stays off. Its steps' KL
    stayed as far inside the bound as the unsplit ones' over three seeds (a second call),
    where the tenth session's one run had left it once.

    Twenty-second session (one call, traced): experts_down reads each item's expert and
    its rows' slots from the step's expert table (XET 1): experts_down 59.6 us at 8 rows
    against 70.5, the launch 128.4 / 121.6 / 156.8 / 216.5 us against 127.7 / 127.2 /
    160.5 / 226.6; with the expert loads' 256-byte L2 prefetch-size hint in both phases
    too (XL2B / XL2BD 256): 126.5 / 121.0 / 152.8 / 210.0. A second call, against that
    default (125.8 / 122.8 / 154.6 / 211.8): the program's next item's expert loaded a step
    ahead (XET 2) 124.0 / 121.5 / 154.0 / 209.4, and from 4 rows experts_down's three
    k-blocks loaded in one step (KUD 3: 153.0 / 206.0 at 4 / 8 rows; experts_down 52.6 us
    against 59.1 at 8; at 1 row 130.0, so not there; 5-7 rows not timed). Both are the
    same arithmetic in the same order: XET 2 ran bitwise the plain launch (the options
    test); so did KUD 3 (twenty-third session).

    Twenty-third session (one call, traced; docs/evidence/k2-sm90.md): the routing and the
    shared SiTU inside the front (FR: 106.2 / 116.9 / 149.1 / 197.5 us at 1 / 2 / 4 / 8 rows
    against 119.1 / 120.9 / 155.1 / 204.7 with a routing phase of its own; with the front's
    64-row tiles for the router too, BNR 64: 116.5 / 117.5 / 149.2 / 199.2), bitwise the
    plain launch; and at 1 row 6 / 16 of the shared down's tiles in experts_up, the rest in
    experts_down (SDUQ 6: 106.2 against 114.9 with all of them in experts_up, where the idle
    programs' 12 tiles each had been the phase's pole; SDUQ 8 and 10 timed between, in a
    call before).

    Twenty-seventh session (three calls, traced): with mma, four cp.async stages in the
    dense K loops (STAGES 4: 112.7 / 142.8 / 193.8 us at 2 / 4 / 8 rows against 114.8 /
    144.1 / 194.7, and 0.6-1.7 us less at 3 and 5-7 rows; 5 and 6 no faster where they fit
    the SM), and at 1 row o_proj in one 64-row tile a program stepping 128 of K (BNO /
    BKO) with them: 98.3 us against 106.4 in the gate's call (o_proj 7.7 against 11.8 us
    in the launch; BNO 64 with STAGES 3 101.9-103.3, STAGES 4 alone 107.1; BKO 64 or 256,
    BNO 32 or 128 no faster; from 2 rows BNO 32 loses 2-3 us).

    Twenty-eighth session (the gate's call, traced): o_proj's tile from 2 rows too (BNO 64,
    BKO 128 at every row count): 100.5 / 112.2 / 139.9 / 191.7 us at 1 / 2 / 4 / 8 rows
    against 104.8 / 114.2 / 142.3 / 194.5 with latent_up's tile (BNO 0); at 4 rows the same
    bits (the options test)."""
    if mma:
        return k2_tiles(rows, dense_gemv=rows <= 1, expert_gemv=False, num_warps=8, mma=True)
    if rows <= 1:
        return k2_tiles(rows, dense_gemv=True, expert_gemv=True, num_warps=8)
    return k2_tiles(rows, dense_gemv=False, expert_gemv=False, num_warps=8 if rows == 2 and not mxfp4 else 4)


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
    if b.get("BNO", 0) not in (0, 16, 32, 64, 128) or b.get("BKO", 0) not in (0, 64, 128, 256, 512):
        raise ValueError(f"K2 tiles: BNO={b.get('BNO', 0)}, BKO={b.get('BKO', 0)}; o_proj's own tile takes 16..128 "
                         "rows and K steps of 64..512 (0: latent_up's tile)")
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
    # cores (their tiles then end at about half the front's time), the GEMV's own else
    b["BNR"] = b.get("BNR") or (b["BNF"] if b["DENSE_GEMV"] else max(b["BNF"] // 2, 16))
    while b["BNR"] > 16 and any(v % b["BNR"] for v in (shared2, experts)):
        b["BNR"] //= 2
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
    """The shared experts' SiTU chunks a row (triton/kernel.SITU_CHUNK columns each)."""
    from sgl_k3_mono.k2.triton.kernel import SITU_CHUNK

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
