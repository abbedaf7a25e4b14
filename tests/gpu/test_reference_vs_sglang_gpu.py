"""The references against SGLang 0.5.23's own GPU kernel ops, on the H200.

SGLang cannot be installed whole on the lent GPU machine (its sgl_kernel is tied to
torch 2.14.1); the kit (shared/device/make-sglang-kit.sh) brings its Python package,
whose kernel ops under sglang.kernels.ops import and run there. Each test prints the
measured error, which docs/evidence/reference.md records.
"""

from __future__ import annotations

import pytest
import torch

from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference import attn_res, kda
from sgl_k3_mono.reference.ops import bf16, situ

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _op(module: str):
    try:
        return __import__(module, fromlist=["_"])
    except Exception as e:  # the kit is not on this machine
        pytest.skip(f"SGLang kernel op {module} does not import here ({type(e).__name__}: {e}); "
                    "run with the SGLang kit on PYTHONPATH")


def report(name: str, got: torch.Tensor, ref: torch.Tensor) -> dict:
    m = measure(got.float(), ref.float())
    print(f"\nREFVS {name}: max_abs={m['max_abs']:.3e} rel={m['rel']:.3e} cosine={m['cosine']:.8f}")
    return m


@pytest.mark.parametrize("rows", [1, 8])
def test_situ_and_mul(rows):
    op = _op("sglang.kernels.ops.activation.kimi_k3_situ_and_mul")
    torch.manual_seed(rows)
    x = (torch.randn(rows, 2 * 768, device=DEV) * 3).bfloat16()
    got = op.situ_and_mul(x, None, 4.0, 25.0)
    ref = bf16(situ(x[:, :768], x[:, 768:], 4.0, 25.0))
    m = report(f"situ_and_mul rows={rows}", got, ref)
    assert m["max_abs"] <= 2 ** -6 * ref.abs().max().item() and m["cosine"] > 0.99999


def test_mla_output_gate():
    op = _op("sglang.kernels.ops.elementwise.mla_output_gate")
    torch.manual_seed(0)
    x = torch.randn(8, 1536, device=DEV).bfloat16()
    g = (torch.randn(8, 1536, device=DEV) * 2).bfloat16()
    got = op.kimi_k3_mla_output_gate(x, g)
    ref = bf16(x.float() * bf16(torch.sigmoid(g.float())))  # what the reference MLA applies
    m = report("mla_output_gate", got, ref)
    assert m["max_abs"] == 0.0


@pytest.mark.xfail(strict=True, reason=(
    "seen 2026-11-30 on the H200 with the kit (triton 3.6): SGLang's standalone FusedRMSNormGated(sigmoid) "
    "disagrees with the reference at every T from 1 to 300, PDL on or off (cosine ~0.96), while SGLang's "
    "fused KDA decode, whose norm is the same math, agrees (cosine 0.99999); on the CPU under Triton's "
    "interpreter the same op is bit-exact to the reference. Cause not established (the machine's triton "
    "3.6 is not SGLang's pinned one). Strict: the day it agrees, this fails and the mark goes."))
