"""K2's host-side tile and alignment choices, on the CPU (no launch): what the kernel is
told it may assume must hold for the tensors it is handed."""

from __future__ import annotations

import dataclasses

import pytest

from sgl_k3_mono.k2 import host, tiles


@pytest.mark.parametrize("rows,tp", [(1, 1), (8, 1), (4, 2)])
def test_scale_align_divides_the_scale_row_strides(rows, tp):
    """The kernel rounds the scale row stride down to a multiple of SCALE_ALIGN so the
    compiler can vectorise; that is the identity only if SCALE_ALIGN divides the stride.
    At a TP-8 rank the down projection's scale rows are 12 bytes: 4, not 16."""
    from sgl_k3_mono.compile_check import _k2_variant

    kernel, args, meta = _k2_variant("mxfp4", "sm_90", rows, "sm_90", tp=tp)
    a = dict(zip(kernel.arg_names, args))
    assert (a["ssc13_n"], a["ssc2_n"]) == (112, 12)
    assert meta["SCALE_ALIGN"] == 4


def test_bf16_experts_take_no_scale_alignment():
    from sgl_k3_mono.compile_check import _k2_variant

    assert _k2_variant("bf16", "sm_90", 2, "sm_90")[2]["SCALE_ALIGN"] == 1


def test_pow2_divisor():
    assert tiles._pow2_divisor(12, 112) == 4
    assert tiles._pow2_divisor(48, 16) == 16
    assert tiles._pow2_divisor(7) == 1
    assert tiles._pow2_divisor(64, cap=8) == 8


def test_default_tiles_by_rows_and_format():
    """1 row: GEMV everywhere (8 warps), bf16 with FLATD, o_proj's own tile, FLATX in four
    stages and experts_down's shared-down loop in K steps of 128 over six stages (MXFP4 takes
    mma_fp4 on sm_90, its own block); bf16 with FLATX at every row count; from 2 rows
    the tensor cores, MXFP4 experts through dot_scaled with 4 warps, bf16 with 8
    (docs/evidence/k2-sm90.md)."""
    one = tiles.default_tiles(1, mxfp4=True)
    assert one["DENSE_GEMV"] and one["EXPERT_GEMV"] and one["num_warps"] == 8
    assert "FLATD" not in one and "BNO" not in one
    one_bf16 = tiles.default_tiles(1, mxfp4=False)
    assert one_bf16["DENSE_GEMV"] and one_bf16["EXPERT_GEMV"] and one_bf16["num_warps"] == 8
    assert (one_bf16["FLATD"], one_bf16["BNO"], one_bf16["BKO"]) == (1, 64, 128)
    assert (one_bf16["FLATX"], one_bf16["STAGES"]) == (1, 4) and one.get("FLATX", 0) == 0 and one["STAGES"] == 3
    assert (one_bf16["BKS"], one_bf16["STXD"]) == (128, 6) and "BKS" not in one and "STXD" not in one
    assert all("BKS" not in tiles.default_tiles(r, mxfp4=False) for r in range(2, 9))
    assert all(tiles.default_tiles(r, mxfp4=False)["FLATX"] == 1 for r in range(2, 9))
    assert all(tiles.default_tiles(r, mxfp4=True).get("FLATX", 0) == 0 for r in range(1, 9))
    for rows in range(2, 9):
        t = tiles.default_tiles(rows, mxfp4=True)
        assert not t["DENSE_GEMV"] and not t["EXPERT_GEMV"] and t["num_warps"] == 4, (rows, t)
        assert tiles.default_tiles(rows, mxfp4=False)["num_warps"] == 8


@pytest.mark.parametrize("latent,inter", [(3584, 384), (96, 48), (256, 64), (64, 32)])
def test_fit_tiles_k_steps_are_powers_of_two_within_the_width(latent, inter):
    """Tensor-core expert K steps: a power of two, at least 64 (two scale groups), at most
    the width rounded down to a power of two (masks cover a ragged tail)."""
    b = tiles.fit_tiles(tiles.k2_tiles(8, dense_gemv=False, expert_gemv=False, num_warps=4), hidden=7168,
                       shared2=1536, experts=896, latent=latent, inter=inter)
    for key, width in (("BKX", latent), ("BKD", inter)):
        k = b[key]
        assert k & (k - 1) == 0 and k >= 64, (key, k)
        assert k <= max(64, tiles._pow2_floor(width)), (key, k, width)


def test_mma_experts_tiles_at_every_row_count():
    """MXFP4 experts through mma_fp4 (the plan allows it): 8 warps at every M, a warp's two
    16-row tiles (BI = 16 x warps gate/up rows, BL = 32 x warps), experts_up's K split
    by ksx_choice (KSX -1) at 1 and 4 rows, where it measured faster, else not split; no
    GEMV experts; the dense phases keep their per-M choice."""
    for rows in range(1, 9):
        t = tiles.default_tiles(rows, mxfp4=True, mma=True)
        assert t["MMA"] == 1 and not t["EXPERT_GEMV"] and t["num_warps"] == 8, (rows, t)
        assert t["KSX"] == (-1 if rows in (1, 4) else 1), (rows, t)
        assert (t["BI"], t["BL"]) == (128, 256)
        assert bool(t["DENSE_GEMV"]) == (rows == 1)
        assert _plan(rows=rows).mma_experts, rows


def test_mma_tiles_dense_k_step_and_down_ring_by_rows():
    """On the mma path the dense phases step BK 256 at every row count, and only at 2 rows
    do the experts stream through their rings (XRS 2, XRSD 2): BK 256's larger pipeline and
    the ring together leave experts_up's register loop too little L1
    (docs/evidence/k2-sm90.md, eighteenth and nineteenth sessions)."""
    for rows, bk, xrs, xrsd in ((2, 256, 2, 2), (3, 256, 0, 0), (4, 256, 0, 0), (5, 256, 0, 0), (8, 256, 0, 0)):
        t = tiles.default_tiles(rows, mxfp4=True, mma=True)
        assert (t["BK"], t["XRS"], t["XRSD"], t["CARVE"]) == (bk, xrs, xrsd, 1), (rows, t)


