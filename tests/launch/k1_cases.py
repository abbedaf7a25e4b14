"""K1 test cases: build fresh random weights, states and inputs (never zeros), run one
implementation of K1 and the reference, and measure everything against the spec's bounds.

Run as a script it is the CPU worker: `TRITON_INTERPRET=1 python k1_cases.py '<case json>' ...`
runs each case under Triton's interpreter (phase by phase) and prints one JSON line per
case (TRITON_INTERPRET must be set before Triton decorates the kernel, so the interpreter
runs in its own process).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

HERE = Path(__file__).resolve().parent
if __name__ == "__main__":
    sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parent.parent)]
    from support.triton_interp import patch

    patch()

import torch  # noqa: E402

from sgl_k3_mono.k1 import K1Weights  # noqa: E402
from sgl_k3_mono.k1.host import K1IO, K1Plan, K1Scratch, K1Views, run_k1  # noqa: E402
from sgl_k3_mono.numerics import measure, violations  # noqa: E402

NB = 8  # bank rows (K3)


@dataclass(frozen=True)
class Case:
    name: str
    hidden: int
    heads: int
    """KDA heads over all ranks; this rank holds heads // tp."""
    rows: int
    mode: str = "decode"
    tp: int = 1
    rank: int = 0
    nvb: int = 2
    write: bool = False
    contrib: bool = True
    pad_row: bool = True
    """Decode: the last row (M > 1) is padding (slot -1)."""
    pad_slot: Optional[int] = None
    steps: int = 1
    """Consecutive decode steps on the same states (fresh inputs each step)."""
    seed: int = 0
    isa: str = "sm_90"
    phased: bool = True
    grid: Optional[int] = None
    head_dim: int = 128
    impl: str = "triton"
    """run_k1's device code under test ("flydsl": tests/launch/test_k1_flydsl.py, gfx950)."""
    seam_split: bool = True
    """K1Plan.seam_split: the seam spread over several programs a row (False: one a row)."""
    prefetch: int = 0
    """K1Plan.prefetch: bytes of each in-projection row asked into L2 during the seam."""
    g_last: Optional[bool] = None
    """K1Plan.g_last: the gate's rows streamed during the recurrence (None: the plan's default)."""


def _rand_state(case: Case, lw, n_slots: int, g: torch.Generator):
    """SGLang-like pools with a slot pitch larger than the payload (strides must be honoured)."""
    d, h, p = lw.head_dim, lw.heads, lw.proj
    conv = torch.randn(n_slots, lw.conv_width, 3 * p, generator=g).bfloat16()[:, : lw.conv_width - 1]
    ssm = (torch.randn(n_slots, h + 1, d, d, generator=g) * 0.05)[:, :h]
    return conv, ssm


def _seam_inputs(case: Case, g: torch.Generator):
    m, hd = case.rows, case.hidden
    prefix = torch.randn(m, hd, generator=g).bfloat16()
    contrib = (torch.randn(m, hd, generator=g) * 0.3).bfloat16() if case.contrib else None
    bank = (torch.randn(m, NB, hd, generator=g) * 10 ** (torch.rand(m, NB, 1, generator=g) - 0.5)).bfloat16()
    return prefix, contrib, bank


def _io(case: Case, plan: K1Plan, lw, conv, ssm, slots, g: torch.Generator, vbuf=None) -> K1IO:
    prefix, contrib, bank = _seam_inputs(case, g)
    nan = float("nan")
    return K1IO(prefix=prefix, bank=bank, nvb=case.nvb, write=case.write, slots=slots, conv_pool=conv, ssm_pool=ssm,
                out=torch.full((case.rows, lw.proj), nan).bfloat16(), contribution=contrib,
                residual=None if case.write else torch.full((case.rows, case.hidden), nan).bfloat16(),
                verify_conv=None if vbuf is None else vbuf[0], verify_ssm=None if vbuf is None else vbuf[1],
                verify_index=1, pad_slot=case.pad_slot)


def _to(io: K1IO, device) -> K1IO:
    return K1IO(**{k: (v.to(device).clone() if isinstance(v, torch.Tensor) else v) for k, v in io.__dict__.items()})


