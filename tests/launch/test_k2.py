"""K2 against its reference: the same cases on the CPU (Triton interpreter, phase by
phase) and on the GPU (persistent launch and phase by phase), outputs poisoned first,
every output within the spec's declared bounds and the routing equal."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from k2_cases import Case  # noqa: E402

CPU_CASES = [
    Case("k3-tiny", 1, "bf16", "sm_90", nvb=0),
    Case("k3-tiny", 3, "bf16", "sm_90", nvb=2),
    Case("k3-tiny", 8, "bf16", "gfx950", nvb=3, prefix=False),
    Case("k3-tiny", 2, "mxfp4", "sm_90", nvb=1),
    Case("k3-tiny", 8, "mxfp4", "gfx950", nvb=2),
    Case("k3-tiny", 5, "mxfp4", "sm_90", nvb=3, prefix=False, seed=3),
    Case("k3-tiny", 4, "bf16", "sm_90", nvb=2, tp=2, seed=4),
    Case("k3-tiny", 8, "mxfp4", "gfx950", nvb=1, tp=4, seed=5),
    # tensor-core tiles where the sm_90 default would not take them (from 3 rows it does;
    # the gfx950 Triton build always does)
    Case("k3-tiny", 2, "mxfp4", "sm_90", nvb=1, seed=6, tiles="EXPERT_GEMV=0,DENSE_GEMV=0"),
    Case("k3-tiny", 6, "bf16", "gfx950", nvb=2, seed=7, tiles="EXPERT_GEMV=0,DENSE_GEMV=0"),
    Case("k3-tiny", 7, "mxfp4", "sm_90", nvb=1, seed=8, tiles="EXPERT_GEMV=1,MX4D=0"),  # the 3-D MXFP4 GEMV tiles
    # bf16 from 2 rows with the 1-row dense choices (GEMV dense phases, FLATD, o_proj's own tile)
    # beside the tensor-core experts (a 2-row candidate, 16 us slower on an H100: 43rd session)
    Case("k3-small", 2, "bf16", "sm_90", nvb=2, seed=80, tiles="DENSE_GEMV=1,FLATD=1,BNO=64,BKO=128"),
    # shorter K steps (less code a launch runs once) with their loops' own stages: experts_up, experts_down's two
    # flat loops, latent_up (BKX / STX, BKD / BKS / STXD, BKU / STU: 53rd session)
    Case("k3-small", 1, "bf16", "sm_90", nvb=1, seed=87, tiles="BKX=32,STX=5,BKD=32,BKS=64,STXD=5,BKU=64,STU=5"),
    # latent_up's rows shared evenly at 1 row (BNH < BN in FLATD's GEMV loop; BNH=14 1.2 us slower: 43rd session)
    Case("k3-small", 1, "bf16", "sm_90", nvb=2, seed=86, tiles="BNH=12"),
    # GEMV experts (the default at M <= 2 only) over the rows that route them, 1 or 2 at a time
    Case("k3-tiny", 8, "mxfp4", "sm_90", nvb=2, seed=9, tiles="EXPERT_GEMV=1,XU=1"),
    Case("k3-tiny", 6, "bf16", "sm_90", nvb=1, seed=10, tiles="EXPERT_GEMV=1,XU=2,MX4D=0"),
    Case("k3-tiny", 5, "mxfp4", "gfx950", nvb=1, tp=2, seed=11, tiles="EXPERT_GEMV=1,XU=2"),
    # o_proj / latent_up tiles of BNH < BN rows (the last one ragged), the front's own BNF
    Case("k3-tiny", 4, "mxfp4", "sm_90", nvb=2, seed=12, tiles="BNH=48,BNF=16"),
    Case("k3-tiny", 3, "bf16", "sm_90", nvb=1, tp=2, seed=13, tiles="BNH=40"),
    # the split seam over 4 programs a row (H 1024 in 256-column slices on the 4-program
    # grid; k3-tiny's rows take one slice each, or the one-program seam from 5 rows), after
    # a prefix add, after a block write, and over the ranks' summed partials
    Case("k3-small", 1, "bf16", "sm_90", nvb=2, seed=14),
    Case("k3-small", 1, "mxfp4", "sm_90", nvb=3, prefix=False, seed=15),
    Case("k3-small", 1, "bf16", "gfx950", nvb=1, tp=2, seed=16),
    Case("k3-tiny", 2, "bf16", "sm_90", nvb=2, seed=17, tiles="SEAM_SPLIT=0"),
    # the shared experts' down tiles in experts_up (SDU; 2 by default where the routed
    # items leave programs idle), at TP 1 and 2; k3-tiny's routed items fill its 4-program
    # grid, so SDU 2 takes its round-the-grid branch there
    Case("k3-tiny", 1, "mxfp4", "sm_90", nvb=1, seed=18, tiles="SDU=1"),
    Case("k3-tiny", 3, "bf16", "gfx950", nvb=2, tp=2, seed=19, tiles="SDU=1"),
    Case("k3-tiny", 2, "mxfp4", "sm_90", nvb=1, seed=20, tiles="SDU=2"),
    # ... and only some of them there (SDUQ sixteenths), the rest in experts_down
    Case("k3-tiny", 1, "mxfp4", "sm_90", nvb=1, seed=23, tiles="SDU=2,SDUQ=8"),
    Case("k3-tiny", 3, "bf16", "sm_90", nvb=2, tp=2, seed=24, tiles="SDU=1,SDUQ=5"),
    # experts_down's items one run a program (XDB, off by default), with and without the
    # shared down among them
    Case("k3-tiny", 5, "mxfp4", "sm_90", nvb=2, seed=21, tiles="XDB=1"),
    Case("k3-tiny", 1, "bf16", "sm_90", nvb=1, seed=22, tiles="XDB=1,SDU=2"),
    # the latent norm's own pass over the latent (LSQ 0; the default from 2 rows sums the
    # latent tiles' shares, combine's at TP 1, the reduce's at TP 2)
    Case("k3-tiny", 3, "mxfp4", "sm_90", nvb=1, seed=25, tiles="LSQ=0"),
    Case("k3-tiny", 2, "bf16", "sm_90", nvb=2, tp=2, seed=26, tiles="LSQ=0"),
    # o_proj's own tile (BNO rows, K steps of BKO) where latent_up keeps the 16-row GEMV tile
    Case("k3-tiny", 1, "mxfp4", "sm_90", nvb=1, seed=27, tiles="BNO=32,BKO=64"),
    # ... and on the tensor cores (from 2 rows; the 1-row default's tile is a GEMV's), over 2 ranks
    Case("k3-tiny", 3, "mxfp4", "sm_90", nvb=2, tp=2, seed=28, tiles="BNO=32,BKO=64"),
]


def _check(res: dict, exact: bool = False) -> None:
    assert "error" not in res, res.get("error")
    assert res["finite"], "output has NaN/inf: a poisoned value survived"
    assert res["violations"] == [], res
    assert res["routing_equal"], "top-k ids differ from the reference"
    assert res.get("ranks_bitwise_equal", True), "TP ranks do not hold bit-identical rows"
    if exact:
        assert res["hidden"]["max_abs"] == 0.0, res


def _interpreted(cases, *flags) -> None:
    """k2_interp_worker over `cases` in a fresh interpreter process; each held to the bounds."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    specs = [json.dumps(dataclasses.asdict(c)) for c in cases]
    done = subprocess.run([sys.executable, str(HERE / "k2_interp_worker.py"), *flags, *specs], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(results) == len(cases), done.stdout + done.stderr[-2000:]
    for res in results:
        print(res["case"], res.get("hidden"), res.get("apart_from", ""))
        _check(res)
    return results


def test_k2_triton_interpreted_matches_reference():
    """The Triton kernel's phases on the CPU, held to the same bounds as on the GPU (fp32
    reduction order differs from the reference's, so a bf16 output may differ by an ulp)."""
    _interpreted(CPU_CASES)


# the persistent launch on one program (its phases, barriers and counted waits in order;
# routing inside the front, FR, has one barrier fewer)
CPU_PERSISTENT_CASES = [Case("k3-tiny", 2, "bf16", "sm_90", nvb=1, seed=60, tiles="FR=0"),
                        Case("k3-tiny", 2, "bf16", "sm_90", nvb=1, seed=60),
                        Case("k3-tiny", 3, "mxfp4", "sm_90", nvb=2, prefix=False, seed=61, tiles="FR=1,SDU=2,SDUQ=8"),
                        Case("k3-tiny", 2, "bf16", "sm_90", nvb=1, seed=60, tiles="LSQ=0")]


def test_k2_triton_interpreted_persistent_on_one_program():
    """The persistent launch under the interpreter on a one-program grid: every barrier
    and counted wait is met by that program's own arrivals (a count off by one would
    expire: the interpreter's clock moves a millisecond a read), within the bounds."""
    _interpreted(CPU_PERSISTENT_CASES, "--persistent")


# FLATD at 1 row (GEMV dense phases), K steps of 128 so a tile is several steps: the front's
# loop (FR: its router and shared tiles counted for the helpers) and latent_up's
FLATD_CASES = [Case("k3-tiny", 1, "mxfp4", "sm_90", nvb=1, seed=63, tiles="FLATD=1,BK=128"),
               Case("k3-small", 1, "bf16", "sm_90", nvb=2, seed=64, tiles="FLATD=1,BK=128"),
               # ... and on the tensor cores (an option from 2 rows; the router / shared tiles as
               # wide as the latent ones on both sides), at TP 1 and 2
               Case("k3-small", 3, "bf16", "sm_90", nvb=2, seed=84, tiles="FLATD=1,BK=64,BNF=32,BNR=32"),
               Case("k3-tiny", 5, "mxfp4", "sm_90", nvb=1, tp=2, seed=85, tiles="FLATD=1,BK=64,BNF=16,BNR=16")]


@pytest.mark.parametrize("persistent", [False, True])
def test_k2_triton_interpreted_flat_dense_loops_are_bitwise_the_default(persistent):
    """FLATD's loops form a tile's products in gemv_bf16's or dot_bf16's order: its output
    within the bounds and bitwise the per-tile loops' (the same K steps), phase by phase
    and as the persistent launch (one program: every tile of each phase in one loop)."""
    results = _interpreted(FLATD_CASES, *(["--persistent"] if persistent else []), "--bitwise-vs", "off=FLATD")
    assert all(r["flatd"] == 1 and r["apart_from"]["apart"] == 0 for r in results), results


# FLATX at 1 row (bf16 GEMV experts), K chunks short enough that an item is several steps,
# with and without the shared down's tiles after the routed items in experts_up (SDU 1)
# and in experts_down's loop (SDU 0), and with experts_down's items a run a program (XDB)
FLATX_CASES = [Case("k3-small", 1, "bf16", "sm_90", nvb=2, seed=68, tiles="FLATX=1,BKX=64,BKD=32,SDU=0,BK=64"),
               Case("k3-small", 1, "bf16", "sm_90", nvb=1, seed=69, tiles="FLATX=1,BKX=64,BKD=32,SDU=1"),
               Case("k3-tiny", 1, "bf16", "sm_90", nvb=1, seed=70, tiles="FLATX=1,BKX=32,BKD=32,XDB=1"),
               # the flat loops' own stage counts (STX / STXD; the interpreter runs no pipeline: the path)
               Case("k3-small", 1, "bf16", "sm_90", nvb=1, seed=74, tiles="FLATX=1,BKX=32,BKD=32,STX=6,STXD=5"),
               # ... and on the tensor cores (from 2 rows), at TP 1 and 2
               Case("k3-small", 3, "bf16", "sm_90", nvb=2, seed=72, tiles="FLATX=1,BKX=64,BKD=64"),
               Case("k3-tiny", 5, "bf16", "sm_90", nvb=1, tp=2, seed=73, tiles="FLATX=1,BKX=64,BKD=64")]


@pytest.mark.parametrize("persistent", [False, True])
def test_k2_triton_interpreted_flat_expert_loops_are_bitwise_the_default(persistent):
    """FLATX's loops form an item's products in gemv_bf16's order: its output within the
    bounds and bitwise a K loop an item (the same chunks), phase by phase and as the
    persistent launch (one program: every item of each expert phase in one loop)."""
    results = _interpreted(FLATX_CASES, *(["--persistent"] if persistent else []), "--bitwise-vs", "off=FLATX")
    assert all(r["flatx"] == 1 and r["apart_from"]["apart"] == 0 for r in results), results


# ---- GPU --------------------------------------------------------------------------------

GPU_CASES = [Case("k3-small", m, fmt, "sm_90", nvb=m % 4, prefix=m != 3, seed=m)
             for m in range(1, 9) for fmt in ("bf16", "mxfp4")] + \
            [Case("k3-small", 4, "mxfp4", "gfx950", nvb=2),
             # the MXFP4 paths a plan takes when mma_fp4 cannot (scales above 2^1, widths that
             # do not fit): tl.dot_scaled, and the GEMV experts
             Case("k3-small", 4, "mxfp4", "sm_90", nvb=1, seed=41, tiles="MMA=0"),
             Case("k3-small", 1, "mxfp4", "sm_90", nvb=1, seed=42, tiles="MMA=0,EXPERT_GEMV=1"),
             # experts_up's K split over warp groups (a tile option, off by default)
             Case("k3-small", 1, "mxfp4", "sm_90", nvb=1, seed=43, tiles="KSX=2"),
             Case("k3-small", 5, "mxfp4", "sm_90", nvb=3, seed=44, tiles="KSX=4"),
             # the experts' k-blocks loaded 1 or 2 steps ahead into registers (XPD, off by
             # default), alone and with the K split (each group's own first k-block); at 2
             # rows the ring is the default and would take their place, so it is turned off
             Case("k3-small", 2, "mxfp4", "sm_90", nvb=2, seed=46, tiles="XPD=1,XPDD=1,XRS=0,XRSD=0"),
             Case("k3-small", 7, "mxfp4", "sm_90", nvb=3, seed=47, tiles="XPD=2,KSX=2"),
             # each expert item's weight rows asked of L2 whole, and the next item's (XL2, off by default)
             Case("k3-small", 3, "mxfp4", "sm_90", nvb=1, seed=48, tiles="XL2=1"),
             Case("k3-small", 6, "mxfp4", "sm_90", nvb=2, seed=49, tiles="XL2=2,XPD=1,KSX=2"),
             # the front's weights prefetched into L2 during the seam (a tile option, off by default)
             Case("k3-small", 3, "bf16", "sm_90", nvb=2, seed=45, tiles="PF=512,BNF=16,BNH=48"),
             Case("k3-small", 1, "mxfp4", "sm_90", nvb=1, seed=50, tiles="SDU=1"),
             Case("k3-small", 3, "mxfp4", "sm_90", nvb=2, seed=53, tiles="SDU=2"),
             # the experts' weights and scales streamed through a cp.async ring in shared
             # memory (XRS / XRSD: 2 / 2 at 2 rows, 0 / 2 from 3), with the K split too
             Case("k3-small", 3, "mxfp4", "sm_90", nvb=1, seed=51, tiles="XRS=3,XRSD=2"),
             Case("k3-small", 6, "mxfp4", "sm_90", nvb=2, seed=52, tiles="XRS=2,XRSD=4,KSX=2"),
             # experts_down's expert and slots from the step's expert table, and the expert
             # loads' L2 prefetch-size hint (XET, XL2B / XL2BD; options)
             Case("k3-small", 5, "mxfp4", "sm_90", nvb=2, seed=54, tiles="XET=1,XL2B=256,XL2BD=128"),
             # a routing phase of its own (FR 0; the default routes inside the front), bf16 and MXFP4
             Case("k3-small", 2, "bf16", "sm_90", nvb=1, seed=58, tiles="FR=0"),
             Case("k3-small", 7, "mxfp4", "sm_90", nvb=3, seed=59, tiles="FR=0"),
             Case("k3-small", 4, "mxfp4", "sm_90", nvb=2, seed=62, tiles="LSQ=0")]
REAL_CASES = [Case("kimi-k3-tp8-rank", m, "mxfp4", "sm_90", nvb=m % 8, seed=10 + m) for m in (1, 8)] + \
             [Case("kimi-k3-tp8-rank", 8, "bf16", "sm_90", nvb=8, seed=31),
              # bf16's defaults from the 37th session: FLATD and o_proj's own tile at 1 row, 8 warps at 4
              Case("kimi-k3-tp8-rank", 1, "bf16", "sm_90", nvb=1, seed=66),
              Case("kimi-k3-tp8-rank", 4, "bf16", "sm_90", nvb=3, seed=67),
              # experts_up's shorter K step through a deeper pipeline of its own (STX / STXD: 53rd session)
              Case("kimi-k3-tp8-rank", 1, "bf16", "sm_90", nvb=2, seed=75, tiles="BKX=128,STX=6,STXD=6"),
              Case("kimi-k3-tp8-rank", 1, "bf16", "sm_90", nvb=1, seed=76,
                   tiles="BKX=128,STX=6,BKS=128,STXD=6,BKU=128,STU=6"),
              Case("kimi-k3-tp8-rank", 2, "mxfp4", "sm_90", nvb=2, seed=32, tiles="KSX=2,PF=8192,BNF=16,BNH=56"),
              Case("kimi-k3-tp8-rank", 8, "mxfp4", "sm_90", nvb=0, seed=33, tiles="XPD=1"),
              Case("kimi-k3-tp8-rank", 4, "mxfp4", "sm_90", nvb=4, seed=34, tiles="XPD=2,KSX=2"),
              Case("kimi-k3-tp8-rank", 1, "mxfp4", "sm_90", nvb=1, seed=35, tiles="XL2=2"),
              Case("kimi-k3-tp8-rank", 1, "mxfp4", "sm_90", nvb=3, seed=37, tiles="SDU=1,XPDD=1"),
              Case("kimi-k3-tp8-rank", 1, "mxfp4", "sm_90", nvb=2, seed=38, tiles="XRS=4,XRSD=4,KSX=2"),
              Case("kimi-k3-tp8-rank", 8, "mxfp4", "sm_90", nvb=5, seed=39, tiles="XRS=3,XRSD=3"),
              Case("kimi-k3-tp8-rank", 8, "mxfp4", "sm_90", nvb=6, seed=40, tiles="XET=2,XL2B=256,XL2BD=256"),
              # half the shared down's tiles in experts_up, the rest in experts_down
              Case("kimi-k3-tp8-rank", 1, "mxfp4", "sm_90", nvb=2, seed=55, tiles="SDU=2,SDUQ=8"),
              # a routing phase of its own (FR 0; the default routes inside the front)
              Case("kimi-k3-tp8-rank", 1, "mxfp4", "sm_90", nvb=1, seed=56, tiles="FR=0"),
              # o_proj in latent_up's 16-row GEMV tiles (the default has its own 64-row tile)
              Case("kimi-k3-tp8-rank", 1, "mxfp4", "sm_90", nvb=2, seed=65, tiles="BNO=0"),
              Case("kimi-k3-tp8-rank", 8, "mxfp4", "sm_90", nvb=7, seed=57, tiles="FR=0"),
              Case("kimi-k3-tp8-rank", 1, "mxfp4", "sm_90", nvb=1, seed=63, tiles="LSQ=1"),
              Case("kimi-k3-tp8-rank", 8, "mxfp4", "sm_90", nvb=4, seed=64, tiles="LSQ=0")]


def _report(case, res):
    h = res["hidden"]
    print(f"\nK2GPU {case.name}: max_abs={h['max_abs']:.4g} rel={h['rel']:.4g} cos={h['cosine']:.7f} "
          f"routing_equal={res['routing_equal']} router_max_abs={res['router_scores']['max_abs']:.3g} "
          f"mma={res.get('mma')}")


def _mma_expected(case) -> bool:
    """sm_90 MXFP4 experts at default tiles run through mma_fp4 (every GPU shape here fits)."""
    return case.fmt == "mxfp4" and case.isa == "sm_90" and "MMA=0" not in case.tiles and case.tp == 1


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=[c.name for c in GPU_CASES])
def test_k2_gpu_small_persistent(case):
    from k2_cases import run_case

    res = run_case(case, "cuda", phase=None)
    _report(case, res)
    _check(res)
    assert res["mma"] == _mma_expected(case), "the expert path is not the one the plan should pick"