def test_norm_chunk_is_about_32_elements_a_thread():
    """latent_up's RMSNorm passes step BKN: 32 elements a thread of the [rows, BKN] chunk,
    never under the dense K step, never past the latent width's power of two."""
    assert tiles.norm_chunk(16, 256, 3584, 128) == 512
    assert tiles.norm_chunk(1, 256, 3584, 512) == 4096  # one chunk at 1 row
    assert tiles.norm_chunk(8, 256, 3584, 512) == 1024
    assert tiles.norm_chunk(16, 128, 3584, 256) == 256  # the K step is the floor
    assert tiles.norm_chunk(16, 256, 128, 64) == 128  # a small latent: its own width


def test_fit_tiles_halves_a_k_split_the_widths_cannot_take():
    """A latent width that one group's whole loop steps cannot split 4 ways keeps mma_fp4
    with fewer groups instead of leaving the mma path."""
    t = {**tiles.k2_tiles(2, dense_gemv=False, expert_gemv=False, num_warps=8, mma=True), "KSX": 4}
    f = tiles.fit_tiles(t, hidden=7168, shared2=1536, experts=896, latent=768, inter=384, mma=True)
    assert (f["MMA"], f["KSX"], f["KUX"], f["BI"]) == (1, 2, 1, 64), f


def _plan(**kw):
    base = dict(rows=4, isa="sm_90", hidden=7168, attn_width=1536, shared2=1536, experts=896, latent=3584,
                inter=384, inter_up=384, top_k=16, bank_rows=8, eps=1e-5, situ_beta=4.0, situ_linear_beta=25.0,
                mxfp4=True)
    return host.K2Plan(**{**base, **kw})


def test_mma_experts_need_sm90_mxfp4_and_scales_in_range():
    """2^(S-1) is a finite bf16 up to S = 128: a larger scale code anywhere in the layer's
    experts sends the launch to tl.dot_scaled (correct, slower)."""
    assert _plan(scale_max=128).mma_experts
    assert not _plan(scale_max=129).mma_experts
    assert not _plan(isa="gfx950").mma_experts
    assert not _plan(mxfp4=False).mma_experts
    # widths the mma tiles do not divide (k3-tiny: L 128 under one 256-row down item): the
    # plan's own tiles are then the other path's (4 warps), not mma's 8
    assert not _plan(latent=128, inter=128).mma_experts
    assert host.K2Launch.build(_plan(latent=128, inter=128), "cpu", hip=False).block["num_warps"] == 4


