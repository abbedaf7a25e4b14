"""The standard path's routed experts as SGLang 0.5.23 runs them on sm_90 for Kimi-K3 (bf16
experts under its default triton MoE runner), from SGLang's own Triton ops, for `bench k2`.

SGLang's runner (`triton_utils.fused_moe._fused_moe_kernel_sequence`) aligns the (row, slot)
pairs to expert blocks, runs its fused MoE GEMM over w13, SiTU in torch (fp32 from the bf16
GEMM output, rounded back), the fused MoE GEMM over w2 with the router weights applied, and
sums the top-k slots. Its modules import sgl_kernel on CUDA, which the lent machine does not
have: where it is missing, a stand-in whose every function raises when called is in
sys.modules for the import alone (no call reaches it), and the same sequence is composed
here from the pieces that are pure Triton:
`moe_align_small_numel` (what SGLang itself runs for up to 64 pairs; at 8 rows the 128 pairs
go to a CUDA align kernel in SGLang, here to this one at a pair count it is not tuned for),
`invoke_fused_moe_kernel` with SGLang's config for the shape (its default: no tuned file for
E 896, N 384), and `moe_sum_reduce_triton` (SGLang's Triton twin of sgl_kernel's sum). The
config lookup asks SGLang's runtime context only whether deterministic inference is on; a
stand-in says no.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import types
from typing import Callable, Iterator, Optional

import torch


@contextlib.contextmanager
def _sgl_kernel_for_import() -> Iterator[None]:
    """sgl_kernel where it is installed; else, for the duration of an import, a module whose
    every attribute is a function that raises, so module-level `from sgl_kernel import x`
    succeeds and any call of x fails loudly."""
    # SGLang's import chain reaches torch.distributed.tensor (through transformers); imported
    # first here, a failed or repeated attempt below it cannot register its ops a second time
    # (on the lent machine a bare script otherwise stops in _functional_collectives)
    importlib.import_module("torch.distributed.tensor")

    if importlib.util.find_spec("sgl_kernel") is not None:
        yield
        return

    def missing(name):
        if name.startswith("__"):  # a module's own attributes (__file__, ...): absent, as on any module,
            raise AttributeError(name)  # so inspect's walk over sys.modules passes it by
        def call(*_a, **_k):
            raise RuntimeError(f"sgl_kernel.{name}: sgl_kernel is not installed (bench k2's import stand-in)")
        return call

    stub = types.ModuleType("sgl_kernel")
    stub.__getattr__ = missing  # module-level __getattr__ (PEP 562)
    sys.modules["sgl_kernel"] = stub
    try:
        yield
    finally:
        if sys.modules.get("sgl_kernel") is stub:
            del sys.modules["sgl_kernel"]


def _config(w13: torch.Tensor, w2: torch.Tensor, top_k: int, rows: int) -> tuple[dict, dict]:
    with _sgl_kernel_for_import():
        import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config as cfg

    ctx = types.SimpleNamespace(deterministic=types.SimpleNamespace(enable_deterministic_inference=False))
    real, cfg.get_exec = (cfg.get_exec, cfg.get_device_name), lambda: ctx
    if real[1]() is None:  # no GPU (the interpreter): no tuned file can match, SGLang's default config
        cfg.get_device_name = lambda: "none"
    try:
        up, (down, _) = cfg.try_get_optimal_moe_config(tuple(w13.shape), tuple(w2.shape), top_k, None, rows,
                                                       return_down_config=True)
    finally:
        cfg.get_exec, cfg.get_device_name = real
    up = {k: v for k, v in up.items() if k != "USE_TMA"}
    down = {k: v for k, v in (down or up).items() if k != "USE_TMA"}
    return up, down


def tuned_configs(path: Optional[str]) -> dict:
    """{str(rows): config} from a file in SGLang's tuned-config form
    (tools/device/sglang_moe_tune.py writes one); {} for no path."""
    if not path:
        return {}
    import json

    with open(path) as f:
        return json.load(f)


def sglang_routed_experts(w13: torch.Tensor, w2: torch.Tensor, *, top_k: int, rows: int, beta: float,
                          linear_beta: float, config: Optional[dict] = None
                          ) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """run(x [rows, L], ids [rows, top_k] int, wts [rows, top_k] fp32) -> [rows, L]: the
    router-weighted sum of the chosen experts' SiTU MLPs, as SGLang's triton runner forms it
    (w13 [E, 2I, L], w2 [E, L, I] bf16; fp16 runs the same kernels, which Triton's CPU
    interpreter computes correctly where its bf16 gives garbage). `config`: one kernel config
    for both GEMMs in SGLang's tuned-file form (BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps,
    num_stages), as a config file from SGLang's tuner would give it; None: SGLang's own
    lookup (its default for Kimi-K3's shapes: no tuned file ships for E 896, N 384).
    Buffers are allocated here, once, so a CUDA graph can capture run. Raises ImportError
    where SGLang's Triton ops are not importable."""
    import triton.language as tl

    from sgl_k3_mono.reference.ops import situ

    with _sgl_kernel_for_import():
        from sglang.kernels.ops.moe.fused_moe_triton_kernels import invoke_fused_moe_kernel, moe_sum_reduce_triton
        from sglang.kernels.ops.moe.moe_align_small_numel import moe_align_small_numel

    E, n2, L = w13.shape
    dev, pairs = w13.device, rows * top_k
    up, down = (dict(config), dict(config)) if config else _config(w13, w2, top_k, rows)
    bm = up["BLOCK_SIZE_M"]
    down["BLOCK_SIZE_M"] = bm  # one alignment serves both GEMMs (SGLang forces the same)
    # the align's buffers as SGLang's moe_align_block_size sizes them (E + 1 buckets: "+1 offset")
    padded = pairs * bm if pairs < E + 1 else pairs + (E + 1) * (bm - 1)
    padded = (padded + 3) // 4 * 4
    sorted_ids = torch.empty(padded, dtype=torch.int32, device=dev)
    expert_ids = torch.empty(-(-padded // bm), dtype=torch.int32, device=dev)
    n_post = torch.empty(1, dtype=torch.int32, device=dev)
    dt = w13.dtype
    c1 = torch.empty(pairs, n2, dtype=dt, device=dev)
    c2 = torch.empty(pairs, n2 // 2, dtype=dt, device=dev)
    c3 = torch.empty(rows, top_k, L, dtype=dt, device=dev)
    out = torch.empty(rows, L, dtype=dt, device=dev)
    flags = dict(compute_type=tl.bfloat16 if dt == torch.bfloat16 else tl.float16, use_fp8_w8a8=False,
                 use_int8_w8a8=False, use_int8_w8a16=False, use_int4_w4a16=False, per_channel_quant=False,
                 filter_expert=False)

    def run(x: torch.Tensor, ids: torch.Tensor, wts: torch.Tensor) -> torch.Tensor:
        ids32 = ids.to(torch.int32)
        moe_align_small_numel(ids32, E + 1, bm, sorted_ids, expert_ids, n_post)
        invoke_fused_moe_kernel(x, w13, None, c1, None, None, None, wts, ids32, sorted_ids, expert_ids, n_post,
                                False, top_k, up, **flags)
        c2.copy_(situ(c1[:, :n2 // 2], c1[:, n2 // 2:], beta, linear_beta))  # SGLang's runner: the same fp32 terms
        invoke_fused_moe_kernel(c2, w2, None, c3, None, None, None, wts, ids32, sorted_ids, expert_ids, n_post,
                                True, 1, down, router_topk=top_k, **flags)
        moe_sum_reduce_triton(c3, out, 1.0)
        return out

    return run
