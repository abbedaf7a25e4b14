"""K2's host side, shared by every ISA: the plan, the weight views, the scratch and
synchronisation buffers, and the launch call. Device code lives in triton/ (sm_90);
nothing here depends on how a device splits the work beyond the tile sizes it asks for.

Weights are read where SGLang (or the reference's shard) holds them: views, never
copies. Scratch is allocated once per plan and reused by every layer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import torch

from sgl_k3_mono.k2.reference import K2RankWeights
from sgl_k3_mono.reference.experts import DenseExperts, Mxfp4Experts
from sgl_k3_mono.runtime.failure import ErrorRecord, Stall, deadline_ns
from sgl_k3_mono.runtime.triton_seam import SEAM_STEPS, SLICES, seam_part_width, seam_slice

MAX_ROWS = 8
ROW_PAD = 16  # tl.dot needs 16 rows; rows past M are masked
L2_PREFETCH_SIZES = (0, 128, 256)  # the prefetch-size hints mma_fp4 writes out (0: none)
MMA_SCALE_MAX = 128  # mma_fp4's bf16 2^(S-1) is finite up to here (weights up to 12)
NBB = 16  # the seam's mixed rows padded (bank rows + p; the bank holds at most 15)
K2_SYNC_WORDS = 8  # runtime/triton_sync's words, then K2's own (triton/kernel.FRONT_ROUTER / FRONT_SHARED)


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


@dataclass(frozen=True)
class K2Plan:
    """Everything a K2 launch is specialised on (one compiled kernel per plan)."""

    rows: int
    """M: rows in the step (1..8)."""
    isa: str
    """"sm_90" (Triton) or "gfx950" (roundings of SGLang's HIP path)."""
    hidden: int
    """H."""
    attn_width: int
    """A_l: this rank's attention output width (o_proj input)."""
    shared2: int
    """2 * S_l: this rank's shared gate + up rows."""
    experts: int
    """E routed experts."""
    latent: int
    """L."""
    inter: int
    """I_l: this rank's expert intermediate (true width)."""
    inter_up: int
    """Row offset of the up half in w13 (I_l, or the padded I_pad)."""
    top_k: int
    """Experts per row."""
    bank_rows: int
    """NB: rows the attn-res bank is allocated with."""
    eps: float
    """rms_norm_eps (seam norms and latent norm)."""
    situ_beta: float
    situ_linear_beta: float
    mxfp4: bool
    """Routed experts in MXFP4 (else bf16)."""
    tp: int = 1
    """TP size the weights are sharded for."""
    grid: int = 132
    """Programs: one per SM, all co-resident."""
    scale_max: int = 0
    """Largest ue8m0 scale code in the MXFP4 experts (0 with bf16 experts). The mma.sync
    experts (mma_fp4) scale by 2^(S-1) in bf16, finite while S <= MMA_SCALE_MAX."""
    experts_aligned: bool = True
    """Every layer's MXFP4 expert tensors sit where mma_fp4's 16-byte loads need them
    (experts_alignment_ok). Decided at build for all layers, like scale_max, so no layer can
    switch the launch to another variant (and a compile) inside a served step."""

    def __post_init__(self):
        if not 1 <= self.rows <= MAX_ROWS:
            raise ValueError(f"K2Plan: rows {self.rows} outside 1..{MAX_ROWS}")
        if self.isa not in ("sm_90", "gfx950"):
            raise ValueError(f"K2Plan: isa {self.isa!r}")
        tiles = {"H": (self.hidden, 16), "2S_l": (self.shared2, 16), "E": (self.experts, 16),
                 "L": (self.latent, 64), "I_l": (self.inter, 32), "A_l": (self.attn_width, 16)}
        bad = [f"{k}={v} (a multiple of {m})" for k, (v, m) in tiles.items() if v % m]
        if bad:
            raise ValueError("K2Plan: the Triton tiles need " + ", ".join(bad))

    @classmethod
    def for_weights(cls, w: K2RankWeights, rows: int, *, isa: str, bank_rows: int, grid: int,
                    tp: int = 1, scale_max: Optional[int] = None,
                    experts_aligned: Optional[bool] = None) -> "K2Plan":
        """The plan for layers shaped like `w`. `scale_max` and `experts_aligned`: the
        functions of those names over every layer the plan will run (default: `w`'s alone,
        right only for a one-layer plan)."""
        ex = w.moe.experts
        mx = isinstance(ex, Mxfp4Experts)
        if not mx and not isinstance(ex, DenseExperts):
            raise ValueError(f"K2Plan: expert store {type(ex).__name__} is not read by the launch")
        p = w.moe.params
        if p.routed_scaling != 1.0:
            raise ValueError(f"K2Plan: routed_scaling_factor {p.routed_scaling}: the launch is built for 1.0")
        if w.moe.latent_norm is None:  # config_reasons refuses such a model first
            raise ValueError("K2Plan: no latent norm weight: the launch always applies the latent RMSNorm")
        smax = experts_scale_max([w]) if scale_max is None else scale_max
        aligned = experts_alignment_ok([w]) if experts_aligned is None else experts_aligned
        return cls(rows=rows, isa=isa, hidden=w.o_proj.shape[0], attn_width=w.o_proj.shape[1],
                   shared2=w.moe.shared_gate_up.shape[0], experts=w.moe.router.shape[0],
                   latent=w.moe.latent_down.shape[0], inter=ex.inter,
                   inter_up=(ex.w13.shape[1] // 2), top_k=p.top_k, bank_rows=bank_rows, eps=p.eps,
                   situ_beta=p.situ_beta, situ_linear_beta=p.situ_linear_beta, mxfp4=mx, grid=grid, tp=tp,
                   scale_max=smax, experts_aligned=aligned)

    @property
    def mma_experts(self) -> bool:
        """The MXFP4 experts run through mma_fp4: sm_90, scales in range, tensors aligned,
        and the default mma tiles, as fit_tiles fits them, keep it. Decided here, so a plan
        that cannot take them gets the tiles measured for its other path (default_tiles),
        not mma's 8 warps."""
        tiles = resolve_ksx(default_tiles(self.rows, True, mma=True), rows=self.rows, top_k=self.top_k,
                            experts=self.experts, inter=self.inter, grid=self.grid, mma=True)
        tiles = fit_tiles(tiles, hidden=self.hidden, shared2=self.shared2, experts=self.experts, latent=self.latent,
                          inter=self.inter, mma=True)
        return (self.mxfp4 and self.isa == "sm_90" and self.scale_max <= MMA_SCALE_MAX and self.experts_aligned
                and bool(tiles["MMA"]))


def experts_scale_max(layers) -> int:
    """The largest ue8m0 scale code in the MXFP4 experts of `layers` (K2RankWeights; 0 with
    none): one max a scale tensor, at build, never in a step. A plan serves many layers, so
    its expert path (K2Plan.mma_experts) must hold for every one of them."""
    out = 0
    for w in layers:
        ex = w.moe.experts
        if isinstance(ex, Mxfp4Experts):
            out = max(out, int(ex.w13_scale.max()), int(ex.w2_scale.max()))
    return out


def experts_alignment_ok(layers) -> bool:
    """Every MXFP4 expert store of `layers` (K2RankWeights) fits mma_fp4's vector loads:
    tensors start on 16 bytes, weight strides are multiples of 16 bytes and scale strides
    of 4 (SGLang allocates each expert parameter whole, so its loader always fits)."""
    return all(mma_aligned(w.moe.experts) for w in layers if isinstance(w.moe.experts, Mxfp4Experts))


def mma_aligned(ex: Mxfp4Experts) -> bool:
    """One expert store fits mma_fp4's vector loads (experts_alignment_ok)."""
    ts = (ex.w13, ex.w13_scale, ex.w2, ex.w2_scale)
    return all(t.data_ptr() % 16 == 0 for t in ts) and \
        all(st % 16 == 0 for st in (*ex.w13.stride()[:2], *ex.w2.stride()[:2])) and \
        all(st % 4 == 0 for st in (*ex.w13_scale.stride()[:2], *ex.w2_scale.stride()[:2]))


@dataclass
class K2Peers:
    """TP > 1: this rank's symmetric partial buffers (two epoch-parity slots each), its
    ready tags, and every rank's addresses of them, for the in-launch pull reduces."""

    rank: int
    tp: int
    part1: torch.Tensor
    """[2, M, H] bf16: this rank's o_proj partials, one slot per epoch parity."""
    part2: torch.Tensor
    """[2, M, L + H] bf16: this rank's [latent | shared] partials."""
    flags: torch.Tensor
    """int32 [4]: ready tags (o_proj parity 0, 1; MoE parity 0, 1)."""
    part1_ptrs: torch.Tensor
    """int64 [tp]: every rank's part1 address, rank order."""
    part2_ptrs: torch.Tensor
    flag_ptrs: torch.Tensor

    @staticmethod
    def layout(plan: K2Plan) -> tuple[int, int, int]:
        """Byte offsets of part1, part2 and the flags inside one rank's symmetric buffer."""
        p1 = 2 * plan.rows * plan.hidden * 2
        p2 = 2 * plan.rows * (plan.latent + plan.hidden) * 2
        return 0, p1, p1 + p2

    @classmethod
    def _over(cls, plan: K2Plan, rank: int, bufs: list[torch.Tensor], bases: list[int]) -> "K2Peers":
        o1, o2, of = cls.layout(plan)
        m, h, lh = plan.rows, plan.hidden, plan.latent + plan.hidden
        mine = bufs[rank]
        table = lambda off: torch.tensor([b + off for b in bases], dtype=torch.int64, device=mine.device)  # noqa: E731
        return cls(rank=rank, tp=len(bases),
                   part1=mine[o1:o2].view(torch.bfloat16).view(2, m, h),
                   part2=mine[o2:of].view(torch.bfloat16).view(2, m, lh),
                   flags=mine[of:of + 16].view(torch.int32), part1_ptrs=table(o1), part2_ptrs=table(o2),
                   flag_ptrs=table(of))

    @classmethod
    def emulated(cls, plan: K2Plan, device) -> list["K2Peers"]:
        """Every rank's buffers in this process (tests: ranks run one after another)."""
        size = cls.layout(plan)[2] + 16
        bufs = [torch.zeros(size, dtype=torch.uint8, device=device) for _ in range(plan.tp)]
        bases = [b.data_ptr() for b in bufs]
        return [cls._over(plan, r, bufs, bases) for r in range(plan.tp)]

    @classmethod
    def symmetric(cls, plan: K2Plan, group_name: str, device) -> "K2Peers":
        """From torch.distributed._symmetric_memory (one allocation, one rendezvous)."""
        import torch.distributed._symmetric_memory as symm

        size = cls.layout(plan)[2] + 16
        if hasattr(symm, "enable_symm_mem_for_group"):  # needed by older torch, a deprecated no-op later
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore", FutureWarning)
                symm.enable_symm_mem_for_group(group_name)
        buf = symm.empty(size, dtype=torch.uint8, device=device)
        buf.zero_()
        handle = symm.rendezvous(buf, group_name)
        handle.barrier()  # every rank's tags are zero before any launch publishes one
        bufs = [buf if r == handle.rank else None for r in range(handle.world_size)]
        return cls._over(plan, handle.rank, bufs, list(handle.buffer_ptrs))


def expert_table_words(top_k: int) -> int:
    """write_expert_table's int32 words at the widest row tile (ROW_PAD rows): the count, P
    expert ids, P pair numbers, then P x ROW_PAD slots (P = ROW_PAD x top_k padded)."""
    p = ROW_PAD * _next_pow2(top_k)
    return 1 + 2 * p + p * ROW_PAD


@dataclass
class K2Scratch:
    """Per-plan buffers; every layer's launch reuses them."""

    part1: torch.Tensor
    p: torch.Tensor
    h2: torch.Tensor
    gate_up: torch.Tensor
    logits: torch.Tensor
    routed_in: torch.Tensor
    ids: torch.Tensor
    wts: torch.Tensor
    owner: torch.Tensor
    """int32 [E]: per expert, the first (row, slot) routed to it (reset every launch)."""
    act: torch.Tensor
    y: torch.Tensor
    shared_act: torch.Tensor
    """[M, S2/2] bf16: the shared experts' SiTU(gate, up), written by the routing phase."""
    latent_normed: torch.Tensor
    """[grid, M, L] bf16: each program's own copy of the normed latent (the up projection's
    operand; a copy a program, so no grid barrier sits between the norm and the GEMM)."""
    part2: torch.Tensor
    seam_a: torch.Tensor
    """[M, H] bf16: TP > 1, the split seam's rank-order sum of the o_proj partials."""
    seam_mix: torch.Tensor
    """[M, H] fp32: the split seam's mix, between its second and third step."""
    seam_parts: torch.Tensor
    """[M, SP, seam_part_width(16)] fp32: the split seam's per-slice partial sums (SP at
    the narrowest slice, the most slices a row can have)."""
    seam_counters: torch.Tensor
    """int32 [16]: the split seam's row counters (zero between launches)."""
    expert_table: torch.Tensor
    """int32 [expert_table_words]: the step's distinct experts and, per expert and row, the
    slot naming it (XET; triton/routing.write_expert_table), rewritten every launch."""
    latent_ssq: torch.Tensor
    """[latent_ssq_slots(L), 16] fp32 (LSQ): each latent tile's share of its rows' sum of
    squares, written by combine (TP 1) or the reduce (TP > 1), summed by latent_up."""
    sync: torch.Tensor
    """int32 [K2_SYNC_WORDS]: the grid barrier's and the epoch's words (runtime/triton_sync),
    then FR's two front-tile counts (triton/kernel.FRONT_ROUTER / FRONT_SHARED); zero
    between launches."""

    @classmethod
    def allocate(cls, plan: K2Plan, device) -> "K2Scratch":
        m, h, k = plan.rows, plan.hidden, plan.top_k
        bf, f32 = dict(dtype=torch.bfloat16, device=device), dict(dtype=torch.float32, device=device)
        return cls(
            part1=torch.empty(m, h, **bf), p=torch.empty(m, h, **bf), h2=torch.empty(ROW_PAD, h, **bf),
            gate_up=torch.empty(m, plan.shared2, **f32), logits=torch.empty(m, plan.experts, **f32),
            routed_in=torch.empty(m, plan.latent, **bf),
            ids=torch.empty(m, k, dtype=torch.int32, device=device), wts=torch.empty(m, k, **f32),
            owner=torch.empty(plan.experts, dtype=torch.int32, device=device),
            act=torch.empty(m * k, ROW_PAD, plan.inter, **bf), y=torch.empty(m * k, plan.latent, **bf),
            shared_act=torch.empty(m, plan.shared2 // 2, **bf),
            latent_normed=torch.empty(plan.grid, m, plan.latent, **bf),
            part2=torch.empty(m, plan.latent + h, **bf),
            seam_a=torch.empty(m, h, **bf), seam_mix=torch.empty(m, h, **f32),
            seam_parts=torch.empty(m, -(-h // SLICES[0]), seam_part_width(NBB), **f32),
            seam_counters=torch.zeros(NBB, dtype=torch.int32, device=device),
            expert_table=torch.empty(expert_table_words(plan.top_k), dtype=torch.int32, device=device),
            latent_ssq=torch.empty(latent_ssq_slots(plan.latent), ROW_PAD, **f32),
            sync=torch.zeros(K2_SYNC_WORDS, dtype=torch.int32, device=device),
        )

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in vars(self).values())


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
    both; 64 / 128 at 1 row with mma): o_proj's own register tile and K step (at 1 row
    latent_up's 16-row GEMV tiles are 3-4 a program of 3 K steps each, each restarting the
    load pipeline; a 64-row tile is one a program, one K loop). STAGES: the dense K loops'
    cp.async stages, 4 with mma, else 3 (default_tiles says what was measured). XL2B /
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
        if rows == 1:  # o_proj one 64-row tile a program, one K loop (where latent_up's 16-row tiles are 3-4)
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
    BNO 32 or 128 no faster; from 2 rows BNO 32 loses 2-3 us)."""
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


def _runs_ptx() -> bool:
    """Triton compiles to the device here (not its CPU interpreter)."""
    return os.environ.get("TRITON_INTERPRET") != "1"


def latent_ssq_slots(latent: int) -> int:
    """Slots for the latent tiles' sums of squares (LSQ): a power of two covering the most
    tiles the latent can be cut into (16 columns each, the narrowest tile)."""
    return _next_pow2(max(latent // 16, 1))


def ring_bytes(meta: dict) -> int:
    """Shared memory mma_fp4's ring takes in a launch of these options (0: no ring): the
    deeper of the two expert phases' rings, a stage of RING_STAGE_BYTES_PER_THREAD a thread."""
    stages = max(meta.get("XRS", 0), meta.get("XRSD", 0))
    if not stages:
        return 0
    from sgl_k3_mono.k2.triton.mma_fp4 import RING_STAGE_BYTES_PER_THREAD

    return stages * meta["NT"] * RING_STAGE_BYTES_PER_THREAD.value


@dataclass
class K2Launch:
    """One rank's K2 for one plan: call it once per MoE layer."""

    plan: K2Plan
    scratch: K2Scratch
    errors: ErrorRecord
    deadline_s: float = 60.0
    rank: int = 0
    stall: Optional[Stall] = field(default_factory=Stall.from_env)
    block: dict = field(default_factory=dict)
    """Tile sizes and launch options (k2_tiles; default_tiles(rows, mxfp4) unless set_block changes them)."""
    peers: Optional[K2Peers] = None
    """TP > 1: the symmetric buffers of the in-launch reduces (see K2Peers)."""
    red: Optional[torch.Tensor] = None
    """TP > 1: [M, L + H] bf16, the reduced [latent | shared] of this rank."""
    trace: Optional[torch.Tensor] = None
    """[grid, TRACE_SLOTS] int64, or None: where a persistent launch writes each program's
    phase entry times (the benchmark's in-launch phase profile; the served build has none)."""

    @classmethod
    def build(cls, plan: K2Plan, device, *, deadline_s: float = 60.0, rank: int = 0,
              hip: Optional[bool] = None, peers: Optional[K2Peers] = None,
              impl: Optional[str] = None) -> "K2Launch":
        """`hip`: build for an AMD GPU (default: what this torch runs on). CDNA has 160 KB
        of LDS and 64-wide waves: shallower pipelines and twice the warps keep the
        persistent program inside one CU. `impl`: the device code (default: what
        sgl_k3_mono.kernels.choose says for the ISA: FlyDSL on gfx950 unless
        SGL_K3_MONO_GFX950_IMPL=triton, Triton elsewhere)."""
        from sgl_k3_mono.k2.triton.kernel import PHASES

        if (plan.tp > 1) != (peers is not None) or (peers is not None and (peers.tp, peers.rank) != (plan.tp, rank)):
            raise ValueError(f"K2Launch: TP {plan.tp} rank {rank} needs K2Peers of that TP and rank "
                             f"(got {None if peers is None else (peers.tp, peers.rank)})")
        launch = cls(plan, K2Scratch.allocate(plan, device), ErrorRecord({"k2": PHASES}), deadline_s, rank)
        launch.block = default_tiles(plan.rows, plan.mxfp4, mma=plan.mma_experts)
        if peers is not None:
            launch.peers = peers
            launch.red = torch.empty(plan.rows, plan.latent + plan.hidden, dtype=torch.bfloat16, device=device)
        if hip if hip is not None else torch.version.hip is not None:
            # CDNA: tensor-core (MFMA) tiles throughout; the GEMV choice is measured on sm_90 only
            launch.block = dict(k2_tiles(plan.rows, dense_gemv=False, expert_gemv=False, num_warps=8),
                                BK=128, STAGES=2)
            launch.hip = True
        if impl is None:
            from sgl_k3_mono.kernels import choose

            impl = choose("gfx950" if launch.hip else "sm_90").impl
            if impl == "flydsl":  # the default must be whole: refuse at build (startup), not at step 1
                from sgl_k3_mono.k2.flydsl.launch import missing_phases

                if missing_phases():
                    raise NotImplementedError(
                        f"K2Launch: the FlyDSL K2 (the gfx950 default) lacks phases {list(missing_phases())}; "
                        "set SGL_K3_MONO_GFX950_IMPL=triton for the Triton K2 on gfx950")
        if impl not in ("triton", "flydsl") or (impl == "flydsl" and not launch.hip):
            raise ValueError(f"K2Launch: impl {impl!r} for a {'HIP' if launch.hip else 'CUDA'} build")
        if impl == "flydsl":  # refuse at build (startup) what the FlyDSL tiles cannot take
            from sgl_k3_mono.k2.flydsl.launch import check_plan

            check_plan(plan)
        launch.impl = impl
        return launch

    hip: bool = False
    """Built for an AMD GPU (the HIP timer in the waits)."""

    def set_block(self, **over) -> None:
        """Switch tiles: DENSE_GEMV / EXPERT_GEMV / XU / num_warps / MMA pick k2_tiles' sizes
        for this plan's rows, then the other keys override single entries (the benchmark's
        sweeps). An empty override is the launch's defaults (default_tiles' choices are
        k2_tiles' sizes)."""
        cur = self.block
        base = k2_tiles(self.plan.rows, dense_gemv=bool(over.get("DENSE_GEMV", cur["DENSE_GEMV"])),
                        expert_gemv=bool(over.get("EXPERT_GEMV", cur["EXPERT_GEMV"])),
                        num_warps=over.get("num_warps", cur["num_warps"]),
                        user_rows=over.get("XU", cur.get("XU", 0)), mma=bool(over.get("MMA", cur.get("MMA", 0))))
        self.block = {**base, **over}
    impl: str = "triton"
    """Device code: "triton", or "flydsl" on gfx950 (sgl_k3_mono.kernels.choose picks it);
    both take the arguments launch_args packs."""
    tiles_used: dict = field(default_factory=dict)
    """The tiles the last launch ran with (block after fit_tiles: MMA says which expert path)."""

    def launch_args(self, w: K2RankWeights, attn_out: torch.Tensor, bank: torch.Tensor, nvb: int,
                    prefix: Optional[torch.Tensor], out: torch.Tensor, *, layer: int = 0) -> tuple[tuple, dict]:
        """The kernel's positional arguments and its constexpr/launch options for one layer."""
        from sgl_k3_mono.k2.triton.kernel import PHASES

        pl, s = self.plan, self.scratch
        ex = w.moe.experts
        # the interpreter runs no PTX; the HIP build has its own tiles
        mma = pl.mma_experts and not self.hip and _runs_ptx()
        b = resolve_ksx(dict(self.block), rows=pl.rows, top_k=pl.top_k, experts=pl.experts, inter=pl.inter,
                        grid=pl.grid, mma=mma)
        b = fit_tiles(b, hidden=pl.hidden, shared2=pl.shared2, experts=pl.experts, latent=pl.latent,
                      inter=pl.inter, mma=mma)
        if b.get("MMA") and not mma_aligned(ex):  # the plan was decided for other tensors: refuse, never fault
            raise ValueError(f"K2Launch: layer {layer}'s MXFP4 expert tensors are off the 16-byte alignment "
                             "its plan was built for (K2Plan.experts_aligned)")
        front = (w.moe.shared_gate_up, w.moe.router, w.moe.latent_down)  # bulk prefetch: 16-byte rows
        b["PF"] = _prefetch_bytes(b, pl.hidden, ptx=not self.hip and _runs_ptx()
                                  and all(t.data_ptr() % 16 == 0 and t.stride(0) % 8 == 0 for t in front))
        m = attn_out.shape[0]
        if b.get("SDU", 0) < 0:  # measured on sm_90 only; the FlyDSL K2 keeps the shared down in experts_down
            b["SDU"] = 2 * int(not self.hip and sdu_fits(b, rows=pl.rows, top_k=pl.top_k, experts=pl.experts,
                                                         inter=pl.inter, grid=pl.grid))
        if b.get("SDU", 0) not in (0, 1, 2):
            raise ValueError(f"K2Launch: SDU {b['SDU']} is not 0 (off), 1 (after the routed items) or 2 (on the "
                             "programs they leave idle)")
        if not 1 <= b.get("SDUQ", 16) <= 16:
            raise ValueError(f"K2Launch: SDUQ {b['SDUQ']} is not 1..16 (sixteenths of the shared down's tiles "
                             "that run in experts_up when SDU is on)")
        b["SDUT"] = (pl.hidden // b["BN"]) * b.get("SDUQ", 16) // 16 if b.get("SDU") else 0
        if b.get("FR", 0) not in (0, 1):
            raise ValueError(f"K2Launch: FR {b['FR']} is not 0 (a routing phase) or 1 (routing in the front)")
        b["FR"] = int(b.get("FR", 0)) if not self.hip else 0  # measured on sm_90 only
        if b.get("LSQ", 0) not in (0, 1):
            raise ValueError(f"K2Launch: LSQ {b['LSQ']} is not 0 (latent_up sums the squares itself) or 1 (the "
                             "latent's tiles leave their shares)")
        b["LSQ"] = int(b.get("LSQ", 0)) if not self.hip else 0  # measured on sm_90 only
        b["FRH"] = front_helpers(experts=pl.experts, shared2=pl.shared2, latent=pl.latent, bnr=b["BNR"],
                                 bnf=b["BNF"], grid=pl.grid, helpers=m + m * situ_chunks(pl.shared2)) \
            if b["FR"] else 0
        self.tiles_used = b
        bs = seam_slice(m, pl.hidden, pl.grid) if b.get("SEAM_SPLIT") else 0
        b["SEAM_SPLIT"] = int(bs > 0)
        sp = -(-pl.hidden // bs) if bs else 1
        if m != pl.rows or bank.shape[1] != pl.bank_rows or not 0 <= nvb <= pl.bank_rows or pl.bank_rows > 15:
            raise ValueError(f"K2Launch: rows {m} / bank {tuple(bank.shape)} / nvb {nvb} do not fit {pl}")
        moe = w.moe
        if pl.mxfp4:
            w13, sc13, w2, sc2 = ex.w13, ex.w13_scale, ex.w2, ex.w2_scale
        else:
            w13, w2 = ex.w13, ex.w2
            sc13, sc2 = w13, w2  # unused: never dereferenced on the bf16 path
        stall = -1 if self.stall is None else self.stall.phase_index(self.rank, layer, "k2", PHASES)
        isa_sm90 = pl.isa == "sm_90"
        args = (
            attn_out, bank, prefix if prefix is not None else attn_out, m, nvb, int(prefix is not None), pl.bank_rows,
            w.o_proj, w.o_proj.stride(0), w.mlp_res_proj, w.mlp_res_norm, w.post_attention_layernorm,
            moe.shared_gate_up, moe.shared_gate_up.stride(0), moe.router, moe.router.stride(0),
            moe.latent_down, moe.latent_down.stride(0), moe.router_bias,
            w13, w13.stride(0), w13.stride(1), sc13, sc13.stride(0), sc13.stride(1),
            w2, w2.stride(0), w2.stride(1), sc2, sc2.stride(0), sc2.stride(1),
            moe.shared_down, moe.shared_down.stride(0), moe.latent_norm, moe.latent_up, moe.latent_up.stride(0),
            *self._partials(), s.p, s.h2, s.gate_up, s.logits, s.routed_in, s.ids, s.wts, s.owner, s.act, s.y,
            s.shared_act, s.latent_normed, *self._partials2(), s.seam_a, s.seam_mix, s.seam_parts, s.seam_counters,
            s.expert_table, s.latent_ssq,
            out, *self._peer_args(),
            s.sync, self.errors.address, deadline_ns(self.deadline_s), self.rank, layer, stall,
            self.trace if self.trace is not None else s.sync, b["FRH"], 0,
        )
        meta = dict(
            H=pl.hidden, A=pl.attn_width, S2=pl.shared2, E=pl.experts, L=pl.latent, I=pl.inter,
            I_UP=pl.inter_up, TOPK=pl.top_k, EPS=pl.eps, BETA=pl.situ_beta,
            LBETA=pl.situ_linear_beta, MXFP4=pl.mxfp4, FRONT_BF16=not isa_sm90, MIX_BF16=isa_sm90,
            BM=_next_pow2(m) if b["DENSE_GEMV"] else ROW_PAD, XR=_next_pow2(m) if b["EXPERT_GEMV"] else ROW_PAD,
            DENSE_GEMV=bool(b["DENSE_GEMV"]), EXPERT_GEMV=bool(b["EXPERT_GEMV"]), MX4D=bool(b.get("MX4D", 1)),
            XU=b.get("XU", 0) if b["EXPERT_GEMV"] else 0,
            BN=b["BN"], BK=b["BK"], BKX=b["BKX"], BKD=b["BKD"], BI=b["BI"], BL=b["BL"],
            BH=_next_pow2(pl.hidden), BE=_next_pow2(pl.experts), KB=_next_pow2(pl.top_k), NBB=NBB,
            STAGES=b["STAGES"], num_warps=b["num_warps"], HIP=self.hip, TP=pl.tp,
            SCALE_ALIGN=_pow2_divisor(sc13.stride(1), sc2.stride(1)) if pl.mxfp4 else 1,
            MMA=bool(b.get("MMA", 0)), NT=32 * b["num_warps"], KUX=b.get("KUX", 2), KUD=b.get("KUD", 1),
            KSX=b.get("KSX", 1), PF=b["PF"], BNF=b["BNF"], BNH=b["BNH"], XPD=b.get("XPD", 0) if b["MMA"] else 0,
            XPDD=b.get("XPDD", 0) if b["MMA"] else 0,
            XRS=b.get("XRS", 0) if b["MMA"] else 0, XRSD=b.get("XRSD", 0) if b["MMA"] else 0,
            CARVE=bool(b.get("CARVE", 0)) and isa_sm90 and _runs_ptx(),
            XL2=b.get("XL2", 0) if b["MMA"] else 0, XDB=int(b.get("XDB", 0)),
            XL2B=b.get("XL2B", 0) if b["MMA"] else 0, XL2BD=b.get("XL2BD", 0) if b["MMA"] else 0,
            XET=int(b.get("XET", 0)) if b["MMA"] else 0,
            TRACE=self.trace is not None, SEAM_SPLIT=bs > 0, BS=bs or 512, SP=sp, SPP=_next_pow2(sp),
            SDU=int(b.get("SDU", 0)), SDUT=b["SDUT"], FR=b["FR"], BNR=b["BNR"],
            LSQ=b["LSQ"], LSQP=latent_ssq_slots(pl.latent), BNO=b.get("BNO", 0), BKO=b.get("BKO", 0),
        )
        meta["BKN"] = b.get("BKN") or norm_chunk(meta["BM"], meta["NT"], pl.latent, b["BK"])
        return args, meta

    def _partials(self) -> tuple:
        return (self.peers.part1 if self.peers is not None else self.scratch.part1,)

    def _partials2(self) -> tuple:
        return (self.peers.part2 if self.peers is not None else self.scratch.part2,)

    def _peer_args(self) -> tuple:
        """peer1, peer2, flags, red, SLOT1, SLOT2 (placeholders at TP 1: never read)."""
        p, s = self.peers, self.scratch
        if p is None:
            return (s.sync, s.sync, s.sync, s.part2, 0, 0)
        return (p.part1_ptrs, p.part2_ptrs, p.flag_ptrs, self.red, p.part1[0].numel(), p.part2[0].numel())

    def compile(self, w: K2RankWeights, attn_out: torch.Tensor, bank: torch.Tensor, nvb: int,
                prefix: Optional[torch.Tensor], out: torch.Tensor, *, layer: int = 0) -> None:
        """Compile the persistent launch this layer would run into Triton's cache, without
        running it: the benchmarks compile their sweep's variants this way in parallel
        processes on the device host's cores, so the timed runs compile nothing."""
        from sgl_k3_mono.k2.triton.kernel import k2_kernel

        if self.impl != "triton":
            raise ValueError(f"K2Launch.compile: the {self.impl} launch compiles at its first call")
        args, meta = self.launch_args(w, attn_out, bank, nvb, prefix, out, layer=layer)
        k2_kernel.warmup(*args, grid=(self.plan.grid,), PHASE=-1, **meta)

    def _run_triton(self, args: tuple, meta: dict, **consts) -> None:
        """One Triton launch. With mma_fp4's ring (XRS / XRSD) its shared memory is reserved
        past Triton's own on the compiled kernel before that is first loaded, and the
        launch is told where it starts (ring_off, the last positional argument). The
        compiled kernel is looked up (warmup) at every launch, not cached here: the
        specialised has_prefix makes two builds a width, each with its own reservation,
        and a captured step pays the lookup once, at capture."""
        from sgl_k3_mono.k2.triton.kernel import k2_kernel

        grid = (self.plan.grid,)
        nbytes = ring_bytes(meta)
        if nbytes or meta["CARVE"]:
            from sgl_k3_mono.runtime import triton_smem

            compiled = k2_kernel.warmup(*args, grid=grid, **consts, **meta)
            if nbytes:
                args = args[:-1] + (triton_smem.reserve(compiled, nbytes),)
            if meta["CARVE"]:  # after the reservation: the carveout is fitted to the final size
                triton_smem.fit_carveout(compiled)
        k2_kernel[grid](*args, **consts, **meta)

    def __call__(self, w: K2RankWeights, attn_out: torch.Tensor, bank: torch.Tensor, nvb: int,
                 prefix: Optional[torch.Tensor], out: torch.Tensor, *, layer: int = 0,
                 phase=None) -> torch.Tensor:
        """Run the layer: persistent (phase None), one phase alone (phase p: per-phase
        timing), or every phase as its own launch (phase "all": the interpreter tests)."""
        from sgl_k3_mono.k2.triton.kernel import PHASES

        args, meta = self.launch_args(w, attn_out, bank, nvb, prefix, out, layer=layer)
        if self.impl == "flydsl":
            from sgl_k3_mono.k2.flydsl.launch import run_fly

            run_fly(args, meta, phase=phase, grid=self.plan.grid)
            return out
        if phase is None:
            self._run_triton(args, meta, PHASE=-1)
            return out
        for p in range(len(PHASES)) if phase == "all" else (int(phase),):
            # phased, the split seam is SEAM_STEPS launches of phase 1 (its row waits exist
            # in the persistent launch only)
            for step in range(SEAM_STEPS) if p == 1 and meta["SEAM_SPLIT"] else (0,):
                self._run_triton(args, meta, PHASE=p, SEAM_STEP=step)
        return out