def _restride_like(dst_base_shape, t: torch.Tensor, device) -> torch.Tensor:
    """Copy t to device keeping a larger slot pitch (pools are views of bigger buffers)."""
    full = torch.empty(dst_base_shape, dtype=t.dtype, device=device)
    full.normal_()
    view = full[tuple(slice(0, s) for s in t.shape)]
    view.copy_(t)
    return view


def _device_io(io: K1IO, device) -> K1IO:
    out = _to(io, device)
    conv, ssm = io.conv_pool, io.ssm_pool
    out.conv_pool = _restride_like((conv.shape[0], conv.shape[1] + 1, conv.shape[2]), conv, device)
    out.ssm_pool = _restride_like((ssm.shape[0], ssm.shape[1] + 1, *ssm.shape[2:]), ssm, device)
    return out


def _metric(name: str, got: torch.Tensor, ref: torch.Tensor) -> dict:
    m = measure(got.float().cpu(), ref.float().cpu())
    m["violations"] = violations(name, {k: m[k] for k in ("max_abs", "rel", "cosine")})
    m["finite"] = bool(torch.isfinite(got.float()).all())
    return m


def run_case(case: Case, device: str = "cpu", *, scratch_keep: Optional[dict] = None) -> dict:
    """Run `case` on `device` with the Triton launch (phase by phase if case.phased) and
    the reference; return the measurements as plain data."""
    g = torch.Generator().manual_seed(case.seed)
    w = K1Weights.random(case.hidden, case.heads, case.head_dim, seed=case.seed)
    lw = w.shard(case.rank, case.tp)
    views_cpu = K1Views.from_local(lw)
    views = K1Views.from_local(_shard_to(lw, device))
    plan = K1Plan.for_weights(views, case.rows, case.mode, bank_rows=NB, tp=case.tp, rank=case.rank,
                              isa=case.isa, grid=case.grid, seam_split=case.seam_split, prefetch=case.prefetch,
                              **({} if case.g_last is None else {"g_last": case.g_last}))
    scratch = K1Scratch.allocate(plan, device)
    m = case.rows
    n_slots = m + 3
    conv0, ssm0 = _rand_state(case, lw, n_slots, g)
    if case.mode == "decode":
        slots = (torch.randperm(n_slots, generator=g)[:m]).to(torch.int32)
        if case.pad_row and m > 1:
            slots[-1] = -1
        if case.pad_slot is not None:
            slots[0] = case.pad_slot
        vbuf = None
    else:
        slots = torch.tensor([int(torch.randint(0, n_slots, (1,), generator=g))], dtype=torch.int32)
        d, h, p, kw = lw.head_dim, lw.heads, lw.proj, lw.conv_width
        vbuf = (torch.randn(3, m + 1, kw - 1, 3 * p, generator=g).bfloat16(),
                torch.randn(3, m + 1, h, d, d, generator=g))
    res = {"case": case.name, "plan": {k: v for k, v in plan.constexprs().items() if k in ("BN_EFF", "NV", "BV")}}
    if plan.g_last:
        res["plan"].update({k: plan.constexprs()[k] for k in ("GL", "NKP", "BNG_EFF")})
    ref_io = None
    ours_io = None
    conv_ref, ssm_ref = conv0.clone(), ssm0.clone()
    conv_dev = ssm_dev = None
    worst: dict = {}
    for step in range(case.steps):
        io = _io(case, plan, lw, conv_ref, ssm_ref, slots, g, vbuf)
        ref_io = _to(io, "cpu")
        run_k1(plan, views_cpu, ref_io, impl="reference")
        ours_io = _device_io(io, device)
        if conv_dev is not None:  # carry our own states from the previous step
            ours_io.conv_pool.copy_(conv_dev)
            ours_io.ssm_pool.copy_(ssm_dev)
        before_conv, before_ssm = ours_io.conv_pool.clone(), ours_io.ssm_pool.clone()
        before_bank = ours_io.bank.clone()
        run_k1(plan, views, ours_io, impl=case.impl, scratch=scratch, phased=case.phased, layer=3)
        if device != "cpu":
            torch.cuda.synchronize()
        step_res = _compare(case, plan, lw, ref_io, ours_io, slots, before_conv, before_ssm, before_bank,
                            scratch)
        if case.steps > 1:  # say which step broke what (the printed metrics are the last step's)
            step_res["problems"] = [f"step {step}: {x}" for x in step_res["problems"]]
        for k, v in step_res.items():
            worst.setdefault(k, []).append(v)
        conv_ref, ssm_ref = ref_io.conv_pool, ref_io.ssm_pool
        conv_dev, ssm_dev = ours_io.conv_pool, ours_io.ssm_pool
    res["steps"] = case.steps
    res.update({k: v[-1] for k, v in worst.items()})
    res["all_violations"] = sorted({x for v in worst.get("problems", []) for x in v})
    if scratch_keep is not None:
        scratch_keep.update(plan=plan, views=views, io=ours_io, scratch=scratch)
    return res


