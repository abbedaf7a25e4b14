"""K2's host side, shared by every ISA: the plan, the weight views, the scratch and
synchronisation buffers, and the launch call. Device code lives in triton/ (sm_90) and
flydsl/ (gfx950), the tile choice in tiles.py; nothing here depends on how a device splits
the work beyond the tile sizes it asks for.

Weights are read where SGLang (or the reference's shard) holds them: views, never
copies. Scratch is allocated once per plan and reused by every layer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import torch

from sgl_k3_mono.k2.expert_layout import check_dims, code_of
from sgl_k3_mono.k2.options import check_overrides
from sgl_k3_mono.k2.reference import K2RankWeights
from sgl_k3_mono.k2.tiles import (_next_pow2, _pow2_divisor, _prefetch_bytes, default_tiles, fit_tiles,
                                  front_helpers, k2_tiles, norm_chunk, resolve_ksx, sdu_fits, situ_chunks)
from sgl_k3_mono.reference.experts import DenseExperts, Mxfp4Experts
from sgl_k3_mono.runtime.failure import ErrorRecord, Stall, deadline_ns
from sgl_k3_mono.runtime.triton_seam import SEAM_STEPS, SLICES, seam_part_width, seam_slice

MAX_ROWS = 8
ROW_PAD = 16  # tl.dot needs 16 rows; rows past M are masked
MMA_SCALE_MAX = 128  # mma_fp4's bf16 2^(S-1) is finite up to here (weights up to 12)
NBB = 16  # the seam's mixed rows padded (bank rows + p; the bank holds at most 15)
K2_SYNC_WORDS = 8  # runtime/triton_sync's words, then K2's own (triton/frame.FRONT_ROUTER / FRONT_SHARED)


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
    expert_layout: int = 0
    """Where the MXFP4 experts' bytes sit (k2/expert_layout.LAYOUT_CODES: 0 SGLang's plain
    rows; 1 / 2 AITER's a16w4 / generic preshuffles, which SGLang leaves on gfx950 and the
    launch reads in place). One for every layer (experts_layout)."""

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
        if self.expert_layout and not self.mxfp4:
            raise ValueError("K2Plan: an expert layout other than plain is an MXFP4 one")
        why = check_dims(self.expert_layout, inter_up=self.inter_up, latent=self.latent)
        if why:
            raise ValueError(f"K2Plan: expert layout {self.expert_layout} needs " + "; ".join(why))

    @classmethod
    def for_weights(cls, w: K2RankWeights, rows: int, *, isa: str, bank_rows: int, grid: int,
                    tp: int = 1, scale_max: Optional[int] = None,
                    experts_aligned: Optional[bool] = None, expert_layout: Optional[int] = None) -> "K2Plan":
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
        xl = experts_layout([w]) if expert_layout is None else expert_layout
        return cls(rows=rows, isa=isa, hidden=w.o_proj.shape[0], attn_width=w.o_proj.shape[1],
                   shared2=w.moe.shared_gate_up.shape[0], experts=w.moe.router.shape[0],
                   latent=w.moe.latent_down.shape[0], inter=ex.inter,
                   inter_up=(ex.w13.shape[1] // 2), top_k=p.top_k, bank_rows=bank_rows, eps=p.eps,
                   situ_beta=p.situ_beta, situ_linear_beta=p.situ_linear_beta, mxfp4=mx, grid=grid, tp=tp,
                   scale_max=smax, experts_aligned=aligned, expert_layout=xl)

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
        return (self.mxfp4 and self.isa == "sm_90" and self.expert_layout == 0 and self.scale_max <= MMA_SCALE_MAX
                and self.experts_aligned and bool(tiles["MMA"]))


def experts_scale_max(layers) -> int:
    """The largest ue8m0 scale code in the MXFP4 experts of `layers` (K2RankWeights; 0 with
    none): one max a scale tensor, at build, never in a step. A plan serves many layers, so
    its expert path (K2Plan.mma_experts) must hold for every one of them."""
    out = 0
    for w in layers:
        ex = w.moe.experts
        if isinstance(ex, Mxfp4Experts) and ex.layout == "plain":  # mma_fp4 reads no other layout
            out = max(out, int(ex.w13_scale.max()), int(ex.w2_scale.max()))
    return out


def experts_layout(layers) -> int:
    """The expert layout code every MXFP4 layer of `layers` holds (0 without any): a plan
    serves them all, so layers that disagree are refused here, at build."""
    codes = {code_of(w.moe.experts.layout) for w in layers if isinstance(w.moe.experts, Mxfp4Experts)}
    if len(codes) > 1:
        raise ValueError(f"K2Plan: the MoE layers hold their experts in different layouts ({sorted(codes)})")
    return codes.pop() if codes else 0


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
    then FR's two front-tile counts (triton/frame.FRONT_ROUTER / FRONT_SHARED); zero
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
        from sgl_k3_mono.k2.triton.frame import PHASES

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
        k2_tiles' sizes). Keys no option has, or that the launch derives, are refused
        (options.check_overrides)."""
        check_overrides(over)
        cur = self.block
        base = k2_tiles(self.plan.rows, dense_gemv=bool(over.get("DENSE_GEMV", cur["DENSE_GEMV"])),
                        expert_gemv=bool(over.get("EXPERT_GEMV", cur["EXPERT_GEMV"])),
                        num_warps=over.get("num_warps", cur["num_warps"]),
                        user_rows=over.get("XU", cur.get("XU", 0)), mma=bool(over.get("MMA", cur.get("MMA", 0))),
                        mxfp4=self.plan.mxfp4)
        self.block = {**base, **over}
    impl: str = "triton"
    """Device code: "triton", or "flydsl" on gfx950 (sgl_k3_mono.kernels.choose picks it);
    both take the arguments launch_args packs."""
    tiles_used: dict = field(default_factory=dict)
    """The tiles the last launch ran with (block after fit_tiles: MMA says which expert path)."""

    def launch_args(self, w: K2RankWeights, attn_out: torch.Tensor, bank: torch.Tensor, nvb: int,
                    prefix: Optional[torch.Tensor], out: torch.Tensor, *, layer: int = 0) -> tuple[tuple, dict]:
        """The kernel's positional arguments and its constexpr/launch options for one layer."""
        from sgl_k3_mono.k2.triton.frame import PHASES

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
        b["FLATD"] = int(b.get("FLATD", 0)) if not self.hip else 0  # GEMV or tensor-core loops, sm_90
        b["FLATX"] = int(b.get("FLATX", 0)) if not (b.get("XU") or pl.mxfp4 or self.hip) else 0  # bf16, sm_90
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
            STAGES=b["STAGES"], STX=b.get("STX", 0), STXD=b.get("STXD", 0),
            BKS=b.get("BKS", 0), BKU=b.get("BKU", 0), STU=b.get("STU", 0),
            num_warps=b["num_warps"], HIP=self.hip, TP=pl.tp,
            SCALE_ALIGN=_pow2_divisor(sc13.stride(1), sc2.stride(1)) if pl.mxfp4 and not pl.expert_layout else 1,
            XL=pl.expert_layout,
            MMA=bool(b.get("MMA", 0)), NT=32 * b["num_warps"], KUX=b.get("KUX", 2), KUD=b.get("KUD", 1),
            KSX=b.get("KSX", 1), PF=b["PF"], BNF=b["BNF"], BNH=b["BNH"], XPD=b.get("XPD", 0) if b["MMA"] else 0,
            XPDD=b.get("XPDD", 0) if b["MMA"] else 0,
            XRS=b.get("XRS", 0) if b["MMA"] else 0, XRSD=b.get("XRSD", 0) if b["MMA"] else 0,
            CARVE=bool(b.get("CARVE", 0)) and isa_sm90 and _runs_ptx(),
            XL2=b.get("XL2", 0) if b["MMA"] else 0, XDB=int(b.get("XDB", 0)),
            XL2B=b.get("XL2B", 0) if b["MMA"] else 0, XL2BD=b.get("XL2BD", 0) if b["MMA"] else 0,
            XET=int(b.get("XET", 0)) if b["MMA"] else 0,
            TRACE=self.trace is not None, SPASS=int(b.get("SPASS", 1)) if bs > 0 else 1,
            SEAM_SPLIT=bs > 0, BS=bs or 512, SP=sp, SPP=_next_pow2(sp),
            SDU=int(b.get("SDU", 0)), SDUT=b["SDUT"], FR=b["FR"], BNR=b["BNR"],
            LSQ=b["LSQ"], LSQP=latent_ssq_slots(pl.latent), BNO=b.get("BNO", 0), BKO=b.get("BKO", 0),
            FLATD=b["FLATD"], FLATX=b["FLATX"], PTX=not self.hip and _runs_ptx(),
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
        """Compile the persistent launch this layer would run (Triton's or FlyDSL's cache),
        without running it: the benchmarks compile their sweep's variants this way in
        parallel processes on the device host's cores, so the timed runs compile nothing,
        and the TP warm-up compiles every rank's launches before any waits on a peer."""
        args, meta = self.launch_args(w, attn_out, bank, nvb, prefix, out, layer=layer)
        if self.impl == "flydsl":
            from sgl_k3_mono.k2.flydsl.launch import compile_fly

            compile_fly(args, meta, grid=self.plan.grid)
            return
        from sgl_k3_mono.k2.triton.kernel import k2_kernel

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
        from sgl_k3_mono.k2.triton.frame import PHASES

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
