"""Runs the split seam (runtime/triton_seam.py) under Triton's CPU interpreter against the
reference aggregate and prints one JSON line per case. Started by test_split_seam.py in a
fresh process with TRITON_INTERPRET=1.

A case is JSON: rows, hidden, nvb, slice (BS), isa, where p goes ("resid": K2 and K1's
plain layers, "bank": K1's block-write layers), seed, and "persistent": the persistent
device function on one program a row (only one slice a row can run there: the
interpreter runs programs one after another, so a row wait over several would expire)."""

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from support.triton_interp import patch, patch_clock  # noqa: E402

patch()
patch_clock()
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import sgl_k3_mono.runtime.triton_sync as sync  # noqa: E402
from sgl_k3_mono.reference.attn_res import add_prefix, aggregate  # noqa: E402
from sgl_k3_mono.runtime.triton_seam import (SEAM_STEPS, seam_part_width, split_seam_persistent,  # noqa: E402
                                             split_seam_step)

NB, NBP, EPS = 8, 16, 1e-5  # bank rows, mixed rows padded (K2's NBB), the norms' eps


@triton.jit
def _one_step(prefix_ptr, contrib_ptr, bank_ptr, resid_ptr, wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr, M,
              nvb, eps, H: tl.constexpr, NB: tl.constexpr, NBP: tl.constexpr, BS: tl.constexpr, SP: tl.constexpr,
              SPP: tl.constexpr, STEP: tl.constexpr, WRITE_BANK: tl.constexpr, ROUND_MIX: tl.constexpr):
    pid = tl.program_id(0)
    if pid < M * SP:
        split_seam_step(pid, M, nvb, eps, prefix_ptr, H, contrib_ptr, H, bank_ptr, NB * H, H, resid_ptr, H,
                        wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr, STEP, H, NBP, BS, SP, SPP, True,
                        WRITE_BANK, not WRITE_BANK, ROUND_MIX)


@triton.jit
def _persistent(prefix_ptr, contrib_ptr, bank_ptr, resid_ptr, wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr,
                scnt_ptr, err_addr, M, nvb, eps, H: tl.constexpr, NB: tl.constexpr, NBP: tl.constexpr,
                BS: tl.constexpr, WRITE_BANK: tl.constexpr, ROUND_MIX: tl.constexpr):
    pid = tl.program_id(0)
    split_seam_persistent(pid, M, nvb, eps, prefix_ptr, H, contrib_ptr, H, bank_ptr, NB * H, H, resid_ptr, H,
                          wproj_ptr, wsn_ptr, won_ptr, h_ptr, mix_ptr, spart_ptr, scnt_ptr,
                          sync.now_ns(), 10**12, err_addr, 0, 0, H, NBP, BS, 1, 1, True, WRITE_BANK,
                          not WRITE_BANK, ROUND_MIX, False)


def run(case: dict) -> dict:
    m, h, nvb, bs = case["rows"], case["hidden"], case["nvb"], case["slice"]
    g = torch.Generator().manual_seed(case["seed"])
    bf = lambda *s, scale=1.0, shift=0.0: (shift + scale * torch.randn(*s, generator=g)).bfloat16()  # noqa: E731
    prefix, contrib, bank = bf(m, h, scale=4.0), bf(m, h), bf(m, NB, h, scale=4.0)
    wproj, wsn, won = bf(h, scale=0.05), bf(h, scale=0.1, shift=1.0), bf(h, scale=0.1, shift=1.0)
    write_bank = case["p_to"] == "bank"
    bank_in = bank.clone()
    resid = torch.full((m, h), float("nan")).bfloat16()
    out = torch.full((m, h), float("nan")).bfloat16()
    mix = torch.full((m, h), float("nan"))
    sp = -(-h // bs)
    spart = torch.full((m, sp, seam_part_width(NBP)), float("nan"))  # poisoned: an unwritten read shows in h
    round_mix = case["isa"] == "sm_90"
    if case["persistent"]:
        assert sp == 1, "the interpreter runs one slice a row only"
        err = torch.zeros(8, dtype=torch.int32)
        _persistent[(m,)](prefix, contrib, bank, resid, wproj, wsn, won, out, mix, spart,
                          torch.zeros(m, dtype=torch.int32), err.data_ptr(), m, nvb, EPS, H=h, NB=NB, NBP=NBP, BS=bs,
                          WRITE_BANK=write_bank, ROUND_MIX=round_mix)
    else:
        for step in range(SEAM_STEPS):
            _one_step[(m * sp,)](prefix, contrib, bank, resid, wproj, wsn, won, out, mix, spart, m, nvb, EPS, H=h, NB=NB,
                                 NBP=NBP, BS=bs, SP=sp, SPP=triton.next_power_of_2(sp), STEP=step,
                                 WRITE_BANK=write_bank, ROUND_MIX=round_mix)
    p = add_prefix(prefix, contrib)
    ref = aggregate(bank_in, nvb, p, wproj, wsn, won, EPS, isa=case["isa"]).float()
    p_out = bank[:, nvb] if write_bank else resid
    d = (out.float() - ref).abs()
    ulp = torch.where(ref == 0, torch.full_like(ref, 2.0**-133), ref.abs() * 2.0**-7)  # >= one bf16 ulp of ref
    return {"slices": sp, "finite": bool(torch.isfinite(out.float()).all()), "p_equal": bool(torch.equal(p_out, p)),
            "max_ulps": float((d / ulp).max()), "differing": float((d > 0).float().mean()),
            "max_abs": float(d.max())}


for spec in sys.argv[1:]:
    case = json.loads(spec)
    try:
        res = run(case)
    except Exception as e:  # report, let the test fail with the message
        res = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps({"case": case, **res}), flush=True)