@pytest.mark.gpu
@pytest.mark.parametrize("case", [GPU_CASES[5], GPU_CASES[15]], ids=lambda c: c.name)
def test_k2_gpu_phase_by_phase(case):
    """The same kernel run as one launch a phase (how the interpreter and the phase timings run it)."""
    from k2_cases import run_case

    res = run_case(case, "cuda", phase="all")
    _report(case, res)
    _check(res)


@pytest.mark.gpu
@pytest.mark.parametrize("case", REAL_CASES, ids=[c.name for c in REAL_CASES])
def test_k2_gpu_real_tp8_rank_shapes(case):
    from k2_cases import run_case

    res = run_case(case, "cuda", phase=None, repeat=2)
    _report(case, res)
    _check(res)
    assert res["mma"] == _mma_expected(case)


@pytest.mark.gpu
def test_k2_gpu_expert_options_against_the_default_launch():
    """The launch options against the plain launch (no register prefetch, the one-program
    seam) on the same weights and inputs (real TP-8 rank shapes, M 4, MXFP4): the
    register and L2 prefetches, deeper dense pipelines, the shared down run in
    experts_up (SDU, all or SDUQ sixteenths of them), experts_down's items one run a
    program (XDB), the fitted carveout (CARVE), the rings, the expert table (XET), the L2 prefetch-size hints (XL2B /
    XL2BD), experts_down's k-blocks in one step (KUD 3) and the routing inside the front
    (FR; its 32-row router and shared gate/up tiles take each output's K sum in the same
    order as the 64-row ones: bitwise on the H200, twenty-third session) change no
    arithmetic, so their output is bitwise the plain one's;
    the K split sums two fp32 halves, o_proj in latent_up's tile (BNO 0, where the default
    has its own tile and K step) sums its products in other chunks, and the split seam sums
    its slices' partials, so theirs may differ by bf16 roundings, within a few steps of each row's scale (the
    forward broke its KL bound once with the K split: docs/evidence/k2-sm90.md). "" is
    the default launch (XPD 1 in experts_up, the split seam, XET 2, XL2B / XL2BD 256, KUD 3
    at these 4 rows, FR). The plain launch routes in a phase of its own (FR 0)."""
    import torch
    from k2_cases import case_dims, run_case

    from sgl_k3_mono.k2.synthetic import random_k2_weights

    base = Case("kimi-k3-tp8-rank", 4, "mxfp4", "sm_90", nvb=4, seed=36,
                tiles="XPD=0,XRSD=0,CARVE=0,SEAM_SPLIT=0,XET=0,XL2B=0,XL2BD=0,KUD=1,FR=0")
    w = random_k2_weights(case_dims(base), fmt="mxfp4", device="cuda", seed=base.seed)
    ref = run_case(base, "cuda", phase=None, weights=w, keep_out=True)
    assert ref["mma"]
    failed = []
    for tiles, bitwise in (("XPD=1,SEAM_SPLIT=0", True), ("XPD=1,XPDD=1,SEAM_SPLIT=0", True),
                           ("XPD=2,XPDD=2,SEAM_SPLIT=0", True),
                           ("SDU=1,SEAM_SPLIT=0", True), ("SDU=2,SEAM_SPLIT=0", True),
                           ("SDU=2,SDUQ=8,SEAM_SPLIT=0", True), ("FR=1,BNR=64,SEAM_SPLIT=0", True),
                           ("FR=1,SEAM_SPLIT=0", True),
                           ("XDB=1,SEAM_SPLIT=0", True), ("XDB=1,XL2=2,XPD=0,SEAM_SPLIT=0", True),
                           ("XL2=2,XPD=0,SEAM_SPLIT=0", True), ("STAGES=3,SEAM_SPLIT=0", True),
                           ("CARVE=1,SEAM_SPLIT=0", True), ("CARVE=1,XRS=2,XRSD=2,SEAM_SPLIT=0", True),
                           ("XET=1,SEAM_SPLIT=0", True), ("XET=2,XDB=1,SEAM_SPLIT=0", True),
                           ("XL2B=256,XL2BD=256,SEAM_SPLIT=0", True), ("KUD=3,SEAM_SPLIT=0", True),
                           ("XL2B=128,XL2BD=128,XRS=2,XRSD=2,SEAM_SPLIT=0", True),
                           ("KSX=2,XPD=0,SEAM_SPLIT=0", False), ("BNO=0,SEAM_SPLIT=0", False),
                           ("XPD=0", False), ("", False)):
        got = run_case(dataclasses.replace(base, tiles=tiles), "cuda", phase=None, weights=w, keep_out=True)
        diff = (got["out"] - ref["out"]).abs()
        print(f"\nK2OPT {tiles}: against the default launch max_abs={diff.max().item():.4g} "
              f"differing={int((diff > 0).sum())}/{diff.numel()} routing_equal={got['routing_equal']}")
        if not (got["mma"] and got["finite"]):
            failed.append(f"{tiles}: mma={got['mma']} finite={got['finite']}")
        elif bitwise and not torch.equal(got["out"], ref["out"]):
            failed.append(f"{tiles}: not bitwise")
        elif not bool((diff.amax(1) <= ref["out"].abs().amax(1) * 2.0 ** -6).all()):
            # a few bf16 steps of the row's scale at most (a lost or doubled partial is far more)
            failed.append(f"{tiles}: past a few bf16 steps of the row's scale")
    assert not failed, failed  # every row runs and prints before the test fails


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (1, 8))
def test_k2_gpu_seam_run_twice_is_bitwise_the_default(rows):
    """SPASS 2 (a probe: the split seam's code runs twice in one launch, so its second pass
    shows what a pass costs with its code fetched; tools/device/seam_probe.py) writes the
    same values again: bitwise the default launch, real TP-8 rank shapes, MXFP4."""
    import torch
    from k2_cases import case_dims, run_case

    from sgl_k3_mono.k2.synthetic import random_k2_weights

    base = Case("kimi-k3-tp8-rank", rows, "mxfp4", "sm_90", nvb=4, seed=41, tiles="")
    w = random_k2_weights(case_dims(base), fmt="mxfp4", device="cuda", seed=base.seed)
    ref = run_case(base, "cuda", phase=None, weights=w, keep_out=True)
    got = run_case(dataclasses.replace(base, tiles="SPASS=2"), "cuda", phase=None, weights=w, keep_out=True)
    apart = int((got["out"] != ref["out"]).sum())
    print(f"\nK2SPASS M={rows}: {apart} of {ref['out'].numel()} apart, routing_equal={got['routing_equal']}")
    assert got["finite"] and got["routing_equal"] and torch.equal(got["out"], ref["out"])


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,rows,tiles", [("mxfp4", 1, "FLATD=1"), ("mxfp4", 1, "FLATD=1,FR=0"), ("bf16", 1, "FLATD=1"),
                                            # on the tensor cores (an option from 2 rows; 40th session)
                                            ("mxfp4", 2, "FLATD=1,BNR=64"), ("bf16", 8, "FLATD=1,BNR=64")])