def _shard_to(lw, device):
    from sgl_k3_mono.k1.weights import K1LocalWeights
    from sgl_k3_mono.reference.attn_res import SeamWeights

    t = lambda x: x.to(device)  # noqa: E731
    return K1LocalWeights(qkvg=t(lw.qkvg), bfa=t(lw.bfa), f_b=t(lw.f_b), conv=t(lw.conv), a_log=t(lw.a_log),
                          dt_bias=t(lw.dt_bias), o_norm=t(lw.o_norm),
                          seam=SeamWeights(t(lw.seam.proj), t(lw.seam.score_norm), t(lw.seam.out_norm)),
                          heads=lw.heads, head_dim=lw.head_dim, lower_bound=lw.lower_bound)


def _bf16_ulp_ok(got: torch.Tensor, ref: torch.Tensor) -> bool:
    """Equal up to one bf16 ulp (a rounding flip of an fp32 sum taken in another order), or
    for a sum that cancels to near zero, up to fp32 summation error at the tensor's scale
    (a 7168-term fp32 dot taken in another order: measured on the H200 up to ~2^-13 of the
    row's largest value)."""
    ref = ref.float()
    tol = ref.abs() * 2.0 ** -7 + ref.abs().max() * 2.0 ** -12
    return bool(((got.float() - ref).abs() <= tol).all())


def _compare(case: Case, plan: K1Plan, lw, ref: K1IO, ours: K1IO, slots, before_conv, before_ssm, before_bank,
             scratch: K1Scratch) -> dict:
    """Everything one step must satisfy; `problems` lists what failed."""
    problems: list[str] = []
    m, p = case.rows, lw.proj
    out, ref_out = ours.out.cpu(), ref.out.cpu()
    r = {"attn_out": _metric("k1.attn_out", out, ref_out)}
    problems += r["attn_out"]["violations"]
    if not r["attn_out"]["finite"]:
        problems.append("out: a poisoned (NaN) element survived")
    sl = slots.tolist()
    live = [i for i, s in enumerate(sl) if s >= 0 and s != case.pad_slot]
    if case.mode == "decode":
        dead = [i for i in range(m) if i not in live]
        if dead and not bool((out[dead] == 0).all()):
            problems.append("padded rows are not zero")
        used = [sl[i] for i in live]
        n_slots = ours.ssm_pool.shape[0]
        unused = [s for s in range(n_slots) if s not in used]
        conv, ssm = ours.conv_pool.cpu(), ours.ssm_pool.cpu()
        if unused and not (torch.equal(conv[unused], before_conv.cpu()[unused])
                           and torch.equal(ssm[unused], before_ssm.cpu()[unused])):
            problems.append("an unused state slot changed")
        if used:
            name = "k1.ssm_state" if case.steps == 1 else "k1.ssm_state_64_steps"  # carried states drift
            r["ssm_state"] = _metric(name, ssm[used], ref.ssm_pool[used])
            problems += r["ssm_state"]["violations"]
            r.update(_conv_checks(conv[used], ref.conv_pool[used], before_conv.cpu()[used],
                                  scratch.proj.cpu()[live, : 3 * p], _own_in_proj(lw, scratch, live), problems))
    else:
        vi = ours.verify_index
        vc, vs = ours.verify_conv.cpu(), ours.verify_ssm.cpu()
        if not (torch.equal(ours.conv_pool.cpu(), before_conv.cpu()) and torch.equal(ours.ssm_pool.cpu(),
                                                                                     before_ssm.cpu())):
            problems.append("verify changed the committed pools")
        if live:
            r["ssm_state"] = _metric("k1.ssm_state", vs[vi, :m], ref.verify_ssm[vi, :m])
            problems += r["ssm_state"]["violations"]
            # window after token t = last K-1 of [committed window, x_0..x_t]
            committed = before_conv.cpu()[sl[0]]
            prev = torch.stack([vc[vi, t - 1] if t else committed for t in range(m)])
            r.update(_conv_checks(vc[vi, :m], ref.verify_conv[vi, :m], prev, scratch.proj.cpu()[:m, : 3 * p],
                                  _own_in_proj(lw, scratch, list(range(m))), problems))
        else:
            if not bool((out == 0).all()):
                problems.append("verify on a padded slot: output not zero")
        # scratch rows and steps the request does not own stay as they were
        others = [i for i in range(vc.shape[0]) if i != vi]
        if not (torch.equal(vc[others], ref.verify_conv[others]) and torch.equal(vs[others], ref.verify_ssm[others])
                and torch.equal(vc[vi, m:], ref.verify_conv[vi, m:]) and torch.equal(vs[vi, m:], ref.verify_ssm[vi, m:])):
            problems.append("verify scratch outside the request's rows/steps changed")
    bank = ours.bank.cpu()
    if case.write:
        if not torch.equal(bank, ref.bank):
            problems.append("bank after the block write differs")
    elif not torch.equal(bank, before_bank.cpu()):
        problems.append("a non-write layer changed the bank")
    if ours.residual is not None and not torch.equal(ours.residual.cpu(), ref.residual):
        problems.append("residual (prefix after the add) differs")
    if not case.phased and scratch.sync.is_cuda and int(scratch.sync[3]) != 0:
        problems.append("the sync buffer's TALLY word (GL's gate tiles) was not cleared at departure")
    r["problems"] = problems
    return r


