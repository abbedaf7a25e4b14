"""The step's hooks on the served path: SGLang's loaded model and this step's ForwardBatch.

Everything here is SGLang's own: the vocab-parallel embedding, the KDA state pools the
linear-attention backend holds (read through the pool's own `mamba2_layer_cache`), the
MLA attention module (unchanged; only its o_proj is borrowed for the duration of the
call so the gated TP-local output comes back instead of the o_proj product), layer 0's
o_proj and dense MLP, the TP all-reduce and the model's logits processor. Reading the
pools is host-side indexing (no device value is read back), so a step stays capturable.
"""

from __future__ import annotations

import functools
from typing import Any, Optional

import torch

from sgl_k3_mono.forward.hooks import KdaState
from sgl_k3_mono.forward.step import Capture
from sgl_k3_mono.reference.attn_res import add_prefix, aggregate


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(f"sgl-k3-mono step: {msg}")


def linear_attn_backend(forward_batch: Any) -> Any:
    """The KDA (linear-attention) backend of this step's hybrid attention backend."""
    backend = getattr(forward_batch, "attn_backend", None)
    linear = getattr(backend, "linear_attn_backend", None)
    _need(linear is not None, f"the step's attention backend {type(backend).__name__} has no linear_attn_backend "
          "(Kimi-K3's KDA layers run under SGLang's hybrid linear-attention backend)")
    return linear


