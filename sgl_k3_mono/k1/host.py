"""K1's host side, shared by every ISA: the plan, the weight views, the per-plan scratch
and synchronisation buffers, and `run_k1`.

- `K1Plan` (frozen): what one compiled launch is specialised on: rows M, mode, TP/rank,
  ISA, the per-rank dims and the grid (one program per SM, never more than can be
  co-resident), plus the tile choices the Triton code asks for.
- `K1Views`: the tensors the launch reads, as VIEWS of what SGLang holds (or of a
  reference `K1LocalWeights`). No copy anywhere: `_bfa_w` is read as two row views
  (f_a, b) so its zero pad rows are not even read; the conv weight [3P, 1, K] and
  A_log [1, 1, h, 1] are reshaped views. Bytes copied: 0.
- `K1Scratch`: buffers allocated once per plan (h, mix, proj, pre-norm o, the
  last-arriver counters, the grid-barrier sync words) and the pinned error record.
- `K1IO`: the per-call tensors, SGLang's own: the residual stream, the attn-res bank,
  the state pools (conv [slots, K-1, 3P] bf16, SSM [slots, h, V, K] fp32, any slot
  pitch), the slot indices, SGLang's verify scratch, and the caller's output tensors.
- `run_k1(plan, views, io, impl=...)`: writes the outputs in place: `out` [M, P] bf16,
  the state pools (decode) or the verify scratch (verify), bank row nvb (block-write
  layers) or `residual` (else).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

import torch

from sgl_k3_mono.k1.reference import MAX_ROWS, MODES, KDAState, SeamInput, VerifyBuffers, k1_reference
from sgl_k3_mono.k1.weights import K1LocalWeights
from sgl_k3_mono.reference.attn_res import ISAS, SeamWeights
from sgl_k3_mono.runtime.failure import ErrorRecord, Stall, deadline_ns

IMPLS = ("triton", "reference", "flydsl")
"""flydsl: the FlyDSL K1 (k1/flydsl/, gfx950, the default there: sgl_k3_mono.kernels.choose),
compile-checked only, never executed; run_k1 refuses it off a HIP device.
SGL_K3_MONO_GFX950_IMPL=triton runs the Triton K1 instead."""
DEFAULT_DEADLINE_S = float(os.environ.get("SGL_K3_MONO_DEADLINE_S", "10"))
"""How long a wait inside the launch may take before the process is stopped."""
INTERPRET_GRID = 4
"""Programs per launch under Triton's CPU interpreter (small, but more than one, so the
tile loops and the last-arriver counters are exercised)."""


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def _next_pow2(n: int) -> int:
    return 1 << (max(1, n) - 1).bit_length()


def device_grid(device: torch.device | str | None = None) -> int:
    """One program per SM (132 on the H200); the interpreter's small grid on the CPU."""
    if os.environ.get("TRITON_INTERPRET") == "1" or not torch.cuda.is_available():
        return INTERPRET_GRID
    dev = torch.device(device) if device is not None else torch.device("cuda", torch.cuda.current_device())
    return torch.cuda.get_device_properties(dev).multi_processor_count


def default_tiles(mode: str, rows: int, hip: Optional[bool] = None) -> dict:
    """K1Plan's defaults that depend on the GPU and the step's shape. An AMD GPU: a shallower
    pipeline (CDNA has 160 KB of LDS), no g_last (FlyDSL has none). sm_90: g_last in verify
    from 2 rows, where the H100 timed it 0.4-2.4 us a launch faster at 2-7 rows and no
    slower at 8; in decode it gained nothing at 1 and 2 rows and lost 3.6 us at 4
    (docs/evidence/k1-sm90.md, forty-fifth session)."""
    if hip if hip is not None else torch.version.hip is not None:
        return dict(num_stages=2, g_last=False)
    return dict(g_last=mode == "verify" and rows >= 2)