def test_gated_output_norm():
    op = _op("sglang.kernels.ops.attention.fla.fused_norm_gate")
    torch.manual_seed(1)
    x = torch.randn(8 * 12, 128, device=DEV).bfloat16()
    g = torch.randn(8 * 12, 128, device=DEV).bfloat16()
    norm = op.FusedRMSNormGated(128, eps=1e-5, activation="sigmoid", device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        norm.weight.copy_((1 + 0.1 * torch.randn(128, device=DEV)).bfloat16())
    got = norm(x, g)
    ref = bf16(kda.gated_rmsnorm(x, norm.weight, g, eps=1e-5, activation="sigmoid"))
    m = report("FusedRMSNormGated(sigmoid)", got, ref)
    assert m["max_abs"] <= 2 ** -7 * ref.abs().max().item() and m["cosine"] > 0.99999


@pytest.mark.parametrize("nvb", [1, 4, 8])
def test_attn_res_hip_kernel_is_the_gfx950_seam(nvb):
    """SGLang's gfx950 aggregation kernel is Triton: it runs here too, the gfx950 oracle."""
    op = _op("sglang.kernels.ops.attention.attn_res_hip")
    torch.manual_seed(nvb)
    T, NB, H = 8, 8, 7168
    bank = torch.randn(T, NB, H, device=DEV).bfloat16()
    prefix = (torch.randn(T, H, device=DEV) * 2).bfloat16()
    proj = (torch.randn(1, H, device=DEV) / H ** 0.5).bfloat16()
    score_norm = (1 + 0.1 * torch.randn(H, device=DEV)).bfloat16()
    out_norm = (1 + 0.1 * torch.randn(H, device=DEV)).bfloat16()
    cw = score_norm.float() * proj.float().reshape(-1)
    out = torch.empty(T, H, device=DEV, dtype=torch.bfloat16)
    op.attn_res_hip(prefix, bank, cw, out_norm, out, nvb, 1e-5, 1e-5)
    ref = attn_res.aggregate(bank, nvb, prefix, proj, score_norm, out_norm, 1e-5, isa="gfx950")
    m = report(f"attn_res_hip nvb={nvb}", out, ref)
    assert m["cosine"] > 0.99999 and m["max_abs"] <= 2 ** -6 * ref.abs().max().item()


def _kda_reference(mixed_qkv, a, b, conv_pool, conv_w, a_log, dt_bias, gate, onorm_w, ssm_pool, idx, lb):
    """The reference pieces composed as one KDA decode token a row (rows with idx < 0 skipped)."""
    B, H = b.shape
    seg = H * 128
    out = torch.zeros(B, seg, device=mixed_qkv.device)
    conv_pool, ssm_pool = conv_pool.clone(), ssm_pool.clone()
    live = (idx >= 0).nonzero().flatten()
    slots = idx[live].long()
    y, window = kda.conv_update(conv_pool[slots], mixed_qkv[live], conv_w)
    conv_pool[slots] = window
    q, k, v = (y[:, i * seg:(i + 1) * seg].reshape(-1, H, 128) for i in range(3))
    decay = torch.exp(kda.log_decay(a[live].reshape(-1, H, 128), a_log, dt_bias.reshape(H, 128), lb))
    q = kda.l2norm(q) * 128 ** -0.5
    k = kda.l2norm(k)
    o, s = kda.delta_rule_step(ssm_pool[slots], q, k, v, decay, torch.sigmoid(b[live].float()))
    ssm_pool[slots] = s
    o = kda.gated_rmsnorm(bf16(o), onorm_w, gate[live].reshape(-1, H, 128))
    out[live] = bf16(o).reshape(-1, seg)
    return out, conv_pool, ssm_pool


@pytest.mark.parametrize("rows", [1, 2, 4, 8])
def test_kda_fused_decode_at_tp8_shapes(rows):
    """SGLang's CUDA fused KDA decode (the sm_90 standard path's K1 core) against the
    reference composition, 12 heads x 128, fresh random states, one padded row."""
    op = _op("sglang.kernels.ops.attention.kda_fused_decode")
    torch.manual_seed(100 + rows)
    H, seg, slots = 12, 12 * 128, 16
    mixed = torch.randn(rows, 3 * seg, device=DEV).bfloat16()
    a = (torch.randn(rows, seg, device=DEV) * 2).bfloat16()
    b = torch.randn(rows, H, device=DEV).bfloat16()
    gate = torch.randn(rows, seg, device=DEV).bfloat16()
    conv_pool = torch.randn(slots, 3, 3 * seg, device=DEV).bfloat16()
    conv_w = torch.randn(3 * seg, 4, device=DEV) * 0.5
    a_log = torch.randn(H, device=DEV) * 0.5
    dt_bias = torch.randn(seg, device=DEV) * 0.5
    onorm_w = (1 + 0.1 * torch.randn(128, device=DEV)).bfloat16().float()
    ssm_pool = torch.randn(slots, H, 128, 128, device=DEV) * 0.1
    idx = torch.randperm(slots - 1, device=DEV)[:rows].int() + 1
    if rows > 1:
        idx[-1] = -1  # a padded graph row: zero output, no state touched
    ref_out, ref_conv, ref_ssm = _kda_reference(mixed, a, b, conv_pool, conv_w, a_log, dt_bias, gate, onorm_w,
                                                ssm_pool, idx, -5.0)
    conv_run, ssm_run = conv_pool.clone(), ssm_pool.clone()
    assert op.covered(mixed, a, b, conv_run, ssm_run, idx, gate)
    wt = conv_w.t().contiguous()
    got = op.kda_fused_decode(mixed, a, b, conv_run, wt[:, :seg].contiguous(), wt[:, seg:2 * seg].contiguous(),
                              wt[:, 2 * seg:].contiguous(), torch.zeros(3 * seg, device=DEV), a_log, dt_bias, gate,
                              onorm_w, ssm_run, idx, scale=128 ** -0.5, onorm_eps=1e-5, lower_bound=-5.0)
    got = got.reshape(rows, seg)
    mo = report(f"kda_fused_decode out rows={rows}", got, ref_out)
    ms = report(f"kda_fused_decode ssm rows={rows}", ssm_run, ref_ssm)
    mc = report(f"kda_fused_decode conv rows={rows}", conv_run, ref_conv)
    assert mc["max_abs"] == 0.0
    # SGLang's CUDA kernel uses fast exp/rsqrt: fp32 states agree to ~1e-4 relative
    assert ms["rel"] < 1e-3 and ms["cosine"] > 0.99999
    assert mo["cosine"] > 0.9999
    untouched = torch.ones(slots, dtype=torch.bool, device=DEV)
    untouched[idx[idx >= 0].long()] = False
    assert torch.equal(ssm_run[untouched], ssm_pool[untouched]) and torch.equal(conv_run[untouched], conv_pool[untouched])
    if rows > 1:
        assert torch.all(got[-1] == 0)


def test_references_run_on_the_gpu_as_on_the_cpu():
    """Device-agnostic: the same reference call on CUDA and CPU agrees to fp32 rounding."""
    torch.manual_seed(3)
    bank = torch.randn(4, 8, 1024).bfloat16()
    prefix = torch.randn(4, 1024).bfloat16()
    w = [torch.randn(1, 1024).bfloat16(), (1 + 0.1 * torch.randn(1024)).bfloat16(),
         (1 + 0.1 * torch.randn(1024)).bfloat16()]
    cpu = attn_res.aggregate(bank, 5, prefix, *w, 1e-5, isa="sm_90")
    gpu = attn_res.aggregate(bank.to(DEV), 5, prefix.to(DEV), *(t.to(DEV) for t in w), 1e-5, isa="sm_90")
    m = report("attn_res.aggregate cuda vs cpu", gpu.cpu(), cpu)
    assert m["cosine"] > 0.99999