class SglangHooks:
    """StepHooks over SGLang's model and one ForwardBatch (made per step: host objects only)."""

    def __init__(self, model: Any, forward_batch: Any, positions: torch.Tensor, input_ids: torch.Tensor, *,
                 mode: str, eps: float, isa: str):
        from sglang.srt.utils.common import BumpAllocator

        self.lm = getattr(model, "language_model", model)
        self.layers = self.lm.model.layers
        self.fb, self.positions, self.input_ids = forward_batch, positions, input_ids
        self.mode, self.eps, self.isa = mode, eps, isa
        self._linear = None
        self._aux = None  # SGLang's collector of this step's draft inputs (`capture`)
        # what SGLang's model forward hands every layer (two fp32 words a layer)
        self.zero_allocator = BumpAllocator(buffer_size=len(self.layers) * 2, dtype=torch.float32,
                                            device=input_ids.device)

    # ---- embedding and logits ------------------------------------------------------------
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm.model.embed_tokens(input_ids)

    def final(self, hidden: torch.Tensor) -> Any:
        aux = None
        if self._aux is not None:  # what the model's own forward hands its logits processor
            aux = self._aux.finalize() if hasattr(self._aux, "finalize") else self._aux
        return self.lm.logits_processor(self.input_ids, hidden, self.lm.lm_head, self.fb, aux)

    # ---- a speculative draft's inputs (DSpark / DFlash) ------------------------------------
    def capture(self) -> Optional[Capture]:
        """The layers the draft reads and SGLang's collector for them, as the model's own
        forward sets them up (None when the model captures nothing)."""
        from sglang.srt.layers.aux_hidden_states import AuxHiddenStateList, AuxHiddenStatePacker

        layers = getattr(self.lm.model, "dspark_layers_to_capture", None)
        if not getattr(self.lm, "capture_aux_hidden_states", False) or layers is None:
            return None
        _need(len(set(layers)) == len(layers), f"the draft names a layer twice ({list(layers)})")
        # one packed [M, K*H] tensor (the decode graph's buffer when the batch has one), or a
        # list where the model keeps one (pipeline stages)
        if self.lm.model.packs_aux_hidden_states:
            self._aux = AuxHiddenStatePacker.for_batch(self.fb, len(layers))
            sink = self._aux.append
        else:
            self._aux = AuxHiddenStateList()
            sink = functools.partial(self._aux.capture, owned=True)
        return Capture(frozenset(layers), sink)

    # ---- KDA state pools ---------------------------------------------------------------
    def kda_state(self, layer: int) -> KdaState:
        if self._linear is None:
            self._linear = linear_attn_backend(self.fb)
        lin = self._linear
        _need(getattr(lin, "accept_lens_pool", None) is None,
              "the KDA backend runs the fused-accept speculative path (accept_lens_pool); K1's verify writes "
              "SGLang's per-token scratch instead")
        cache = lin.req_to_token_pool.mamba2_layer_cache(self.layers[layer].self_attn.attn.layer_id)
        _need(getattr(cache, "replayssm_d", None) is None and getattr(cache, "replayssm_rawv", None) is None,
              "the KDA pool runs ReplaySSM (--enable-linear-replayssm*); K1 updates the state in place")
        slots = lin.forward_metadata.mamba_cache_indices
        if self.mode == "decode":
            # one slot a request; a graph's metadata buffer may be longer than the batch
            return KdaState(slots=slots[: self.input_ids.shape[0]], conv_pool=cache.conv[0], ssm_pool=cache.temporal)
        from sglang.srt.layers.attention.linear.utils import pp_spec_stable_rows_enabled

        _need(not pp_spec_stable_rows_enabled(), "SGLANG_ENABLE_PP_SPEC moves the verify scratch rows; K1 "
              "writes request 0's verify scratch at row 0")
        _need(getattr(cache, "intermediate_ssm", None) is not None, "verify needs SGLang's speculative KDA "
              "scratch (intermediate_ssm)")
        # one request a verify step: its scratch row is 0 (SGLang's default row table is the batch position)
        return KdaState(slots=slots[:1], conv_pool=cache.conv[0], ssm_pool=cache.temporal,
                        verify_conv=cache.intermediate_conv_window[0], verify_ssm=cache.intermediate_ssm,
                        verify_index=0)

    # ---- MLA: SGLang's module, its gated TP-local output -----------------------------------
    def mla(self, layer: int, h: torch.Tensor) -> torch.Tensor:
        dl = self.layers[layer]
        attn = dl.self_attn
        got: list = []

        def gated(x, *args, **kwargs):
            # the module's own gate pieces: the hidden state it saved, its g_proj (and any
            # capture-branch join), then x * sigmoid(gate) as the model applies it
            _need(not isinstance(x, tuple), f"layer {layer}: the MLA core handed o_proj a quantized tuple; K2 reads "
                  "the gated bf16 output")
            gate_input = getattr(attn, "_gate_hidden_states", None)
            attn._gate_hidden_states = None
            _need(gate_input is not None, f"layer {layer}: the MLA module saved no gate input (output gate off?)")
            gate = attn._compute_output_gate(gate_input)
            from sglang.kernels.ops.elementwise import mla_output_gate

            if mla_output_gate.covered(x, gate):
                x = mla_output_gate.kimi_k3_mla_output_gate(x, gate)
            else:
                x = x * torch.sigmoid(gate)
            got.append(x)
            return x, None

        inner = attn.o_proj.forward
        attn.o_proj.forward = gated
        try:
            dl._run_self_attn(h, self.positions, self.fb, self.zero_allocator)
        finally:
            attn.o_proj.forward = inner
        _need(len(got) == 1, f"layer {layer}: the MLA module called o_proj {len(got)} times; expected once")
        out = got[0]
        return out if out.is_contiguous() else out.contiguous()

    # ---- layer 0's FFN side, as SGLang runs it ----------------------------------------------
    def dense(self, layer: int, attn_out: torch.Tensor, bank: torch.Tensor, nvb: int,
              prefix: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        from sglang.srt.distributed import tensor_model_parallel_all_reduce

        dl = self.layers[layer]
        a = tensor_model_parallel_all_reduce(dl.self_attn.o_proj(attn_out)[0])
        p = a if prefix is None else add_prefix(prefix, a)
        h2 = aggregate(bank, nvb, p, dl.mlp_res_proj.weight, dl.mlp_res_norm.weight,
                       dl.post_attention_layernorm.weight, self.eps, isa=self.isa)
        return p, tensor_model_parallel_all_reduce(dl.mlp(h2.to(torch.bfloat16)))