def _row_tile(rows: tuple[int, ...], grid: int, heights=(64, 48, 32, 16)) -> int:
    """Rows per in-projection tile: the fewest rounds of tiles over the grid, weighted by
    tile height (132 tiles of 48 rows at TP 8 fill the H200 exactly; 64-row tiles would
    leave 33 SMs idle). Ties go to the taller tile (fewer, longer weight streams)."""
    best = None
    for eff in heights:
        tiles = sum(-(-r // eff) for r in rows)
        cost = -(-tiles // grid) * eff
        if best is None or cost < best[0]:
            best = (cost, eff)
    return best[1]


@dataclass(frozen=True)
class K1Plan:
    """One K1 launch's specialisation (one compiled kernel per plan)."""

    rows: int
    """M: requests (decode) or tokens of the one request (verify), 1..8."""
    mode: str
    """"decode" or "verify"."""
    hidden: int
    """H."""
    heads: int
    """h_l: this rank's KDA heads."""
    head_dim: int
    """D (128)."""
    conv_width: int
    """K of the causal conv (4)."""
    lower_bound: Optional[float]
    """Safe-gate lower bound (-5.0 for K3); None: unbounded gate."""
    bank_rows: int
    """NB: rows the attn-res bank is allocated with (8 for K3)."""
    eps: float = 1e-5
    """rms_norm_eps of the seam norms."""
    tp: int = 1
    rank: int = 0
    isa: str = "sm_90"
    """Seam rounding: "sm_90" rounds the mix to bf16 before the input norm (SGLang's
    Triton fallback); "gfx950" keeps it fp32 (SGLang's HIP kernel)."""
    grid: int = 132
    """Programs of the launch: one per SM, all co-resident."""
    block_k: int = 128
    """In-projection K step (weights [BN, block_k] a pipeline stage)."""
    num_stages: int = 4
    """In-projection pipeline depth."""
    num_warps: int = 4
    seam_split: bool = True
    """Spread each row's seam over several programs (one H-slice each; kernel.py's split
    seam) where M * slices fits the grid; False: one program walks each row."""
    prefetch: int = 0
    """Bytes of each in-projection weight row of a program's first tile asked into L2 as
    the launch starts, while the seam keeps HBM idle (sm_90 PTX; 0: none). Fitted to
    whole 16-byte pieces, one a thread, within the row."""
    carve: bool = False
    """Fit the compiled launch's shared-memory carveout to its block, so L1 keeps the rest
    of the SM (runtime/triton_smem.fit_carveout; sm_90, CUDA only). Off: K2 gained 1-5 us
    with it, K1 nothing beyond noise (seventeenth session, docs/evidence/k1-sm90.md)."""
    l2_next: bool = False
    """Ask L2 for the call's `K1IO.l2_next` rows during the KDA phase (sm_90 PTX; the
    persistent launch only; a call without them asks for nothing). Off until `bench step`
    has timed it (its "L2 hand-off" column); the GPU test holds it bitwise harmless."""
    g_last: bool = False
    """GL (on sm_90 the default in verify from 2 rows: `default_tiles`): stream the output
    gate's rows (a quarter of the in-projection's bytes, read only by the gated norm at the
    phase's end) while the recurrence runs, instead of before it.
    The in-projection phase then covers q | k | v | f_a | b over the whole grid; after it,
    programs 0..kda_programs-1 run the recurrence (fewer V splits: `v_split`) and the rest
    stream the gate, counted on the sync buffer's TALLY word, which each head's gated norm
    waits for (bounded). The persistent launch only; phase by phase the gate's tiles end
    the in-projection phase."""
    block_k_g: int = 256
    """GL: the gate tiles' K step (fewer programs stream them, so more bytes a stage)."""

    def __post_init__(self):
        _need(1 <= self.rows <= MAX_ROWS, f"K1Plan: rows {self.rows} outside 1..{MAX_ROWS}")
        _need(self.mode in MODES, f"K1Plan: mode {self.mode!r}; expected one of {MODES}")
        _need(self.isa in ISAS, f"K1Plan: isa {self.isa!r}; expected one of {ISAS}")
        _need(self.head_dim in (16, 32, 64, 128, 256), f"K1Plan: head_dim {self.head_dim} is not a power of 2 >= 16")
        _need(self.hidden % self.block_k == 0, f"K1Plan: hidden {self.hidden} is not a multiple of block_k {self.block_k}")
        _need(self.grid >= 1, "K1Plan: grid must be >= 1")
        _need(0 <= self.rank < self.tp, f"K1Plan: rank {self.rank} outside 0..{self.tp - 1}")
        if self.g_last:
            _need(self.grid >= 2, "K1Plan: g_last needs a grid of 2 or more (the gate's programs)")
            _need(self.hidden % self.block_k_g == 0,
                  f"K1Plan: hidden {self.hidden} is not a multiple of block_k_g {self.block_k_g}")
            _need(not self.l2_next, "K1Plan: g_last and l2_next are exclusive (both use the KDA phase's HBM idle time)")

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def for_weights(cls, w: "K1Views | K1LocalWeights", rows: int, mode: str, *, bank_rows: int = 8,
                    eps: float = 1e-5, tp: int = 1, rank: int = 0, isa: str = "sm_90",
                    grid: Optional[int] = None, **tiles) -> "K1Plan":
        tiles = {**default_tiles(mode, rows), **tiles}
        return cls(rows=rows, mode=mode, hidden=w.qkvg.shape[1], heads=w.heads, head_dim=w.head_dim,
                   conv_width=w.conv.shape[1], lower_bound=w.lower_bound, bank_rows=bank_rows, eps=eps,
                   tp=tp, rank=rank, isa=isa, grid=grid if grid is not None else device_grid(), **tiles)

    @classmethod
    def from_dims(cls, dims: Any, rows: int, mode: str, *, rank: int = 0, isa: str = "sm_90",
                  grid: Optional[int] = None, **tiles) -> "K1Plan":
        """From a `K3Dims` (per-rank widths at dims.tp)."""
        tiles = {**default_tiles(mode, rows), **tiles}
        return cls(rows=rows, mode=mode, hidden=dims.hidden, heads=dims.kda_heads_local,
                   head_dim=dims.kda_head_dim, conv_width=dims.conv_width, lower_bound=dims.gate_lower_bound,
                   bank_rows=dims.bank_rows(), eps=dims.rms_eps, tp=dims.tp, rank=rank, isa=isa,
                   grid=grid if grid is not None else device_grid(), **tiles)

    # ---- derived sizes ------------------------------------------------------------------
    @property
    def proj(self) -> int:
        """P_l."""
        return self.heads * self.head_dim

    @property
    def proj_cols(self) -> int:
        """Columns of the in-projection scratch: q | k | v | g | f_a | b."""
        return 4 * self.proj + self.head_dim + self.heads

    @property
    def _in_proj_rows(self) -> tuple[int, int, int]:
        """Rows of the in-projection phase: qkvg's (its first 3P under g_last), f_a's, b's."""
        return ((3 if self.g_last else 4) * self.proj, self.head_dim, self.heads)

    @property
    def row_tile(self) -> int:
        """In-projection rows per tile (BN_EFF) and its power-of-2 register tile (BN).
        Under g_last any height from 16 to 64: its 4748 rows at TP 8 make 100 tiles of 48
        but 130 of 37."""
        heights = range(64, 15, -1) if self.g_last else (64, 48, 32, 16)
        return _row_tile(self._in_proj_rows, self.grid, heights)

    @property
    def in_proj_tiles(self) -> int:
        e = self.row_tile
        return sum(-(-r // e) for r in self._in_proj_rows)

    @property
    def v_split(self) -> int:
        """NV: programs sharing one head's V rows (its 64 KB of fp32 state at D=128), the
        most (up to 8) that keeps the items of the KDA phase within one round of the grid
        (under g_last within half of it, the rest streaming the gate)."""
        items = self.heads * (1 if self.mode == "verify" else self.rows)
        room = self.grid // 2 if self.g_last else self.grid
        nv = 8
        while nv > 1 and (items * nv > room or self.head_dim // nv < 16):
            nv //= 2
        return nv

    @property
    def kda_programs(self) -> int:
        """NKP: under g_last, the programs that run the recurrence's items (at most three
        quarters of the grid, and never all of it: the rest stream the gate); the whole grid
        otherwise."""
        if not self.g_last:
            return self.grid
        items = self.heads * (1 if self.mode == "verify" else self.rows) * self.v_split
        return max(1, min(items, self.grid - max(1, self.grid // 4)))

    @property
    def gate_tile(self) -> int:
        """BNG_EFF: under g_last, gate rows a tile: P over the gate's programs, at most 64."""
        return min(64, -(-self.proj // (self.grid - self.kda_programs))) if self.g_last else 16

    @property
    def v_block(self) -> int:
        """BV: state rows an item holds in registers at once ([BV, D] fp32)."""
        return min(self.head_dim // self.v_split, 32)

    @property
    def seam_slice(self) -> int:
        """BS: the split seam's slice width, the narrowest (256 or 512 columns) that gives
        every row's slices a program; 0 when none fits (or seam_split is off)."""
        from sgl_k3_mono.runtime.triton_seam import seam_slice

        return seam_slice(self.rows, self.hidden, self.grid) if self.seam_split else 0

    @property
    def prefetch_bytes(self) -> int:
        """`prefetch` as the kernel takes it: whole 16-byte pieces (BN rows over the
        program's threads), at most a row (H bf16)."""
        if self.prefetch <= 0:
            return 0
        piece = 16 * max(32 * self.num_warps // _next_pow2(self.row_tile), 1)
        return min(self.prefetch, 2 * self.hidden) // piece * piece

    def constexprs(self) -> dict:
        bn_eff = self.row_tile
        bs = self.seam_slice
        sp = -(-self.hidden // bs) if bs else 1
        return dict(
            H=self.hidden, HL=self.heads, D=self.head_dim, KW=self.conv_width,
            BLOCK_H=min(1024, _next_pow2(self.hidden)), NBP=_next_pow2(self.bank_rows + 1),
            ROUND_MIX=self.isa == "sm_90", SEAM_SPLIT=bs > 0, BS=bs or 512, SP=sp, SPP=_next_pow2(sp),
            BN=_next_pow2(bn_eff), BN_EFF=bn_eff, BK=self.block_k, NUM_STAGES=self.num_stages,
            PF=self.prefetch_bytes, NT=32 * self.num_warps,
            NV=self.v_split, BV=self.v_block, VERIFY=self.mode == "verify",
            HAS_LB=self.lower_bound is not None,
            LB=float(self.lower_bound) if self.lower_bound is not None else 0.0,
            GL=self.g_last, NKP=self.kda_programs, BNG=_next_pow2(self.gate_tile), BNG_EFF=self.gate_tile,
            BKG=self.block_k_g if self.g_last else self.block_k,
        )


@dataclass(frozen=True)
class K1Views:
    """The weights K1 reads, as views of the tensors SGLang (or the reference) holds."""

    qkvg: torch.Tensor
    """[4P, H] bf16: fused_qkvg_proj.weight."""
    f_a: torch.Tensor
    """[D, H] bf16: rows 0..D-1 of `_bfa_w` (or f_a_proj.weight)."""
    b: torch.Tensor
    """[h, H] bf16: rows D..D+h-1 of `_bfa_w` (or b_proj.weight)."""
    f_b: torch.Tensor
    """[P, D] bf16."""
    conv: torch.Tensor
    """[3P, K] fp32 (a view of qkv_conv1d.weight [3P, 1, K])."""
    a_log: torch.Tensor
    """[h] fp32."""
    dt_bias: torch.Tensor
    """[P] fp32."""
    o_norm: torch.Tensor
    """[D] bf16 (or fp32)."""
    seam: SeamWeights
    """self_attention_res_proj [1, H], self_attention_res_norm [H], input_layernorm [H]."""
    heads: int
    head_dim: int
    lower_bound: Optional[float]

    def __post_init__(self):
        p, d, h = self.heads * self.head_dim, self.head_dim, self.heads
        hidden = self.qkvg.shape[1]
        for name, t, shape in (("qkvg", self.qkvg, (4 * p, hidden)), ("f_a", self.f_a, (d, hidden)),
                               ("b", self.b, (h, hidden)), ("f_b", self.f_b, (p, d))):
            _need(tuple(t.shape) == shape, f"K1Views: {name} is {tuple(t.shape)}, expected {shape}")
            _need(t.dtype == torch.bfloat16, f"K1Views: {name} must be bf16, got {t.dtype}")
            _need(t.stride(1) == 1, f"K1Views: {name} rows must be contiguous (stride {t.stride()})")
        _need(self.conv.dim() == 2 and self.conv.shape[0] == 3 * p and self.conv.dtype == torch.float32,
              f"K1Views: conv weight must be fp32 [{3 * p}, K], got {tuple(self.conv.shape)} {self.conv.dtype}")
        _need(self.conv.stride(1) == 1, "K1Views: conv weight taps must be contiguous")
        for name, t, n in (("a_log", self.a_log, h), ("dt_bias", self.dt_bias, p), ("o_norm", self.o_norm, d),
                           ("seam.proj", self.seam.proj, hidden), ("seam.score_norm", self.seam.score_norm, hidden),
                           ("seam.out_norm", self.seam.out_norm, hidden)):
            _need(t.numel() == n and t.is_contiguous(), f"K1Views: {name} must be {n} contiguous elements, got "
                  f"{tuple(t.shape)} strides {t.stride()}")
        for name, t in (("a_log", self.a_log), ("dt_bias", self.dt_bias)):
            _need(t.dtype == torch.float32, f"K1Views: {name} must be fp32, got {t.dtype}")

    @property
    def proj(self) -> int:
        return self.heads * self.head_dim

    @classmethod
    def from_local(cls, lw: K1LocalWeights) -> "K1Views":
        """Views of a reference shard (`K1Weights.shard` or `K1LocalWeights.from_sglang`)."""
        d, h = lw.head_dim, lw.heads
        return cls(qkvg=lw.qkvg, f_a=lw.bfa[:d], b=lw.bfa[d : d + h], f_b=lw.f_b, conv=lw.conv,
                   a_log=lw.a_log.reshape(-1), dt_bias=lw.dt_bias, o_norm=lw.o_norm, seam=lw.seam,
                   heads=h, head_dim=d, lower_bound=lw.lower_bound)

    @classmethod
    def from_sglang(cls, layer: Any) -> "K1Views":
        """What a SGLang `KimiK3DecoderLayer` with a KDA self_attn holds on this rank."""
        attn = layer.self_attn
        _need(hasattr(attn, "fused_qkvg_proj"), "K1Views.from_sglang: not a full-rank-gate KDA layer")
        d, h = attn.head_dim, attn.local_num_heads
        bfa = getattr(attn, "_bfa_w", None)
        if bfa is not None:
            f_a, b = bfa[:d], bfa[d : d + h]
        else:
            f_a, b = attn.f_a_proj.weight, attn.b_proj.weight
        f_b = getattr(attn, "_bfa_f_b_w", None)
        f_b = f_b if f_b is not None else attn.f_b_proj.weight
        conv = attn.qkv_conv1d.weight
        return cls(
            qkvg=attn.fused_qkvg_proj.weight.detach(), f_a=f_a.detach(), b=b.detach(), f_b=f_b.detach(),
            conv=conv.detach().view(conv.shape[0], conv.shape[-1]), a_log=attn.A_log.detach().view(-1),
            dt_bias=attn.dt_bias.detach(), o_norm=attn.o_norm.weight.detach(),
            seam=SeamWeights(proj=layer.self_attention_res_proj.weight.detach(),
                             score_norm=layer.self_attention_res_norm.weight.detach(),
                             out_norm=layer.input_layernorm.weight.detach()),
            heads=h, head_dim=d, lower_bound=attn.attn.lower_bound)

    def to_local(self) -> K1LocalWeights:
        """The reference's form (the one copy: `_bfa_w` rebuilt with its pad; oracle only)."""
        bfa = torch.cat([self.f_a, self.b], 0)
        bfa = torch.cat([bfa, bfa.new_zeros((-bfa.shape[0]) % 8, bfa.shape[1])], 0)
        return K1LocalWeights(qkvg=self.qkvg, bfa=bfa, f_b=self.f_b, conv=self.conv, a_log=self.a_log,
                              dt_bias=self.dt_bias, o_norm=self.o_norm, seam=self.seam, heads=self.heads,
                              head_dim=self.head_dim, lower_bound=self.lower_bound)


@dataclass
class K1Scratch:
    """Per-plan buffers, reused by every KDA layer's launch (launches are stream-ordered)."""

    h: torch.Tensor
    """[M, H] bf16: the seam's normed input."""
    mix: torch.Tensor
    """[M, H] fp32: the seam's mix before the norm."""
    proj: torch.Tensor
    """[M, 4P + D + h] bf16: q | k | v | g | f_a | b."""
    opre: torch.Tensor
    """[M, P] bf16: o before the gated norm."""
    counters: torch.Tensor
    """[M * h] int32: V-slices done per (row, head); the last one resets it to 0."""
    seam_parts: torch.Tensor
    """[M, SP, seam_part_width(NBP)] fp32: the split seam's per-slice partial sums."""
    seam_counters: torch.Tensor
    """[M] int32: the split seam's row-local arrivals (reset to 0 after the grid barrier)."""
    sync: torch.Tensor
    """int32[4]: the grid barrier's ARRIVE, DEPART, EPOCH (runtime/triton_sync.py)."""
    record: ErrorRecord
    """Where an expired wait reports (rank, layer, launch, phase)."""

    @classmethod
    def allocate(cls, plan: K1Plan, device, record: Optional[ErrorRecord] = None) -> "K1Scratch":
        from sgl_k3_mono.k1.triton.kernel import PHASES
        from sgl_k3_mono.runtime.triton_seam import seam_part_width

        m = plan.rows
        cx = plan.constexprs()
        bf, f32 = dict(dtype=torch.bfloat16, device=device), dict(dtype=torch.float32, device=device)
        nan = float("nan")  # poisoned: a read of an unwritten element shows up in the output
        return cls(
            h=torch.full((m, plan.hidden), nan, **bf), mix=torch.full((m, plan.hidden), nan, **f32),
            proj=torch.full((m, plan.proj_cols), nan, **bf), opre=torch.full((m, plan.proj), nan, **bf),
            counters=torch.zeros(m * plan.heads, dtype=torch.int32, device=device),
            seam_parts=torch.full((m, cx["SP"], seam_part_width(cx["NBP"])), nan, **f32),
            seam_counters=torch.zeros(m, dtype=torch.int32, device=device),
            sync=torch.zeros(4, dtype=torch.int32, device=device),
            record=record if record is not None else ErrorRecord({"k1": PHASES}),
        )

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.h, self.mix, self.proj, self.opre, self.counters,
                                                           self.seam_parts, self.seam_counters, self.sync))


@dataclass
class K1IO:
    """One call's tensors (SGLang's own; nothing is copied)."""

    prefix: torch.Tensor
    """[M, H] bf16: the residual stream arriving at the seam."""
    bank: torch.Tensor
    """[M, NB, H] bf16: the attn-res bank (row nvb is written on a block-write layer)."""
    nvb: int
    write: bool
    """Block-write layer: bank the prefix (after the add) and restart the residual."""
    slots: torch.Tensor
    """int32/int64: [M] state slots (decode; < 0 or pad_slot: padded row) or [1] (verify)."""
    conv_pool: torch.Tensor
    """[slots, K-1, 3P] bf16 (channels contiguous; any slot/row pitch)."""
    ssm_pool: torch.Tensor
    """[slots, h, V, K] fp32 (K contiguous; any slot/head/V pitch)."""
    out: torch.Tensor
    """[M, P] bf16 output (rows contiguous)."""
    contribution: Optional[torch.Tensor] = None
    """[M, H] bf16 pending plain add (layer 1), else None."""
    residual: Optional[torch.Tensor] = None
    """[M, H] bf16: receives the prefix after the add on a non-write layer (may be `prefix`
    itself: in place). None: not written (only allowed without a contribution)."""
    verify_conv: Optional[torch.Tensor] = None
    """[rows, T, K-1, 3P] bf16: SGLang's intermediate_conv_window (verify)."""
    verify_ssm: Optional[torch.Tensor] = None
    """[rows, T, h, V, K] fp32: SGLang's intermediate_ssm (verify)."""
    verify_index: int = 0
    pad_slot: Optional[int] = None
    """A slot index that also marks padding (gfx950's 0), besides < 0."""
    l2_next: Optional[torch.Tensor] = None
    """A 2-D tensor the next launch reads first (the layer's o_proj weight, K2's first
    phase): with the plan's `l2_next`, K1 asks L2 for it whole as its KDA phase starts,
    while the recurrence leaves HBM idle. A hint: nothing waits on it, nothing changes."""


def _check_io(plan: K1Plan, io: K1IO) -> None:
    m, hd, p, h, d, kw = plan.rows, plan.hidden, plan.proj, plan.heads, plan.head_dim, plan.conv_width
    for name, t in (("prefix", io.prefix), ("contribution", io.contribution), ("residual", io.residual)):
        if t is not None:
            _need(tuple(t.shape) == (m, hd) and t.dtype == torch.bfloat16 and t.stride(1) == 1,
                  f"run_k1: {name} must be bf16 [{m}, {hd}] with contiguous rows, got {tuple(t.shape)} {t.dtype}")
    _need(io.bank.dim() == 3 and io.bank.shape[0] == m and io.bank.shape[2] == hd and io.bank.stride(2) == 1
          and io.bank.dtype == torch.bfloat16, f"run_k1: bank must be bf16 [{m}, NB, {hd}], got {tuple(io.bank.shape)}")
    _need(io.bank.shape[1] <= plan.bank_rows, f"run_k1: bank has {io.bank.shape[1]} rows, plan {plan.bank_rows}")
    _need(0 <= io.nvb <= io.bank.shape[1] - (1 if io.write else 0), f"run_k1: nvb={io.nvb} out of the bank's range")
    _need(io.write or io.contribution is None or io.residual is not None,
          "run_k1: a contribution on a non-write layer needs `residual` (the updated prefix goes there)")
    _need(tuple(io.out.shape) == (m, p) and io.out.dtype == torch.bfloat16 and io.out.stride(1) == 1,
          f"run_k1: out must be bf16 [{m}, {p}], got {tuple(io.out.shape)} {io.out.dtype}")
    _need(io.conv_pool.dim() == 3 and tuple(io.conv_pool.shape[1:]) == (kw - 1, 3 * p)
          and io.conv_pool.dtype == torch.bfloat16 and io.conv_pool.stride(2) == 1,
          f"run_k1: conv pool must be bf16 [slots, {kw - 1}, {3 * p}] with contiguous channels")
    _need(io.ssm_pool.dim() == 4 and tuple(io.ssm_pool.shape[1:]) == (h, d, d)
          and io.ssm_pool.dtype == torch.float32 and io.ssm_pool.stride(3) == 1,
          f"run_k1: ssm pool must be fp32 [slots, {h}, {d}, {d}] with K contiguous")
    _need(io.slots.dim() == 1 and not io.slots.is_floating_point(), "run_k1: slots must be a 1-D integer tensor")
    if plan.mode == "decode":
        _need(io.slots.numel() == m, f"run_k1: decode needs {m} slots, got {io.slots.numel()}")
    else:
        _need(io.slots.numel() == 1, "run_k1: verify is one request: one slot")
        vc, vs = io.verify_conv, io.verify_ssm
        _need(vc is not None and vs is not None, "run_k1: verify needs verify_conv and verify_ssm")
        _need(vc.dim() == 4 and tuple(vc.shape[2:]) == (kw - 1, 3 * p) and vc.dtype == torch.bfloat16
              and vc.stride(3) == 1, "run_k1: verify_conv must be bf16 [rows, T, K-1, 3P]")
        _need(vs.dim() == 5 and tuple(vs.shape[2:]) == (h, d, d) and vs.dtype == torch.float32
              and vs.stride(4) == 1, "run_k1: verify_ssm must be fp32 [rows, T, h, V, K]")
        _need(m <= vs.shape[1] and m <= vc.shape[1], "run_k1: more tokens than verify steps")
        _need(0 <= io.verify_index < vs.shape[0], "run_k1: verify_index out of range")


def launch_args(plan: K1Plan, views: K1Views, io: K1IO, scratch: K1Scratch, *, layer: int,
                deadline_s: float) -> tuple[tuple, dict]:
    """The kernel's positional arguments and its constexprs / launch options (no PHASE)."""
    from sgl_k3_mono.k1.triton.kernel import PHASES

    cx = plan.constexprs()
    sc = scratch
    verify = plan.mode == "verify"
    vconv = io.verify_conv if verify else sc.proj
    vssm = io.verify_ssm if verify else sc.mix
    vc_st = (io.verify_conv.stride(0), io.verify_conv.stride(1), io.verify_conv.stride(2)) if verify else (0, 0, 0)
    vs_st = tuple(io.verify_ssm.stride()[:4]) if verify else (0, 0, 0, 0)
    contrib = io.contribution if io.contribution is not None else io.prefix
    write_resid = (not io.write) and io.residual is not None and (
        io.contribution is not None or io.residual.data_ptr() != io.prefix.data_ptr())
    resid = io.residual if write_resid else io.prefix
    stall = Stall.from_env()
    stall_phase = stall.phase_index(plan.rank, layer, "k1", PHASES) if stall is not None else -1
    nx_args, cx["NXR"], cx["NXB"] = _l2_next(plan, io.l2_next, sc)
    args = (
        io.prefix, io.prefix.stride(0), contrib, contrib.stride(0), io.bank, io.bank.stride(0), io.bank.stride(1),
        resid, resid.stride(0),
        views.seam.proj, views.seam.score_norm, views.seam.out_norm, io.nvb, plan.eps,
        views.qkvg, views.qkvg.stride(0), views.f_a, views.f_a.stride(0), views.b, views.b.stride(0),
        views.f_b, views.f_b.stride(0), views.conv, views.conv.stride(0), views.a_log, views.dt_bias,
        views.o_norm, io.slots, -1 if io.pad_slot is None else int(io.pad_slot),
        io.conv_pool, io.conv_pool.stride(0), io.conv_pool.stride(1),
        io.ssm_pool, io.ssm_pool.stride(0), io.ssm_pool.stride(1), io.ssm_pool.stride(2),
        vconv, *vc_st, vssm, *vs_st, int(io.verify_index),
        io.out, io.out.stride(0),
        sc.h, sc.mix, sc.proj, sc.opre, sc.counters, sc.seam_parts, sc.seam_counters,
        sc.sync, sc.record.address, deadline_ns(deadline_s), stall_phase, plan.rank, layer,
        plan.rows, *nx_args,
    )
    flags = dict(HAS_CONTRIB=io.contribution is not None, WRITE_BANK=bool(io.write), WRITE_RESID=write_resid)
    if cx["PF"] and (torch.version.hip is not None or os.environ.get("TRITON_INTERPRET") == "1" or any(
            t.data_ptr() % 16 or t.stride(0) % 8 for t in (views.qkvg, views.f_a, views.b))):
        cx["PF"] = 0  # the bulk prefetch is sm_90 PTX on 16-byte rows
    cx["CARVE"] = plan.carve and io.out.is_cuda and torch.version.hip is None and os.environ.get(
        "TRITON_INTERPRET") != "1"
    return args, dict(**cx, **flags, num_warps=plan.num_warps)


def _l2_next(plan: K1Plan, t: Optional[torch.Tensor], sc: K1Scratch) -> tuple[tuple, int, int]:
    """The kernel's (nx_ptr, nx_stride, nx_rows, nx_per) and its NXR / NXB constexprs: each
    program asks L2 for nx_per rows of `t` (NXR, a power of two, in registers) and NXB
    bytes of each (the row cut into whole 16-byte pieces, one a thread). (placeholders, 1,
    0): nothing asked, where there is nothing to ask for or no PTX to ask with."""
    none = (sc.sync, 0, 0, 0), 1, 0
    if (t is None or not plan.l2_next or t.dim() != 2 or t.dtype != torch.bfloat16 or not t.is_cuda
            or torch.version.hip is not None
            or os.environ.get("TRITON_INTERPRET") == "1"):
        return none
    row_bytes, stride_bytes = t.shape[1] * t.element_size(), t.stride(0) * t.element_size()
    if t.stride(1) != 1 or t.data_ptr() % 16 or stride_bytes % 16:
        return none
    per = -(-t.shape[0] // plan.grid)
    r = _next_pow2(per)
    pieces = max(32 * plan.num_warps // r, 1)
    nxb = row_bytes // (16 * pieces) * (16 * pieces)
    if nxb == 0:
        return none
    return (t, t.stride(0), t.shape[0], per), r, nxb


def _launch_triton(plan: K1Plan, views: K1Views, io: K1IO, scratch: K1Scratch, *, phases, layer: int,
                   deadline_s: float) -> None:
    from sgl_k3_mono.k1.triton.kernel import k1_kernel
    from sgl_k3_mono.runtime.triton_seam import SEAM_STEPS

    args, meta = launch_args(plan, views, io, scratch, layer=layer, deadline_s=deadline_s)
    if phases == (-1,) and io.out.is_cuda:
        scratch.record.watch()
    for phase in phases:
        # the split seam runs as SEAM_STEPS launches of phase 0 when phased (its row waits
        # exist in the persistent launch only)
        for step in (range(SEAM_STEPS) if phase == 0 and meta["SEAM_SPLIT"] else (0,)):
            if meta["CARVE"]:  # a function attribute: set once a compiled kernel, before its first launch
                from sgl_k3_mono.runtime.triton_smem import fit_carveout

                fit_carveout(k1_kernel.warmup(*args, grid=(plan.grid,), **meta, PHASE=phase, SEAM_STEP=step))
            k1_kernel[(plan.grid,)](*args, **meta, PHASE=phase, SEAM_STEP=step)


def compile_k1(plan: K1Plan, views: K1Views, io: K1IO, scratch: K1Scratch, *, layer: int = 0) -> None:
    """Compile the persistent Triton launch run_k1 would run for this layer into Triton's
    cache, without running it (the benchmarks' parallel pre-compile)."""
    from sgl_k3_mono.k1.triton.kernel import k1_kernel

    args, meta = launch_args(plan, views, io, scratch, layer=layer, deadline_s=DEFAULT_DEADLINE_S)
    k1_kernel.warmup(*args, grid=(plan.grid,), **meta, PHASE=-1, SEAM_STEP=0)


def run_k1(plan: K1Plan, views: K1Views, io: K1IO, *, impl: str = "triton", scratch: Optional[K1Scratch] = None,
           phased: bool = False, phase: Optional[int] = None, layer: int = 0,
           deadline_s: float = DEFAULT_DEADLINE_S) -> None:
    """K1 for one KDA layer on this rank; every output is written in place.

    impl "triton": the persistent launch (PHASE=-1), or with `phased` the phases as
    consecutive launches (the CPU interpreter's way; `phase` runs one phase alone, for
    timing). `scratch` must be the plan's (allocated once: K1Scratch.allocate); None
    allocates one (not for CUDA graphs). impl "reference": the oracle, written into the
    same tensors. `layer` names the layer in failure messages and selects fault injection
    (SGL_K3_MONO_STALL); `deadline_s` bounds every wait inside the launch.
    """
    _need(impl in IMPLS, f"run_k1: impl {impl!r}; expected one of {IMPLS}")
    _need(views.heads == plan.heads and views.head_dim == plan.head_dim and views.qkvg.shape[1] == plan.hidden,
          "run_k1: the views do not match the plan")
    _check_io(plan, io)
    if impl == "reference":
        _run_reference(plan, views, io)
        return
    if scratch is None:
        scratch = K1Scratch.allocate(plan, io.out.device)
    if phase is not None:
        phases = (phase,)
    else:
        phases = (0, 1, 2) if phased else (-1,)
    if impl == "flydsl":
        _launch_flydsl(plan, views, io, scratch, phases=phases, layer=layer, deadline_s=deadline_s)
        return
    _launch_triton(plan, views, io, scratch, phases=phases, layer=layer, deadline_s=deadline_s)


def _launch_flydsl(plan: K1Plan, views: K1Views, io: K1IO, scratch: K1Scratch, *, phases, layer: int,
                   deadline_s: float) -> None:
    """The FlyDSL K1 (k1/flydsl/, gfx950): the same launch_args, the plan's grid."""
    _need(not plan.g_last, "run_k1: impl 'flydsl' has no g_last (the gate streamed during the recurrence)")
    _need(io.out.is_cuda and torch.version.hip is not None,
          "run_k1: impl 'flydsl' runs on a HIP (gfx950) device only; the tensors are on "
          f"{io.out.device} with torch.version.hip={torch.version.hip}")
    from sgl_k3_mono.k1.flydsl.launch import run_fly

    args, meta = launch_args(plan, views, io, scratch, layer=layer, deadline_s=deadline_s)
    if phases == (-1,):
        scratch.record.watch()
    run_fly(args, meta, phases=phases, grid=plan.grid)


def _run_reference(plan: K1Plan, views: K1Views, io: K1IO) -> None:
    cpu = lambda t: None if t is None else t.detach().cpu()  # noqa: E731
    lw = views.to_local()
    lw = K1LocalWeights(**{f: (cpu(getattr(lw, f)) if isinstance(getattr(lw, f), torch.Tensor) else getattr(lw, f))
                           for f in lw.__dataclass_fields__ if f != "seam"},
                        seam=SeamWeights(cpu(lw.seam.proj), cpu(lw.seam.score_norm), cpu(lw.seam.out_norm)))
    verify = None
    if plan.mode == "verify":
        verify = VerifyBuffers(cpu(io.verify_conv), cpu(io.verify_ssm), io.verify_index)
    ref = k1_reference(lw, SeamInput(cpu(io.prefix), cpu(io.contribution), cpu(io.bank), io.nvb, io.write),
                       KDAState(cpu(io.conv_pool), cpu(io.ssm_pool)), cpu(io.slots), mode=plan.mode,
                       tp=plan.tp, rank=plan.rank, rms_eps=plan.eps, isa=plan.isa, pad_slot=io.pad_slot,
                       verify=verify)
    io.out.copy_(ref.out)
    if plan.mode == "decode":
        io.conv_pool.copy_(ref.state.conv)
        io.ssm_pool.copy_(ref.state.ssm)
    else:
        io.verify_conv.copy_(ref.verify.conv)
        io.verify_ssm.copy_(ref.verify.ssm)
    if io.write:
        io.bank.copy_(ref.seam.bank)
    elif io.residual is not None:
        io.residual.copy_(ref.seam.prefix)