def test_k2_gpu_flat_dense_loops_are_bitwise_the_default(fmt, rows, tiles):
    """FLATD (the front's and latent_up's tiles and K steps as one pipelined loop a program:
    GEMVs at 1 row, the default there since the thirty-fourth session, for bf16 experts
    since the thirty-seventh; tensor cores from 2 rows, an option) forms the same products
    in the same order: bitwise a K loop a tile (FLATD 0, the same tile widths), real TP-8
    rank shapes, MXFP4 and bf16 experts (with FR the front's loop counts its router and
    shared tiles for the routing helpers; without, only latent_up's loop changes)."""
    import torch
    from k2_cases import case_dims, run_case

    from sgl_k3_mono.k2.synthetic import random_k2_weights

    base = Case("kimi-k3-tp8-rank", rows, fmt, "sm_90", nvb=3, seed=43, tiles=tiles.replace("FLATD=1", "FLATD=0"))
    w = random_k2_weights(case_dims(base), fmt=fmt, device="cuda", seed=base.seed)
    ref = run_case(base, "cuda", phase=None, weights=w, keep_out=True)
    got = run_case(dataclasses.replace(base, tiles=tiles), "cuda", phase=None, weights=w, keep_out=True)
    apart = int((got["out"] != ref["out"]).sum())
    print(f"\nK2FLATD {fmt} M={rows} {tiles}: {apart} of {ref['out'].numel()} apart from FLATD=0, "
          f"routing_equal={got['routing_equal']}")
    assert got["flatd"] == 1 and ref["flatd"] == 0
    assert got["finite"] and got["routing_equal"] and torch.equal(got["out"], ref["out"])


