"""The decode (or verify) step: embed, per layer (K1 | seam + MLA) then (K2 | layer 0's
dense FFN), the final attn-res read, then the hooks' logits; and, when a speculative
draft reads them, the stream values after the layers it names (`Capture`).

Shapes and the layer schedule are fixed by the plan, every per-layer branch is decided
on the host from static facts (layer kind, block writes, bank rows), and nothing here
reads a device value back: the step can be captured in a CUDA graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from sgl_k3_mono.forward import launches
from sgl_k3_mono.forward.hooks import StepHooks
from sgl_k3_mono.forward.layers import StepModel
from sgl_k3_mono.forward.plan import StepBuffers, StepPlan
from sgl_k3_mono.k1.host import K1IO
from sgl_k3_mono.reference.attn_res import SeamWeights, add_prefix, aggregate, stream_value


@dataclass(frozen=True)
class Capture:
    """The layers whose output a speculative draft reads (DSpark / DFlash), and where it goes."""

    layers: frozenset[int]
    """Layer indices, as SGLang's `dspark_layers_to_capture` names them (0..L-1)."""
    sink: Callable[[torch.Tensor], None]
    """Takes each captured value, [M, H] bf16, in layer order (SGLang's packer, or a list)."""


def _capture(model: StepModel, bufs: StepBuffers, capture: Optional[Capture], layer: int, nvb: int,
             prefix: torch.Tensor, add: Optional[torch.Tensor], seam: SeamWeights) -> None:
    """Hand over the stream after `layer` as the next read (`seam`, `nvb` rows) would mix it."""
    if capture is not None and layer in capture.layers:
        capture.sink(stream_value(bufs.bank, nvb, add_prefix(prefix, add), seam.proj, seam.score_norm, model.eps))


def run_hidden(model: StepModel, plan: StepPlan, bufs: StepBuffers, hooks: StepHooks, input_ids: torch.Tensor,
               *, deadline_s: float, capture: Optional[Capture] = None) -> torch.Tensor:
    """The final normed hidden state [M, H] bf16 (before the logits)."""
    m = plan.rows
    if input_ids.shape[0] != m:
        raise ValueError(f"step: {input_ids.shape[0]} input rows; the plan is for {m}")
    if capture is not None:
        wrong = sorted(i for i in capture.layers if not 0 <= i < len(model.layers))
        if wrong:
            raise ValueError(f"step: a draft asks for the output of layers {wrong}; the model has layers "
                             f"0..{len(model.layers) - 1}")
    cur = 0
    prefix = bufs.stream[cur]
    prefix.copy_(hooks.embed(input_ids))
    add = None  # the pending plain add (layer 0's reduced dense MLP, at layer 1's seam)
    for lr in model.layers:
        # the previous layer's output, as this layer's attention read mixes it (SGLang's capture point)
        _capture(model, bufs, capture, lr.index - 1, lr.nvb, prefix, add, lr.attn_seam)
        if lr.attention == "kda":
            st = hooks.kda_state(lr.index)
            # after a pending add the updated prefix goes to `resid`; otherwise K1 leaves it in place
            resid = bufs.resid if (add is not None and not lr.write) else None
            io = K1IO(prefix=prefix, bank=bufs.bank, nvb=lr.nvb, write=lr.write, slots=st.slots,
                      conv_pool=st.conv_pool, ssm_pool=st.ssm_pool, out=bufs.k1_out, contribution=add,
                      residual=resid, verify_conv=st.verify_conv, verify_ssm=st.verify_ssm,
                      verify_index=st.verify_index, pad_slot=st.pad_slot,
                      l2_next=lr.k2.o_proj if lr.k2 is not None else None)
            launches.k1(plan, bufs, lr.k1, io, layer=lr.index, deadline_s=deadline_s)
            attn_out = bufs.k1_out
            p = None if lr.write else (resid if resid is not None else prefix)
        else:
            p = add_prefix(prefix, add)  # block writes on MLA layers are refused at build
            if add is not None:
                bufs.resid.copy_(p)
                p = bufs.resid
            sw = lr.attn_seam
            h = aggregate(bufs.bank, lr.nvb, p, sw.proj, sw.score_norm, sw.out_norm, model.eps, isa=model.isa)
            attn_out = hooks.mla(lr.index, h.to(torch.bfloat16))
        add = None
        if lr.k2 is not None:
            out = bufs.stream[1 - cur]
            launches.k2(plan, bufs, lr.k2, attn_out, lr.nvb_ffn, p, out, layer=lr.index)
            cur, prefix = 1 - cur, out
        else:
            p, add = hooks.dense(lr.index, attn_out, bufs.bank, lr.nvb_ffn, p)
            prefix = bufs.stream[cur]
            prefix.copy_(p)
    fw = model.final_seam
    _capture(model, bufs, capture, model.layers[-1].index, model.nvb_final, prefix, add, fw)
    prefix = add_prefix(prefix, add)
    h = aggregate(bufs.bank, model.nvb_final, prefix, fw.proj, fw.score_norm, fw.out_norm, model.eps, isa=model.isa)
    return h.to(torch.bfloat16)


def run_step(model: StepModel, plan: StepPlan, bufs: StepBuffers, hooks: StepHooks, input_ids: torch.Tensor,
             *, deadline_s: float, capture: Optional[Capture] = None) -> Any:
    """One step: what hooks.final returns (the model forward's output on the served path)."""
    return hooks.final(run_hidden(model, plan, bufs, hooks, input_ids, deadline_s=deadline_s, capture=capture))
