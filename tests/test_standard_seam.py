"""The benchmarks' standard seam (`sgl_k3_mono.standard_seam`) calls SGLang's own sm_90
Triton pair (`attn_residual._mix_fused`) on the GPU. Here, on the CPU under Triton's
interpreter, that pair is fed exactly as the benchmarks feed it and must give the torch
seam's mixture (and the reference aggregate's output), so the standard column times the
same seam SGLang runs."""

from __future__ import annotations

import os
import subprocess
import sys

WORKER = r'''
import torch
from sglang.srt.layers import attn_residual
from sgl_k3_mono import standard_seam
from sgl_k3_mono.numerics import measure
from sgl_k3_mono.reference.attn_res import aggregate

g = torch.Generator().manual_seed(0)
m, nb, h, nvb, eps = 3, 5, 2048, 3, 1e-6
bank = torch.randn(m, nb, h, generator=g).bfloat16()
prefix = (2 * torch.randn(m, h, generator=g)).bfloat16()
proj = (0.05 * torch.randn(1, h, generator=g)).bfloat16()
sn, on = [(1 + 0.1 * torch.randn(h, generator=g)).bfloat16() for _ in range(2)]
torch_seam = standard_seam.StandardSeam(proj, sn, on, eps, use_sglang=False)
standard_seam._sglang_mix = lambda hidden, device: attn_residual._mix_fused  # the CPU is no GPU
sgl_seam = standard_seam.StandardSeam(proj, sn, on, eps)
assert sgl_seam.kind.startswith("SGLang"), sgl_seam.kind
# both store the mixture as bf16 after fp32 sums in different orders (measured: rel 4e-3,
# cos 0.999996); a wrong nvb, row or weight would cost the cosine its fifth nine
a, b = sgl_seam.mix(bank, nvb, prefix).float(), torch_seam.mix(bank, nvb, prefix).float()
mm = measure(a, b)
assert mm["cosine"] > 0.99999 and mm["rel"] < 1e-2, mm
ref = aggregate(bank, nvb, prefix, proj, sn, on, eps, isa="sm_90")
mo = measure(sgl_seam(bank, nvb, prefix).float(), ref)
assert mo["cosine"] > 0.99999 and mo["rel"] < 1e-2, mo
print("ok", mm, mo)
'''


def test_sglang_mix_pair_fed_as_the_benchmarks_feed_it():
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok"), done.stdout
    print(done.stdout)


STUBBED = r'''
import sys
sys.modules["sglang.srt.layers.layernorm"] = None  # as on the lent GPU (needs sgl_kernel there)
from sgl_k3_mono import standard_seam
mod, note = standard_seam._import_attn_residual()
assert mod is not None and callable(mod._mix_fused), note
assert "stubbed" in note, note
assert "sglang.srt.layers.linear" not in sys.modules  # the stubs do not outlive the import
assert standard_seam._import_attn_residual() == (mod, note)  # once a process
print("ok", note)
'''


def test_attn_residual_imports_where_sglang_layer_modules_cannot():
    """On the lent GPU SGLang's layer modules need sgl_kernel; attn_residual only names two
    of their classes in annotations, so the standard seam imports it with those stubbed
    (and says so in the benchmark header) instead of falling back to torch."""
    done = subprocess.run([sys.executable, "-c", STUBBED], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok"), done.stdout