@pytest.mark.gpu
@pytest.mark.parametrize("rows,tiles", [(1, "FLATX=1"), (1, "FLATX=1,BKX=256,STAGES=3"), (8, "FLATX=1")])
def test_k2_gpu_flat_expert_loops_match_a_loop_an_item(rows, tiles):
    """FLATX (experts_up's and experts_down's routed items, and experts_down's shared
    tiles, with their K steps as one pipelined loop a program; the bf16 default) forms each
    item's products in a loop an item's order. On the tensor cores (8 rows) the MMAs are the
    same, so the bits are; with GEMVs (1 row) Triton may lay the flat loop's [rows, tile, K
    chunk] products out otherwise across the threads, which changes the order of the final
    sum over K (at the 1-row K chunk of 512: 48 of 7168 outputs apart in the 39th session; at
    256 none). So: within the reference's bounds, the routing equal, and FLATX 0's outputs
    (the same K chunks) within one bf16 step of the output's scale (on the tensor cores
    bitwise), real TP-8 rank shapes."""
    from k2_cases import case_dims, run_case

    from sgl_k3_mono.k2.synthetic import random_k2_weights

    base = Case("kimi-k3-tp8-rank", rows, "bf16", "sm_90", nvb=3, seed=71, tiles=tiles.replace("FLATX=1", "FLATX=0"))
    w = random_k2_weights(case_dims(base), fmt="bf16", device="cuda", seed=base.seed)
    ref = run_case(base, "cuda", phase=None, weights=w, keep_out=True)
    got = run_case(dataclasses.replace(base, tiles=tiles), "cuda", phase=None, weights=w, keep_out=True)
    a, b = got["out"].float(), ref["out"].float()
    apart = int((a != b).sum())
    # (an intermediate's rounding can move a small output by more than its own bf16 step, so the
    # step is the output's scale's)
    steps = float((a - b).abs().max() / (b.abs().max() * 2.0 ** -7))
    print(f"\nK2FLATX bf16 M={rows} {tiles}: {apart} of {b.numel()} apart from FLATX=0 (at most {steps:.2f} bf16 steps "
          "of the output's scale), "
          f"routing_equal={got['routing_equal']}, max_abs={got['hidden']['max_abs']:.4g} "
          f"cos={got['hidden']['cosine']:.7f}")
    assert got["flatx"] == 1 and ref["flatx"] == 0
    assert got["finite"] and got["routing_equal"] and steps <= 1.0
    assert rows == 1 or apart == 0, "the tensor-core flat loops are the loops an item's MMAs"
    _check(got)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", (1, 8))
