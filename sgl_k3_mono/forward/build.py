"""`build`: the loaded SGLang model -> the object SGLang routes served steps to.

Order (every refusal before anything is allocated, all reasons at once):
1. read the model: the per-layer weight views (no copy: a copied byte is a refusal),
   the step's own refusals (layer schedule, aux-hidden capture, verify widths);
2. one StepPlan per served width (K1 and K2 plans for that ShapeKey);
3. per width, once: the step buffers and K2's peer buffers (symmetric memory at TP > 1,
   one allocation and one rendezvous, collective over the TP group like the build itself);
4. warm every width's launches on build-owned state (compiles them; TP > 1: every K2
   compiled first and the ranks met at a bounded barrier, then the in-launch reduces run
   once on every rank), wait for them with the deadline, and check the error records;
5. log the bytes allocated next to the weight bytes they serve.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.forward.layers import StepModel, from_model_views
from sgl_k3_mono.forward.plan import IMPLS, MODES, StepBuffers, StepPlan
from sgl_k3_mono.forward.warm import warm
from sgl_k3_mono.k1.host import K1Plan, device_grid
from sgl_k3_mono.k2.host import K2Peers, K2Plan, experts_alignment_ok, experts_layout, experts_scale_max
from sgl_k3_mono.reference.attn_res import SeamWeights

logger = logging.getLogger(__name__)


class StepRefused(ValueError):
    """The step cannot serve this model or server; SGLang stops the server with the reasons."""


@dataclass(frozen=True)
class ServerStep:
    """What SGLang routes: the step mode and tokens a request (binding's _server_step)."""

    mode: str
    """SGLang's ShapeKey.forward_mode: "decode" or "target_verify"."""
    tokens: int
    """Tokens per request (1 in decode; speculative_num_draft_tokens in verify)."""
    algorithm: Optional[str] = None
    """The speculative algorithm (upper case), None without speculation."""

    @classmethod
    def from_sglang(cls) -> "ServerStep":
        from sglang.srt.runtime_context import get_spec

        sc = get_spec()
        if sc.speculative_algorithm is None:
            return cls("decode", 1)
        return cls("target_verify", int(sc.speculative_num_draft_tokens or 1),
                   str(getattr(sc.speculative_algorithm, "name", sc.speculative_algorithm)).upper())


def weight_bytes(model: Any) -> int:
    """Bytes of the model's parameters and buffers (every storage once)."""
    seen, total = set(), 0
    for t in list(model.parameters()) + list(model.buffers()):
        s = t.untyped_storage()
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def plans_for(model: StepModel, widths: tuple[int, ...], step: ServerStep, *, tp: int, rank: int, isa: str,
              impl: str, grid: Optional[int] = None) -> dict[tuple[str, int, int], StepPlan]:
    """(forward_mode, batch_size, tokens) -> the StepPlan of that ShapeKey, for every width
    that holds whole requests (the widths SGLang serves)."""
    kda = next((lr.k1 for lr in model.layers if lr.k1 is not None), None)
    moe = next((lr.k2 for lr in model.layers if lr.k2 is not None and lr.attention == "kda"), None)
    moe = moe or next((lr.k2 for lr in model.layers if lr.k2 is not None), None)
    if moe is None:
        raise StepRefused("the model has no MoE layer for K2")
    # a MoE layer after an MLA layer whose TP-local width differs needs its own K2 plan
    mla = next((lr.k2 for lr in model.layers if lr.k2 is not None and lr.k2.o_proj.shape[1] != moe.o_proj.shape[1]),
               None)
    grid = grid if grid is not None else device_grid()
    mode = MODES[step.mode]
    # every MoE layer's experts: the plans below serve all of them (K2Plan.mma_experts)
    every = [lr.k2 for lr in model.layers if lr.k2 is not None]
    experts_facts = dict(scale_max=experts_scale_max(every), experts_aligned=experts_alignment_ok(every),
                         expert_layout=experts_layout(every))
    out = {}
    for w in widths:
        if w % step.tokens:
            continue
        bs = w // step.tokens
        k1 = None if kda is None else K1Plan.for_weights(kda, w, mode, bank_rows=model.bank_rows, eps=model.eps,
                                                         tp=tp, rank=rank, isa=isa, grid=grid)
        k2 = K2Plan.for_weights(moe, w, isa=isa, bank_rows=model.bank_rows, grid=grid, tp=tp, **experts_facts)
        k2_mla = None if mla is None else K2Plan.for_weights(mla, w, isa=isa, bank_rows=model.bank_rows, grid=grid,
                                                             tp=tp, **experts_facts)
        out[(step.mode, bs, step.tokens)] = StepPlan(rows=w, mode=mode, batch_size=bs, k1=k1, k2=k2, k2_mla=k2_mla,
                                                     impl=impl)
    return out


def step_reasons(step_model: StepModel, widths: tuple[int, ...], step: ServerStep) -> list[str]:
    """What the step cannot serve beyond the per-layer refusals."""
    out = list(step_model.reasons())
    # A DSpark / DFlash draft's inputs (the stream after the layers it names) are written by
    # the step itself (`step.Capture`); SGLang names the layers after this build, before
    # its graphs are captured, so the forward reads them per step.
    if step.mode == "target_verify":
        wide = sorted(w for w in widths if w % step.tokens == 0 and w // step.tokens > 1)
        if wide:
            out.append(f"verify steps of {[w // step.tokens for w in wide]} requests ({step.tokens} tokens each) "
                       f"would be routed (widths {wide}); K1's verify mode serves one request a step. Limit the "
                       f"decode graphs to batch size 1 (--cuda-graph-max-bs 1) or use {step.tokens * 2} > 8 "
                       "draft tokens")
    return out


class BuiltK3:
    """What `build` returns: SGLang calls `forward(plan, input_ids, positions, forward_batch, ...)`."""

    def __init__(self, model: Any, step_model: StepModel, plans: dict, buffers: dict, *, deadline_s: float,
                 allocated_bytes: int, weight_bytes: int):
        from sgl_k3_mono.forward.sglang_hooks import SglangHooks

        from sgl_k3_mono.model_reasons import language_model

        self.model, self.step_model, self.plans, self.buffers = model, step_model, plans, buffers
        self.lm = language_model(model)
        self.deadline_s, self.allocated_bytes, self.weight_bytes = deadline_s, allocated_bytes, weight_bytes
        self.hooks_factory: Callable[..., Any] = SglangHooks
        """(model, forward_batch, positions, input_ids, mode=, eps=, isa=) -> StepHooks with
        `capture()` (a draft's `step.Capture` or None), as SglangHooks (tests swap it)."""

    def forward(self, plan: Any, input_ids: torch.Tensor, positions: torch.Tensor, forward_batch: Any,
                *args: Any, **kwargs: Any) -> Any:
        from sgl_k3_mono.forward.step import run_step

        key = plan.key
        sp = self.plans.get((key.forward_mode, key.batch_size, key.tokens_per_request))
        if sp is None:
            raise ValueError(f"sgl-k3-mono: routed a step of {key}, which was not built (built: {sorted(self.plans)})")
        # get_embedding / input embeds / pp proxies: not a plain decode or verify step
        # (identity tests only: a tensor's truth value would read the device)
        extra = [f"argument {i + 4}" for i, v in enumerate(args) if v is not None and v is not False] + \
                [n for n, v in kwargs.items() if v is not None and v is not False]
        if extra:
            raise ValueError(f"sgl-k3-mono: a routed step with {extra}; the step serves plain decode and verify")
        hooks = self.hooks_factory(self.model, forward_batch, positions, input_ids, mode=sp.mode,
                                   eps=self.step_model.eps, isa=self.step_model.isa)
        return run_step(self.step_model, sp, self.buffers[(key.forward_mode, key.batch_size, key.tokens_per_request)],
                        hooks, input_ids, deadline_s=self.deadline_s, capture=hooks.capture())


COMPILE_BARRIER_S = 600.0
"""How long a rank waits at the build's barrier for every TP peer to finish its compile pass
(`warm`): a width's launches compile in about a minute on a loaded host; past this the build
fails, naming the ranks that did not arrive (torch's monitored barrier), instead of hanging."""


def _tp() -> tuple[int, int, Optional[str]]:
    """(tp size, rank, the TP group's name for symmetric memory), from SGLang's TP group."""
    from sglang.srt.runtime_context import get_parallel

    group = get_parallel().tp_group
    tp, rank = int(group.world_size), int(group.rank_in_group)
    return tp, rank, (group.device_group.group_name if tp > 1 else None)


def _tp_barrier() -> Callable[[], None]:
    """A bounded barrier over SGLang's TP group (its gloo CPU group)."""
    import datetime

    import torch.distributed as dist
    from sglang.srt.runtime_context import get_parallel

    cpu_group = get_parallel().tp_group.cpu_group
    if dist.get_backend(cpu_group) != "gloo":  # (monitored_barrier is gloo's; e.g. mooncake's CPU group is not)
        return lambda: dist.barrier(group=cpu_group)

    def barrier() -> None:
        dist.monitored_barrier(group=cpu_group, timeout=datetime.timedelta(seconds=COMPILE_BARRIER_S),
                               wait_all_ranks=True)

    return barrier


def build(model: Any, hf_config: Any, ctx: Any, *, impl: str = "triton", step: Optional[ServerStep] = None) -> BuiltK3:
    """SGLang's spec.build. `impl` (tests only): how the launches run (plan.IMPLS); `step`
    overrides what SGLang's published server config says the steps are."""
    from sgl_k3_mono.model_reasons import language_model, model_disable_reasons
    from sgl_k3_mono.model_views import copied_bytes, model_views

    if impl not in IMPLS:
        raise ValueError(f"build: impl {impl!r}; expected one of {IMPLS}")
    tp, rank, group = _tp()
    reasons = model_disable_reasons(model, hf_config, ctx.copies, tp=tp)
    if reasons:
        raise StepRefused("sgl-k3-mono: " + "; ".join(reasons))
    dims = K3Dims.from_config(hf_config, tp=tp)
    lm = language_model(model)
    if not dims.attn_res_block:
        raise StepRefused("sgl-k3-mono: the model has no attention-residual bank; the launches are built around it")
    views = model_views(model, hf_config, rank=rank, tp=tp)
    copied = copied_bytes(views, model)
    m = lm.model
    final = SeamWeights(m.output_attn_res_proj.weight.detach(), m.output_attn_res_norm.weight.detach(),
                        m.norm.weight.detach())
    step_model = from_model_views(views, m.layers, eps=dims.rms_eps, isa=ctx.isa, final_seam=final,
                                  hidden=dims.hidden, bank_rows=dims.bank_rows())
    step = step or ServerStep.from_sglang()
    reasons = step_reasons(step_model, tuple(ctx.widths), step)
    if copied:
        reasons.append(f"the weight views would copy {copied} bytes (the launches read SGLang's tensors in place)")
    if reasons:
        raise StepRefused("sgl-k3-mono: " + "; ".join(reasons))

    device = m.embed_tokens.weight.device
    if impl != "reference" and device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise StepRefused(f"sgl-k3-mono: the model is on {device.type}; the Triton launches run on a GPU "
                          "(or under TRITON_INTERPRET=1)")
    plans = plans_for(step_model, tuple(ctx.widths), step, tp=tp, rank=rank, isa=ctx.isa, impl=impl)
    if not plans:
        raise StepRefused(f"sgl-k3-mono: no width in {list(ctx.widths)} holds whole requests of {step.tokens} tokens")
    buffers = {}
    for key, sp in sorted(plans.items()):
        peers = K2Peers.symmetric(sp.k2, group, device) if tp > 1 else None
        buffers[key] = StepBuffers.allocate(sp, device, deadline_s=ctx.deadline_s, rank=rank, peers=peers)
    allocated = sum(b.nbytes() for b in buffers.values())
    barrier = _tp_barrier() if tp > 1 else None
    for key, sp in sorted(plans.items()):
        warm(step_model, sp, buffers[key], deadline_s=ctx.deadline_s, barrier=barrier)
    wbytes = weight_bytes(model)
    logger.info("sgl-k3-mono: built %s on %s (TP %d rank %d, impl %s): %d widths, %.2f MiB of step buffers "
                "(%.4f%% of %.1f MiB of weights), 0 bytes of weight copies, wait deadline %.0f s",
                ", ".join(f"{k[0]} bs {k[1]}x{k[2]}" for k in sorted(plans)), ctx.isa, tp, rank, impl, len(plans),
                allocated / 2**20, 100.0 * allocated / max(wbytes, 1), wbytes / 2**20, ctx.deadline_s)
    return BuiltK3(model, step_model, plans, buffers, deadline_s=ctx.deadline_s, allocated_bytes=allocated,
                   weight_bytes=wbytes)
