"""Warm a width before it is served: run its whole step once on build-owned state.

The step is run with hooks that stand in for SGLang (random embedding, MLA output and
dense FFN output, state pools of the same per-slot layout as SGLang's), so every launch
variant the served step uses (K1 with and without the bank write and the pending add,
K2 at each layer's bank rows) is compiled here, in the order the step runs it, and never
inside a served (or captured) step. At TP > 1 every rank runs this in the same order,
which also exercises K2's peer reduces once before serving; before that run, a first pass
compiles every K2 launch without running it and the ranks meet at a barrier, so
no rank's first K2 waits on a peer still compiling (a real-width K2 compiles in 20-45 s,
more than a short deadline). The wait for the device is bounded by the build's deadline.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import torch

from sgl_k3_mono.forward.hooks import KdaState
from sgl_k3_mono.forward.layers import StepModel
from sgl_k3_mono.forward.plan import StepBuffers, StepPlan


class WarmHooks:
    """StepHooks on small random activations and build-owned pools (one slot a row).
    Random, not zeros: all-zero rows make every router score tie and every norm divide
    ~0 by ~0, which is not the arithmetic a served step runs."""

    def __init__(self, model: StepModel, plan: StepPlan, device):
        self.model, self.plan, self.device = model, plan, device
        self._pools: Optional[KdaState] = None
        self._gen = torch.Generator(device=device).manual_seed(0)

    def _act(self, cols: int) -> torch.Tensor:
        x = torch.randn(self.plan.rows, cols, generator=self._gen, device=self.device)
        return (x * 0.5).to(torch.bfloat16)

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self._act(self.model.hidden)

    def kda_state(self, layer: int) -> KdaState:
        if self._pools is None:
            p, m, dev = self.plan.k1, self.plan.rows, self.device
            bf, f32 = dict(dtype=torch.bfloat16, device=dev), dict(dtype=torch.float32, device=dev)
            kw, c, h, d = p.conv_width, 3 * p.proj, p.heads, p.head_dim
            if p.mode == "decode":
                self._pools = KdaState(slots=torch.arange(m, dtype=torch.int32, device=dev),
                                       conv_pool=torch.zeros(m, kw - 1, c, **bf), ssm_pool=torch.zeros(m, h, d, d, **f32))
            else:
                self._pools = KdaState(slots=torch.zeros(1, dtype=torch.int32, device=dev),
                                       conv_pool=torch.zeros(1, kw - 1, c, **bf), ssm_pool=torch.zeros(1, h, d, d, **f32),
                                       verify_conv=torch.zeros(1, m, kw - 1, c, **bf),
                                       verify_ssm=torch.zeros(1, m, h, d, d, **f32), verify_index=0)
        return self._pools

    def mla(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        return self._act(self.model.layers[layer].k2.o_proj.shape[1])

    def dense(self, layer, attn_out, bank, nvb, prefix):
        return (prefix if prefix is not None else self._act(self.model.hidden)), self._act(self.model.hidden)

    def final(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden


def wait(deadline_s: float, what: str) -> None:
    """Wait for the current stream's work, at most deadline_s (a CUDA event, polled)."""
    if not torch.cuda.is_available():
        return
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.monotonic()
    while not ev.query():
        if time.monotonic() - t0 > deadline_s:
            raise RuntimeError(f"sgl-k3-mono: {what} did not finish within the {deadline_s:.0f} s deadline")
        time.sleep(1e-3)


def warm(model: StepModel, plan: StepPlan, bufs: StepBuffers, *, deadline_s: float,
         barrier: Optional[Callable[[], None]] = None) -> None:
    """Run one step of this width on WarmHooks (compiles its launches); raise on a recorded
    failure. At TP > 1 (K2 with peers), first a pass that compiles every K2 launch and runs
    none (Triton's warmup, FlyDSL's compile-only entry; K1 runs: it waits on no peer), then
    `barrier()` (every rank of the TP group; the build's is bounded), then the step."""
    from sgl_k3_mono.forward import launches
    from sgl_k3_mono.forward.step import run_step

    if plan.impl == "reference":
        return  # nothing to compile; the oracle runs on the host
    device = bufs.stream.device
    if device.type == "cuda":
        bufs.k2.errors.watch()
        if bufs.k1_scratch is not None:
            bufs.k1_scratch.record.watch()
    ids = torch.zeros(plan.rows, dtype=torch.int64, device=device)
    if bufs.k2.peers is not None and plan.impl == "triton":  # (plan.impl: the device code, Triton or FlyDSL)
        with launches.k2_compile_only():
            run_step(model, plan, bufs, WarmHooks(model, plan, device), ids, deadline_s=deadline_s)
        wait(deadline_s, f"the compile pass of the {plan.mode} step of {plan.rows} rows")
        if barrier is not None:
            barrier()
    run_step(model, plan, bufs, WarmHooks(model, plan, device), ids, deadline_s=deadline_s)
    wait(deadline_s, f"warming the {plan.mode} step of {plan.rows} rows")
    records = [bufs.k2.errors] + ([bufs.k1_scratch.record] if bufs.k1_scratch is not None else [])
    failed = [r.message() for r in records if r.message() is not None]
    if failed:
        raise RuntimeError("sgl-k3-mono: warming failed: " + "; ".join(failed))