def test_k2_gpu_ring_is_bitwise_the_register_loop(rows):
    """mma_fp4's shared-memory ring (XRS / XRSD) feeds the same mmas in the same order as
    the plain register loop, so the launch's output is bitwise the plain one's (real TP-8
    rank shapes, MXFP4, the one-program seam; at 1 row with the SDU choice, at 8 without)."""
    import torch
    from k2_cases import case_dims, run_case

    from sgl_k3_mono.k2.synthetic import random_k2_weights

    base = Case("kimi-k3-tp8-rank", rows, "mxfp4", "sm_90", nvb=rows % 5, seed=60 + rows,
                tiles="XPD=0,XRS=0,XRSD=0,SEAM_SPLIT=0")
    w = random_k2_weights(case_dims(base), fmt="mxfp4", device="cuda", seed=base.seed)
    ref = run_case(base, "cuda", phase=None, weights=w, keep_out=True)
    assert ref["mma"]
    for tiles in ("XRS=3,XRSD=3,SEAM_SPLIT=0", "XRS=2,XRSD=3,SEAM_SPLIT=0"):
        got = run_case(dataclasses.replace(base, tiles=tiles), "cuda", phase=None, weights=w, keep_out=True)
        diff = (got["out"] - ref["out"]).abs()
        print(f"\nK2RING M={rows} {tiles}: against the register loop max_abs={diff.max().item():.4g} "
              f"differing={int((diff > 0).sum())}/{diff.numel()} routing_equal={got['routing_equal']}")
        assert got["mma"] and got["finite"] and got["routing_equal"], tiles
        assert torch.equal(got["out"], ref["out"]), tiles