def _experts(latent, inter, n=4, offset=0):
    import torch

    from sgl_k3_mono.reference.experts import Mxfp4Experts

    w13 = torch.zeros(n, 2 * inter, latent // 2, dtype=torch.uint8)
    s13 = torch.zeros(n, 2 * inter, latent // 32, dtype=torch.uint8)
    flat = torch.zeros(offset + n * latent * inter // 2, dtype=torch.uint8)
    w2 = flat[offset:].view(n, latent, inter // 2)
    s2 = torch.zeros(n, latent, inter // 32, dtype=torch.uint8)
    return Mxfp4Experts(w13, s13, w2, s2, inter)


@pytest.mark.parametrize("latent,inter,fits", [
    (3584, 384, True),    # a TP-8 rank of Kimi-K3
    (512, 256, True),     # k3-small
    (128, 128, False),    # k3-tiny: L below one 256-row down item
    (3584, 320, False),   # I not a multiple of BI = 128
])
def test_mma_tiles_fall_back_to_tensor_cores_where_they_do_not_fit(latent, inter, fits):
    t = tiles.default_tiles(8, mxfp4=True, mma=True)
    b = tiles.fit_tiles(t, hidden=7168, shared2=1536, experts=896, latent=latent, inter=inter, mma=True)
    assert b["MMA"] == int(fits)
    if not fits:  # the tensor-core tiles, fitted to the widths like any others
        assert inter % b["BI"] == 0 and latent % b["BL"] == 0 and b["BI"] <= 64 and b["BL"] <= 128
    # the plan says no (or the interpreter, which runs no PTX): never mma
    assert tiles.fit_tiles(t, hidden=7168, shared2=1536, experts=896, latent=latent, inter=inter)["MMA"] == 0


def test_misaligned_expert_tensors_take_the_plan_off_mma():
    """w2 starting 4 bytes off a 16-byte boundary would fault mma_fp4's v4 loads: decided
    once for the plan (every layer), so no layer switches variant inside a served step."""
    good, off = _experts(3584, 384), _experts(3584, 384, offset=4)
    assert host.mma_aligned(good) and not host.mma_aligned(off)

    class _Layer:  # what experts_alignment_ok reads of a K2RankWeights
        def __init__(self, ex):
            self.moe = type("Moe", (), {"experts": ex})()

    assert host.experts_alignment_ok([_Layer(good), _Layer(good)])
    assert not host.experts_alignment_ok([_Layer(good), _Layer(off)])
    assert _plan(scale_max=120).mma_experts and not _plan(scale_max=120, experts_aligned=False).mma_experts


def _small_rank(fmt="mxfp4"):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from k2_cases import dims

    from sgl_k3_mono.k2.reference import K2Weights

    return K2Weights.random(dims("k3-small"), seed=0, expert_format=fmt).shard(0, 1)


def test_a_layer_off_its_plans_alignment_is_refused_not_run(monkeypatch):
    """The plan decides the mma path once for every layer; a layer handed to it whose
    expert tensors do not fit (another plan's weights) is an error naming the layer,
    never a faulting load or a silent switch of variant."""
    import dataclasses

    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the interpreter never takes mma
    rw = _small_rank()
    plan = host.K2Plan.for_weights(rw, 4, isa="sm_90", bank_rows=3, grid=4)
    assert plan.mma_experts
    launch = host.K2Launch.build(plan, "cpu")
    ex = rw.moe.experts
    flat = torch.zeros(4 + ex.w2.numel(), dtype=torch.uint8)
    off = dataclasses.replace(ex, w2=flat[4:].view(ex.w2.shape))
    bad = dataclasses.replace(rw, moe=dataclasses.replace(rw.moe, experts=off))
    bf = torch.bfloat16
    inputs = (torch.zeros(4, plan.attn_width, dtype=bf), torch.zeros(4, 3, plan.hidden, dtype=bf), 2, None,
              torch.empty(4, plan.hidden, dtype=bf))
    assert launch.launch_args(rw, *inputs, layer=5)[1]["MMA"]
    with pytest.raises(ValueError, match="layer 7's MXFP4 expert tensors are off the 16-byte alignment"):
        launch.launch_args(bad, *inputs, layer=7)


def test_a_plan_refuses_weights_without_the_latent_norm():
    """The launch always applies the latent RMSNorm: weights without its weight would
    otherwise be normalised with ones, which is not what SGLang computes."""
    import dataclasses

    rw = _small_rank()
    rw = dataclasses.replace(rw, moe=dataclasses.replace(rw.moe, latent_norm=None))
    with pytest.raises(ValueError, match="latent RMSNorm"):
        host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)


def test_trace_summary_times_each_phase_that_ran_from_the_median_entry():
    """The benchmark's in-launch profile: phases that did not run (reduce at TP 1) are
    skipped, each phase ends at the next one's median entry, the last at the exit slot."""
    import torch

    from sgl_k3_mono.k2.bench import trace_summary
    from sgl_k3_mono.k2.triton.frame import PHASES, TRACE_EXIT, TRACE_SLOTS

    t = torch.full((3, TRACE_SLOTS.value), -1, dtype=torch.int64)
    entries = {"o_proj": 0, "seam": 10_000, "front": 15_000, "route": 40_000, "experts_up": 45_000,
               "experts_down": 90_000, "combine": 150_000, "latent_up": 155_000}
    for p, ns in entries.items():
        t[:, PHASES.index(p)] = torch.tensor([ns, ns + 200, ns + 1000])
    t[:, TRACE_EXIT.value] = torch.tensor([180_000, 180_200, 181_000])
    got = trace_summary(t)
    assert list(got) == list(entries)  # no "reduce"
    assert got["seam"] == (5.0, 1.0) and got["experts_down"] == (60.0, 1.0) and got["latent_up"] == (25.0, 1.0)


def test_work_summary_times_each_program_from_its_entry_to_its_barrier():
    """A program's own work in a phase ends at its arrival at that phase's barrier (the
    last phase: at its exit); the longest names its program."""
    import torch

    from sgl_k3_mono.k2.bench import work_summary
    from sgl_k3_mono.k2.triton.frame import PHASES, TRACE_ARRIVE, TRACE_EXIT, TRACE_SLOTS

    t = torch.full((3, TRACE_SLOTS.value), -1, dtype=torch.int64)
    t[:, PHASES.index("front")] = 15_000
    t[:, TRACE_ARRIVE.value + PHASES.index("front")] = torch.tensor([35_000, 42_000, 30_000])
    t[:, PHASES.index("latent_up")] = 155_000
    t[:, TRACE_EXIT.value] = torch.tensor([180_000, 179_000, 181_000])
    t[:, PHASES.index("route")] = 50_000  # entered, never arrived: not summed
    got = work_summary(t)
    assert list(got) == ["front", "latent_up"]
    assert got["front"] == (20.0, 27.0, 1) and got["latent_up"] == (25.0, 26.0, 2)


@pytest.mark.parametrize("ksx,bi,kux", [(1, 128, 2), (2, 64, 2), (4, 32, 1)])
def test_experts_up_k_split_tiles(ksx, bi, kux):
    """KSX warp groups split experts_up's K: a warp keeps its 16 rows a tile, so an item
    has 1/KSX of the rows (more items where few experts are routed), and each group's K
    share must be whole loop steps (KUX shrinks to fit: 28 k-blocks at L 3584; the plain
    loop, without the default register prefetch, which steps one k-block at a time)."""
    t = dict(tiles.default_tiles(1, mxfp4=True, mma=True), KSX=ksx, XPD=0)
    b = tiles.fit_tiles(t, hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    assert (b["MMA"], b["BI"], b["KUX"]) == (1, bi, kux)
    # 28 k-blocks cannot split 8 ways: 4 groups instead, not the dot_scaled tiles
    eight = tiles.fit_tiles(dict(t, KSX=8), hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    assert (eight["MMA"], eight["KSX"], eight["KUX"]) == (1, 4, 1)


def test_expert_register_prefetch_steps_one_k_block():
    """XPD (the experts' register prefetch: 1 by default, 2 an option) walks K one k-block
    a step, so the KU steps are 1, and a 4-way K split of 28 k-blocks keeps mma_fp4. A
    deeper ring than mma_fp4 holds is refused, never run (the fourteenth session's XPD 3
    lost at every row count and was taken out)."""
    for m in (1, 2, 8):
        d = tiles.fit_tiles(tiles.default_tiles(m, mxfp4=True, mma=True), hidden=7168, shared2=1536, experts=896,
                           latent=3584, inter=384, mma=True)
        assert (d["MMA"], d["XPD"], d["KUX"], d["KUD"], d["KSX"]) == (1, 1, 1, 3 if m >= 4 else 1,
                                                                       -1 if m == 1 else 1), d
    t = dict(tiles.default_tiles(4, mxfp4=True, mma=True), XPD=2, KSX=4)
    f = tiles.fit_tiles(t, hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    assert (f["MMA"], f["KUX"], f["KUD"], f["KSX"], f["XPD"]) == (1, 1, 3, 4, 2), f
    for key in ("XPD", "XPDD"):
        with pytest.raises(ValueError, match=f"{key}=3"):
            tiles.fit_tiles(dict(t, **{key: 3}), hidden=7168, shared2=1536, experts=896, latent=3584, inter=384,
                           mma=True)


def test_the_shared_memory_ring_takes_two_to_four_stages():
    """XRS / XRSD (mma_fp4's cp.async ring in experts_up / experts_down, off by default)
    take 2..4 stages; any other depth is refused, never run, and the launch options carry
    them only on the mma path. So is a CARVE (the launch's fitted carveout) other than 0 / 1."""
    t = dict(tiles.default_tiles(4, mxfp4=True, mma=True), XRS=3, XRSD=2)
    f = tiles.fit_tiles(t, hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    assert (f["MMA"], f["XRS"], f["XRSD"]) == (1, 3, 2), f
    for key, bad in (("XRS", 1), ("XRS", 5), ("XRSD", 8), ("CARVE", 2)):
        with pytest.raises(ValueError, match=f"{key}={bad}"):
            tiles.fit_tiles(dict(t, **{key: bad}), hidden=7168, shared2=1536, experts=896, latent=3584, inter=384,
                           mma=True)


def test_expert_down_prefetch_is_its_own_option():
    """XPDD (experts_down's register prefetch) is off by default: at a TP-8 rank that
    phase walks 3 k-blocks, where the ring of XPD 1 would issue 6 loads and 4 mmas. On,
    it steps one k-block at a time like XPD; off, the down phase keeps its own KU step:
    from 4 rows all 3 k-blocks in one (KUD 3). A step that does not divide I's k-blocks
    is cut to one that does, keeping mma_fp4 (KUD 2 over 3 k-blocks: 1; it had turned
    the mma path off)."""
    d = tiles.default_tiles(8, mxfp4=True, mma=True)
    assert (d["XPD"], d["XPDD"], d["KUD"]) == (1, 0, 3), d
    f = tiles.fit_tiles(d, hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    assert (f["MMA"], f["KUX"], f["KUD"]) == (1, 1, 3), f
    f = tiles.fit_tiles(dict(d, KUD=2), hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    assert (f["MMA"], f["KUX"], f["KUD"]) == (1, 1, 1), f
    f = tiles.fit_tiles(dict(d, KUD=2), hidden=7168, shared2=1536, experts=896, latent=3584, inter=768, mma=True)
    assert (f["MMA"], f["KUD"]) == (1, 2), f
    f = tiles.fit_tiles(dict(d, KUD=2, XPDD=1), hidden=7168, shared2=1536, experts=896, latent=3584, inter=384,
                       mma=True)
    assert (f["KUX"], f["KUD"], f["XPDD"]) == (1, 1, 1), f


def test_expert_l2_prefetch_keeps_to_whole_pieces():
    """XL2 (an option) asks L2 for expert rows in one 16-byte multiple a thread; where a
    row cannot be cut so (or no mma_fp4 path runs) the option is off, never a ragged ask."""
    t = dict(tiles.default_tiles(8, mxfp4=True, mma=True), XL2=2)
    fit = dict(hidden=7168, shared2=1536, experts=896, inter=384, mma=True)
    assert tiles.fit_tiles(t, latent=3584, **fit)["XL2"] == 2  # up rows 1792 B in 2 pieces, down 192 B
    assert tiles.fit_tiles(dict(t, KSX=4), latent=3584, **fit)["XL2"] == 2  # 8 pieces of 224 B
    assert tiles.fit_tiles(t, latent=3584, **dict(fit, mma=False))["XL2"] == 0
    # mma_fp4's own width fit implies these cuts at its tiles; the check stands for others
    assert not tiles._l2_cut_fits(1808, 128, 256) and not tiles._l2_cut_fits(200, 256, 256)
    assert tiles._l2_cut_fits(1792, 128, 256) and tiles._l2_cut_fits(192, 256, 256)


def test_front_prefetch_bytes_fit_the_threads_and_the_row():
    """PF (tile option, off by default): bytes of each front weight row asked into L2
    during the seam, cut into one 16-byte multiple a thread; never past the row, and none
    where no PTX runs (HIP, the interpreter)."""
    t = dict(tiles.default_tiles(8, mxfp4=True, mma=True), PF=5000)  # BN 64, 8 warps: 4 pieces a row
    assert tiles._prefetch_bytes(t, 7168, ptx=True) == 4992
    assert tiles._prefetch_bytes(dict(t, PF=10 ** 6), 7168, ptx=True) == 14336
    assert tiles._prefetch_bytes(t, 7168, ptx=False) == 0
    one = dict(tiles.default_tiles(1, mxfp4=True, mma=True), PF=5000)  # BN 16: 16 pieces a row
    assert tiles._prefetch_bytes(one, 7168, ptx=True) == 4864
    assert tiles._prefetch_bytes(tiles.default_tiles(8, mxfp4=True, mma=True), 7168, ptx=True) == 0


def test_o_proj_tile_divides_the_hidden_width_or_refuses():
    """BNO / BKO (the mma default at every row count: 64 / 128): o_proj's own register
    tile and K step, so its tiles need not be latent_up's; BNO halves until it divides H,
    and BKO defaults to the dense K step."""
    fit = dict(hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    for rows in range(1, 9):
        one = tiles.fit_tiles(tiles.default_tiles(rows, mxfp4=True, mma=True), **fit)
        assert (one["BNO"], one["BKO"], one["STAGES"]) == (64, 128, 4), rows
    t = dict(tiles.default_tiles(8, mxfp4=True, mma=True), BNO=0, BKO=0)
    assert tiles.fit_tiles(t, **fit).get("BNO", 0) == 0
    f = tiles.fit_tiles(dict(t, BNO=64), **fit)
    assert (f["BNO"], f["BKO"]) == (64, t["BK"])
    assert tiles.fit_tiles(dict(t, BNO=128, BKO=128), **dict(fit, hidden=7168 + 64))["BNO"] == 64
    for bad in (dict(BNO=48), dict(BNO=64, BKO=96)):
        with pytest.raises(ValueError):
            tiles.fit_tiles(dict(t, **bad), **fit)


def test_front_tile_defaults_to_bn_and_divides_every_front_segment():
    """BNF, the front's own output tile (94 items of 64 rows at a TP-8 rank, for 132
    SMs): BN unless set, and halved until it divides S2, E and L."""
    t = tiles.default_tiles(8, mxfp4=True, mma=True)
    fit = lambda b, **kw: tiles.fit_tiles(  # noqa: E731
        b, **{**dict(hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True), **kw})
    assert fit(t)["BNF"] == fit(t)["BN"] == 64
    assert fit(dict(t, BNF=16))["BNF"] == 16
    assert fit(dict(t, BNF=64), experts=48)["BNF"] == 16  # E 48 = 3 x 16


def test_h_tile_rows_default_to_bn_and_never_exceed_it():
    """BNH: rows an o_proj / latent_up tile owns in its BN-row register tile (56 of 64
    make 128 tiles of H 7168, one an SM, where 64 make 112)."""
    t = tiles.default_tiles(8, mxfp4=True, mma=True)
    fit = lambda b: tiles.fit_tiles(b, hidden=7168, shared2=1536, experts=896, latent=3584, inter=384,  # noqa: E731
                                   mma=True)
    assert fit(t)["BNH"] == fit(t)["BN"] == 64
    assert fit(dict(t, BNH=56))["BNH"] == 56 and -(-7168 // 56) == 128
    assert fit(dict(t, BNH=100))["BNH"] == 64


def test_set_block_keeps_the_defaults_it_is_not_told_to_change():
    """A sweep's empty block is the launch's defaults, the register prefetch included (when
    default_tiles added XPD on top of k2_tiles, `bench k2 --block ""` timed the launch
    without it), and a one-entry override changes that entry alone."""
    from sgl_k3_mono.k2.host import K2Launch, K2Plan

    plan = K2Plan(rows=4, isa="sm_90", hidden=7168, attn_width=1536, shared2=1536, experts=896, latent=3584,
                  inter=384, inter_up=384, top_k=16, bank_rows=8, eps=1e-5, situ_beta=4.0, situ_linear_beta=25.0,
                  mxfp4=True)
    defaults = dict(K2Launch.build(plan, "cpu", impl="triton").block)
    assert (defaults["MMA"], defaults["XPD"], defaults["XPDD"], defaults["SEAM_SPLIT"]) == (1, 1, 0, 1)
    for over in ({}, {"KSX": 2}, {"XPD": 0}, {"XPDD": 1}, {"SEAM_SPLIT": 0}):
        launch = K2Launch.build(plan, "cpu", impl="triton")
        launch.set_block(**over)
        assert launch.block == {**defaults, **over}, over
    # bf16 experts at 1 row: FLATD and o_proj's own tile (when default_tiles added them on top
    # of k2_tiles, the 37th session's `bench k2 --block ""` timed the launch without them)
    plan = dataclasses.replace(plan, rows=1, mxfp4=False)
    defaults = dict(K2Launch.build(plan, "cpu", impl="triton").block)
    assert (defaults["FLATD"], defaults["BNO"], defaults["BKO"], defaults["num_warps"]) == (1, 64, 128, 8)
    for over in ({}, {"FLATD": 0}, {"BNO": 0}):
        launch = K2Launch.build(plan, "cpu", impl="triton")
        launch.set_block(**over)
        assert launch.block == {**defaults, **over}, over



@pytest.mark.parametrize("rows,tp,sdu", [(1, 8, 1), (2, 8, 1), (3, 8, 0), (4, 8, 0), (8, 8, 0), (1, 2, 0)])
def test_shared_down_rides_in_experts_up_where_the_routed_items_leave_programs_idle(rows, tp, sdu):
    """SDU's default (-1) is sdu_fits' choice: on where a step's most routed gate/up items
    (rows x top-k distinct experts, I / BI items each) are fewer than the grid's programs
    (48 and 96 for 132 at 1 and 2 rows of a TP-8 rank), off where they fill it (192 at 4
    rows; 192 at 1 row of a TP-2 rank, whose I is 1536)."""
    inter = 3072 // tp
    b = tiles.fit_tiles(tiles.default_tiles(rows, mxfp4=True, mma=True), hidden=7168, shared2=1536, experts=896,
                        latent=3584, inter=inter, mma=True)
    assert b["SDU"] == -1 and b["BI"] == 128
    assert tiles.sdu_fits(b, rows=rows, top_k=16, experts=896, inter=inter, grid=132) == bool(sdu)


def test_experts_down_item_order_is_one_of_two():
    """XDB deals experts_down's items round the grid (0, the default) or one run a program
    (1); anything else is refused before a launch, never compiled."""
    t = tiles.default_tiles(8, mxfp4=True, mma=True)
    fit = dict(hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    assert tiles.fit_tiles(dict(t, XDB=1), **fit)["XDB"] == 1
    with pytest.raises(ValueError, match="XDB=2"):
        tiles.fit_tiles(dict(t, XDB=2), **fit)


def test_expert_table_and_l2_hints_take_only_their_values():
    """XET (experts_down reads the step's expert table; 2: a step ahead) is 0, 1 or 2, XL2B / XL2BD (the expert
    loads' L2 prefetch-size hint) 0, 128 or 256; anything else is refused before a launch.
    The table's words cover the widest row tile: the count, P ids, P pair numbers and P
    rows of 16 slots (P = 16 rows x top-k 16)."""
    t = tiles.default_tiles(8, mxfp4=True, mma=True)
    fit = dict(hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    got = tiles.fit_tiles(dict(t, XET=1, XL2B=256, XL2BD=128), **fit)
    assert (got["XET"], got["XL2B"], got["XL2BD"]) == (1, 256, 128)
    assert tiles.fit_tiles(dict(t, XET=2), **fit)["XET"] == 2
    for bad in (dict(XET=3), dict(XL2B=64), dict(XL2BD=512)):
        with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
            tiles.fit_tiles(dict(t, **bad), **fit)
    assert host.expert_table_words(16) == 1 + 2 * 256 + 256 * 16


def test_the_default_k_split_is_resolved_before_the_tiles_are_fitted():
    """KSX -1 (the default at 1 and 4 rows) is resolve_ksx's to turn into ksx_choice's split
    (launch_args does, before fitting); fit_tiles fits it unsplit and leaves it -1, and
    takes no other split but 1, 2, 4 or 8. The split's BI decides SDU: at 1 row of a TP-8
    rank KSX 2 makes 96 items of 64 rows, still fewer than 132 programs, so the shared down
    still rides in experts_up."""
    dims = dict(top_k=16, experts=896, inter=384, grid=132)
    fit = dict(hidden=7168, shared2=1536, experts=896, latent=3584, inter=384, mma=True)
    unresolved = tiles.fit_tiles(tiles.default_tiles(1, mxfp4=True, mma=True), **fit)
    assert (unresolved["MMA"], unresolved["KSX"], unresolved["BI"]) == (1, -1, 128)
    assert tiles.fit_tiles(tiles.default_tiles(1, mxfp4=True, mma=True), **dict(fit, mma=False))["KSX"] == 1
    with pytest.raises(ValueError, match="KSX=3"):
        tiles.fit_tiles(dict(tiles.default_tiles(1, mxfp4=True, mma=True), KSX=3), **fit)
    for rows, ksx in ((1, 2), (2, 1), (3, 1), (4, 2), (8, 1)):
        t = tiles.resolve_ksx(tiles.default_tiles(rows, mxfp4=True, mma=True), rows=rows, mma=True, **dims)
        f = tiles.fit_tiles(t, **fit)
        assert (f["MMA"], f["KSX"], f["BI"]) == (1, ksx, 128 // ksx), (rows, f)
    one = tiles.default_tiles(1, mxfp4=True, mma=True)
    f = tiles.fit_tiles(tiles.resolve_ksx(one, rows=1, mma=True, **dims), **fit)
    assert tiles.sdu_fits(f, rows=1, **dims)
    assert tiles.resolve_ksx(tiles.default_tiles(1, mxfp4=True, mma=True), rows=1, mma=False, **dims)["KSX"] == 1


@pytest.mark.parametrize("hip", [False, True])
def test_launch_args_resolve_the_shared_down_choice_and_say_what_runs(monkeypatch, hip):
    """launch_args turns SDU -1 into sdu_fits' answer (sm_90 only: it was measured
    there, and the FlyDSL K2 keeps the shared down in experts_down), so tiles_used and
    the kernel's SDU agree: 2, the shared down's tiles on the programs the routed items
    leave idle; SDU 0, 1 and 2 are taken as given, anything else refused."""
    import torch

    monkeypatch.setattr(host, "sdu_fits", lambda b, **kw: True)
    rw = _small_rank()
    plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)
    launch = host.K2Launch.build(plan, "cpu", impl="triton", hip=hip)
    bf = torch.bfloat16
    inputs = (torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 3, plan.hidden, dtype=bf), 2, None,
              torch.empty(2, plan.hidden, dtype=bf))
    for force, want in ((None, 0 if hip else 2), (0, 0), (1, 1), (2, 2)):
        if force is not None:
            launch.set_block(SDU=force)
        assert launch.launch_args(rw, *inputs)[1]["SDU"] == want, force
        assert launch.tiles_used["SDU"] == want, force
    launch.set_block(SDU=3)
    with pytest.raises(ValueError, match="SDU 3"):
        launch.launch_args(rw, *inputs)


def test_front_helpers_are_the_programs_whose_tiles_end_first():
    """FR's helpers at a TP-8 rank on 132 SMs (router 896 + shared gate/up 1536 rows, then
    the latent down's 3584): on the tensor cores (32-row router / shared tiles, 64-row
    latent ones: 132 tiles, one a program) the last window of 32-row programs (0..75);
    as GEMVs at 1 row (16-row tiles, 376: programs 112..131 have two, the rest three) the
    last of the two-tile programs."""
    dims = dict(experts=896, shared2=1536, latent=3584, grid=132)
    assert tiles.front_helpers(bnr=32, bnf=64, helpers=8 + 16, **dims) == 52
    assert tiles.front_helpers(bnr=32, bnf=64, helpers=2 + 4, **dims) == 70
    assert tiles.front_helpers(bnr=16, bnf=16, helpers=1 + 2, **dims) == 129
    assert tiles.front_helpers(bnr=16, bnf=16, helpers=3, experts=32, shared2=32, latent=64, grid=4) in range(4)


def test_launch_args_split_the_shared_down_and_route_in_the_front():
    """SDUQ sixteenths of the shared down's H / BN tiles run in experts_up (SDUT; none with
    SDU off, anything outside 1..16 refused); FR passes its first helper as the runtime
    argument before ring_off (0 without FR), and the HIP build keeps its routing phase."""
    import torch

    rw = _small_rank()
    plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)
    bf = torch.bfloat16
    inputs = (torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 3, plan.hidden, dtype=bf), 2, None,
              torch.empty(2, plan.hidden, dtype=bf))
    for hip in (False, True):
        launch = host.K2Launch.build(plan, "cpu", impl="triton", hip=hip)
        launch.set_block(SDU=2, SDUQ=8)
        args, meta = launch.launch_args(rw, *inputs)
        assert meta["SDUT"] == plan.hidden // meta["BN"] // 2
        assert meta["FR"] == (0 if hip else 1)
        want = tiles.front_helpers(experts=plan.experts, shared2=plan.shared2, latent=plan.latent, bnr=meta["BNR"],
                                  bnf=meta["BNF"], grid=4, helpers=2 + 2 * tiles.situ_chunks(plan.shared2))
        assert args[-2] == (0 if hip else want) and args[-1] == 0
        launch.set_block(SDU=0, FR=0)
        args, meta = launch.launch_args(rw, *inputs)
        assert (meta["SDUT"], meta["FR"], args[-2]) == (0, 0, 0)
    for bad in (dict(SDUQ=0), dict(SDUQ=17), dict(FR=2)):
        launch.set_block(SDU=2, **bad)
        with pytest.raises(ValueError, match=next(iter(bad))):
            launch.launch_args(rw, *inputs)
        launch.set_block(SDUQ=16, FR=1)


def test_latent_ssq_slots_cover_every_tile_and_lsq_is_0_or_1():
    """LSQ's slots: a power of two at least the latent's 16-column tiles (224 of Kimi-K3's
    3584 -> 256), at least 1; LSQ passes to the kernel as 0 / 1 and anything else is refused."""
    import torch

    assert host.latent_ssq_slots(3584) == 256 and host.latent_ssq_slots(64) == 4 and host.latent_ssq_slots(8) == 1
    rw = _small_rank()
    plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)
    bf = torch.bfloat16
    inputs = (torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 3, plan.hidden, dtype=bf), 2, None,
              torch.empty(2, plan.hidden, dtype=bf))
    launch = host.K2Launch.build(plan, "cpu", impl="triton")
    for lsq in (0, 1):
        launch.set_block(LSQ=lsq)
        _, meta = launch.launch_args(rw, *inputs)
        assert (meta["LSQ"], meta["LSQP"]) == (lsq, host.latent_ssq_slots(plan.latent))
        assert launch.scratch.latent_ssq.shape == (host.latent_ssq_slots(plan.latent), host.ROW_PAD)
    launch.set_block(LSQ=2)
    with pytest.raises(ValueError, match="LSQ"):
        launch.launch_args(rw, *inputs)


def test_scalars_that_change_between_layers_are_not_specialised():
    """Every integer argument that differs between two layers' launches (the layer index,
    the bank rows in use, the rank, a stall switch) is one Triton does not specialise:
    otherwise a step warms one K2 a value class (1, a multiple of 16, other) of each, and
    a stall set at one layer compiles inside the step. (err_addr, the launch's own failure
    record, differs between processes.) The one exception is has_prefix, 0 or 1: a block
    write or not, two variants, each compiling only its own seam branch. ring_off and frh
    are unspecialised for other reasons (below)."""
    import dataclasses
    import types

    import torch

    from sgl_k3_mono.k2.triton.kernel import k2_kernel

    rw = _small_rank()
    plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)
    bf = torch.bfloat16
    attn, bank, out = (torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 3, plan.hidden, dtype=bf),
                       torch.empty(2, plan.hidden, dtype=bf))
    a = host.K2Launch.build(plan, "cpu", impl="triton")
    b = dataclasses.replace(host.K2Launch.build(plan, "cpu", impl="triton"), rank=1)
    b.stall = types.SimpleNamespace(phase_index=lambda *args: 1)
    args_a, _ = a.launch_args(rw, attn, bank, 1, None, out, layer=1)
    args_b, _ = b.launch_args(rw, attn, bank, 3, torch.zeros_like(out), out, layer=16)
    names = [p.name for p in k2_kernel.params if not p.is_constexpr]
    assert len(names) == len(args_a) == len(args_b)
    varying = {n for n, x, y in zip(names, args_a, args_b) if isinstance(x, int) and x != y}
    assert varying == {"nvb", "has_prefix", "rank", "layer", "stall_phase", "err_addr"}, varying
    # ring_off, where mma_fp4's ring starts, is known only once the launch has compiled
    # (runtime/triton_smem.reserve): the compile without it must be the one that runs;
    # frh, FR's first helper, moves with the rows, which share a build within a tile class
    assert {p.name for p in k2_kernel.params if p.do_not_specialize} == \
        varying - {"has_prefix"} | {"ring_off", "frh"}


def test_the_k_split_option_fills_experts_ups_waves():
    """KSX -1 (an option) picks the split whose items fill experts_up's waves best, where
    that is at least a fifth shorter than no split: at a TP-8 rank 2 / 4 / 2 / 1 at 1 /
    2 / 4 / 8 rows, the fastest of each row count measured; at a TP-2 rank (I 1536, 192
    items at 1 row) 2 at 1 row only."""
    choose = lambda rows, tp: tiles.ksx_choice(8, rows=rows, top_k=16, experts=896, inter=3072 // tp,  # noqa: E731
                                              grid=132)
    assert [choose(m, 8) for m in (1, 2, 4, 8)] == [2, 4, 2, 1]
    assert [choose(m, 2) for m in (1, 2, 8)] == [2, 1, 1]
    assert tiles.ksx_choice(4, rows=2, top_k=16, experts=896, inter=384, grid=132) in (1, 2, 4)


@pytest.mark.parametrize("hip", [False, True])
def test_launch_args_resolve_the_k_split_option_before_fitting_tiles(monkeypatch, hip):
    """KSX -1 becomes ksx_choice's split on the mma experts (then fit like any KSX) and 1
    on every other path; tiles_used says which."""
    import torch

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(tiles, "ksx_choice", lambda *a, **kw: 2)
    rw = _small_rank()
    plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)
    launch = host.K2Launch.build(plan, "cpu", impl="triton", hip=hip)
    launch.set_block(KSX=-1)
    bf = torch.bfloat16
    inputs = (torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 3, plan.hidden, dtype=bf), 2, None,
              torch.empty(2, plan.hidden, dtype=bf))
    meta = launch.launch_args(rw, *inputs)[1]
    assert meta["KSX"] == launch.tiles_used["KSX"] == (1 if hip else 2)
    assert meta["MMA"] is (not hip)


def test_bench_warm_processes_draw_their_layers_one_at_a_time(tmp_path, monkeypatch):
    """`bench k2`'s random layer is drawn under SGL_K3_MONO_WEIGHTS_LOCK (env.sh's `warm`
    sets it: five processes drawing at once ran an H100 out of memory): held while drawing,
    free after, and no lock without the variable."""
    import fcntl

    from sgl_k3_mono.k2.bench import _one_builder_at_a_time

    lock = tmp_path / "weights.lock"

    def held() -> bool:
        with open(lock, "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(f, fcntl.LOCK_UN)
            return False

    monkeypatch.delenv("SGL_K3_MONO_WEIGHTS_LOCK", raising=False)
    with _one_builder_at_a_time():
        assert not lock.exists()
    monkeypatch.setenv("SGL_K3_MONO_WEIGHTS_LOCK", str(lock))
    with _one_builder_at_a_time():
        assert held()
    assert not held()


@pytest.mark.parametrize("fmt", ["bf16", "mxfp4"])
def test_bench_rotates_over_copies_of_the_layer_at_other_addresses(fmt):
    """`bench k2 --rotate N` times N copies of one layer's weights in turn: every tensor the
    launch reads is equal to the original's and none shares its memory, and the launch's
    arguments from a copy are the original's apart from the addresses."""
    import torch

    from sgl_k3_mono.k2.bench import _COPIES, _weight_copies

    rw = _small_rank(fmt)
    _COPIES.pop(fmt, None)
    try:
        copies = _weight_copies(fmt, rw, 3)
        assert copies[0] is rw and len(copies) == 3 and _weight_copies(fmt, rw, 2) == copies[:2]

        def tensors(obj, prefix=""):
            if isinstance(obj, torch.Tensor):
                yield prefix, obj
            elif dataclasses.is_dataclass(obj):
                for f in dataclasses.fields(obj):
                    yield from tensors(getattr(obj, f.name), f"{prefix}.{f.name}")

        original = dict(tensors(rw))
        assert any(".experts." in k for k in original), sorted(original)
        for c in copies[1:]:
            copied = dict(tensors(c))
            assert copied.keys() == original.keys()
            for k, t in original.items():
                assert torch.equal(copied[k], t) and copied[k].dtype == t.dtype, k
                assert copied[k].untyped_storage().data_ptr() != t.untyped_storage().data_ptr(), k
        plan = host.K2Plan.for_weights(rw, 2, isa="sm_90", bank_rows=3, grid=4)
        launch = host.K2Launch.build(plan, "cpu", impl="triton")
        bf = torch.bfloat16
        inputs = (torch.zeros(2, plan.attn_width, dtype=bf), torch.zeros(2, 3, plan.hidden, dtype=bf), 2, None,
                  torch.empty(2, plan.hidden, dtype=bf))
        (args_a, meta_a), (args_b, meta_b) = (launch.launch_args(w, *inputs) for w in copies[:2])
        assert meta_a == meta_b
        assert [x for x in args_a if not isinstance(x, torch.Tensor)] == \
            [x for x in args_b if not isinstance(x, torch.Tensor)]
    finally:
        _COPIES.pop(fmt, None)


def test_bench_l2_cold_rewarms_the_small_tensors_themselves():
    """`bench k2 --l2-cold`'s data-warm column reads the launch's small tensors back after the
    flush: the tensors themselves (a converted copy would warm the copy), none over the limit."""
    import torch

    from sgl_k3_mono.k2.bench import _small_tensors

    rw = _small_rank("bf16")
    inputs = (torch.randn(2, 8), torch.zeros(3, dtype=torch.int32))
    small = _small_tensors((rw, inputs), limit_bytes=4096)
    assert small and all(t.numel() * t.element_size() < 4096 for t in small)
    assert any(t is inputs[0] for t in small) and any(t is inputs[1] for t in small)
    assert any(t is rw.post_attention_layernorm for t in small)
    assert not any(t is rw.moe.experts.w13 for t in small)


def test_the_loops_own_stages_and_k_steps_take_only_their_values():
    """STX / STXD / STU (a loop's own cp.async stages, 0: STAGES) are 0..8, BKS / BKU (a loop's
    own K step, 0: the phase's usual one) 0 or a power of two 16..1024; anything else is refused
    before a launch, naming the key (not left to Triton's compile error)."""
    t = tiles.default_tiles(1, mxfp4=False, mma=False)
    fit = dict(hidden=7168, shared2=1536, experts=896, latent=3584, inter=384)
    got = tiles.fit_tiles(dict(t, BKX=128, STX=6, BKS=128, STXD=6, BKU=128, STU=6), **fit)
    assert (got["STX"], got["STXD"], got["BKS"], got["BKU"], got["STU"]) == (6, 6, 128, 128, 6)
    for bad in (dict(STX=9), dict(STXD=-1), dict(STU=12), dict(BKS=100), dict(BKU=8), dict(BKU=2048)):
        with pytest.raises(ValueError, match=f"{next(iter(bad))}="):
            tiles.fit_tiles(dict(t, **bad), **fit)