def _own_in_proj(lw, scratch: K1Scratch, rows: list) -> torch.Tensor:
    """q|k|v of the launch's own seam output h, in float64, rounded to bf16 once: what the
    in-projection must give for the h it was handed."""
    p = lw.proj
    h = scratch.h.cpu()[rows].double()
    return (h @ lw.qkvg[: 3 * p].cpu().double().t()).bfloat16()


def _conv_checks(got: torch.Tensor, ref: torch.Tensor, before: torch.Tensor, x: torch.Tensor,
                 x_own: torch.Tensor, problems: list) -> dict:
    """Conv windows [N, K-1, C]: the carried rows are bitwise the old ones shifted; the new row
    is bitwise the launch's own in-projection output, and that is the float64 projection of
    the launch's own h (x_own) within one bf16 ulp (the fp32 sum runs in another order, so
    a rounding may flip). Against the reference the window is held to k1.conv_state: the
    seam's h may itself differ from the reference's by a bf16 flip, which a projection
    that cancels to near zero magnifies past any ulp test (seen on the H200 in 64-step
    runs, docs/evidence/k1-sm90.md)."""
    if not torch.equal(got[:, :-1], before[:, 1:]):
        problems.append("conv window: carried rows are not the old rows shifted")
    if not torch.equal(got[:, -1], x.to(got.dtype)):
        problems.append("conv window: new row is not the in-projection output")
    if not _bf16_ulp_ok(x.to(got.dtype), x_own):
        problems.append("conv window: new row off the float64 projection of the launch's own h by more than "
                        "one bf16 ulp")
    bound = _metric("k1.conv_state", got, ref)
    problems += bound["violations"]
    m = measure(got.float(), ref.float())
    m["flips"] = int((got != ref).sum())
    return {"conv_state": m}


if __name__ == "__main__":
    for spec in sys.argv[1:]:
        case = Case(**json.loads(spec))
        try:
            res = run_case(case, "cpu")
        except Exception as e:  # report; the test fails with the message
            import traceback

            res = {"case": case.name, "error": f"{type(e).__name__}: {e}\n{traceback.format_exc()[-2000:]}"}
        print(json.dumps(res), flush=True)


def case_json(case: Case) -> str:
    return json.dumps(dataclasses.asdict(case))