@pytest.mark.gpu
@pytest.mark.parametrize("fmt,rows,tiles", [("mxfp4", 8, ""), ("mxfp4", 8, "FR=0"), ("bf16", 1, ""), ("bf16", 8, "")])
def test_k2_gpu_graph_replay_is_bitwise_stable(fmt, rows, tiles):
    """1000 replays of a captured launch agree bitwise; with new inputs copied into the
    captured buffers, a replay equals an eager run on those inputs (the default, FR: its
    tile counts start from 0 in every replay; FR 0; and bf16 at 1 and 8 rows, FLATX on
    GEMVs and on the tensor cores: its loops' lengths follow each step's routing)."""
    import torch

    from k2_cases import case_dims, make_inputs, to_device
    from sgl_k3_mono.k2.host import K2Launch, K2Plan
    from sgl_k3_mono.k2.reference import K2Weights

    case = Case("k3-small", rows, fmt)
    d = case_dims(case)
    w = to_device(K2Weights.random(d, seed=5, expert_format=fmt), "cuda").shard(0, 1)
    attn, bank, prefix = make_inputs(d, rows, seed=6, nvb=2, nb=3, with_prefix=True, device="cuda")
    launch = K2Launch.build(K2Plan.for_weights(w, rows, isa="sm_90", bank_rows=3,
                                               grid=torch.cuda.get_device_properties(0).multi_processor_count), "cuda")
    if tiles:
        launch.set_block(**dataclasses.replace(case, tiles=tiles).block())
    out = torch.empty(rows, d.hidden, dtype=torch.bfloat16, device="cuda")
    launch(w, attn, bank, 2, prefix, out)  # compile outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        launch(w, attn, bank, 2, prefix, out)
    g.replay()
    first = out.clone()
    for _ in range(1000):
        g.replay()
        if not torch.equal(out, first):
            break
    torch.cuda.synchronize()
    assert launch.tiles_used.get("FLATX", 0) == int(fmt == "bf16")
    assert torch.equal(out, first), "a replay changed the output"
    eager = torch.empty_like(out)
    for seed in range(3):
        a2, b2, p2 = make_inputs(d, rows, seed=50 + seed, nvb=2, nb=3, with_prefix=True, device="cuda")
        attn.copy_(a2), bank.copy_(b2), prefix.copy_(p2)
        g.replay()
        launch(w, attn, bank, 2, prefix, eager)
        torch.cuda.synchronize()
        assert torch.equal(out, eager)


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", ["", "FR=0"])
def test_k2_gpu_fault_injection_stops_the_process_loudly(tiles):
    """Program 0 held in the front: every other program's wait expires (with FR, the
    default, the helpers' waits on the router's tile count among them, program 0 holding a
    router tile)."""
    from sgl_k3_mono.runtime.failure import EXIT_CODE

    env = {**os.environ, "SGL_K3_MONO_STALL": "0:5:k2:front"}
    import time

    t0 = time.time()
    done = subprocess.run([sys.executable, str(HERE / "k2_stall_worker.py"), "2.0", tiles], env=env,
                          capture_output=True, text=True, timeout=120)
    took = time.time() - t0
    print(done.stdout, done.stderr[-1500:])
    assert done.returncode == EXIT_CODE, (done.returncode, done.stderr[-2000:])
    assert "rank 0, layer 5, launch K2, phase 'front'" in done.stderr
    assert "NOT STOPPED" not in done.stdout
    assert took < 60  # compile + deadline 2 s + exit; the deadline part is checked below
