"""Helpers of the reference tests: SGLang's Triton kernels on the CPU, error metrics,
realistic weights for a SGLang-built model.

Run SGLang's own Triton kernels on the CPU through Triton's interpreter.

TRITON_INTERPRET must be set before Triton decorates a kernel, and the test process has
long since imported SGLang, so each batch of kernel calls runs in a fresh interpreter:
inputs go through torch.save, the script fills `result`, and that comes back the same way.
Tests import it as `from support import sglang_triton_cpu as helpers`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import torch

# Triton's interpreter truncates fp32 -> bf16 where the GPU rounds to nearest even;
# casts go through torch instead so stored bf16 values are the GPU's.
_PRELUDE = """
import sys, numpy as np, torch
import triton.language as tl
from triton.runtime import interpreter as _ti

def _rne_bf16(data):
    t = torch.from_numpy(np.ascontiguousarray(data, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)

def _patch(orig):
    def cast(self, src, dst_type, *rest):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return _ti.TensorHandle(_rne_bf16(src.data), dst_type.scalar)
        return orig(self, src, dst_type, *rest)
    return cast

_ti.InterpreterBuilder.cast_impl = _patch(_ti.InterpreterBuilder.cast_impl)
_ti.InterpreterBuilder.create_fp_to_fp = _patch(_ti.InterpreterBuilder.create_fp_to_fp)
_ti.InterpreterBuilder.create_fp_trunc = _patch(_ti.InterpreterBuilder.create_fp_trunc)
payload = torch.load(sys.argv[1], weights_only=False)
result = {}
"""
_EPILOGUE = """
torch.save(result, sys.argv[2])
"""


def run_interpreted(code: str, payload: dict, timeout: float = 900.0) -> dict:
    """Execute `code` (reads `payload`, writes `result`) under TRITON_INTERPRET=1."""
    with tempfile.TemporaryDirectory() as d:
        src, inp, out = Path(d, "run.py"), Path(d, "in.pt"), Path(d, "out.pt")
        src.write_text(_PRELUDE + textwrap.dedent(code) + _EPILOGUE)
        torch.save(payload, inp)
        env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
        proc = subprocess.run(
            [sys.executable, str(src), str(inp), str(out)],
            env=env, capture_output=True, text=True, timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"interpreted SGLang kernels failed:\n{proc.stderr[-4000:]}")
        return torch.load(out, weights_only=False)


def errors(ref: torch.Tensor, got: torch.Tensor) -> tuple[float, float]:
    """(max_abs, cosine) between two tensors, in fp64."""
    a, b = ref.double().flatten(), got.double().flatten()
    max_abs = (a - b).abs().max().item() if a.numel() else 0.0
    cos = torch.nn.functional.cosine_similarity(a, b, dim=0).item() if a.numel() else 1.0
    return max_abs, cos


def randomize(model) -> None:
    """Dummy weights are ~1e-3; give every parameter a realistic scale, in place (the
    merged `_bfa_w` is a view of f_a/b, so in-place writes keep SGLang's merge)."""
    g = torch.Generator().manual_seed(11)
    for name, p in model.named_parameters():
        x = torch.randn(p.shape, generator=g)
        if name.endswith("A_log"):
            x = torch.log(torch.empty(p.shape).uniform_(1, 16, generator=g))
        elif name.endswith("dt_bias"):
            x = 0.5 * x
        elif "conv1d" in name:
            x = x / 2
        elif p.dim() == 1:
            x = 1 + 0.1 * x
        elif name.endswith("res_proj.weight"):
            x = 0.05 * x
        else:
            x = x / p.shape[-1] ** 0.5
        p.data.copy_(x.to(p.dtype))
