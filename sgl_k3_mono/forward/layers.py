"""The model as a step runs it: per layer, which launch covers the attention side and
which the FFN side, and the (viewed, never copied) weights each reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from sgl_k3_mono.k1.host import K1Views
from sgl_k3_mono.k2.reference import K2RankWeights
from sgl_k3_mono.reference.attn_res import SeamWeights


@dataclass(frozen=True)
class LayerRun:
    """One decoder layer of a step."""

    index: int
    """0-based layer index (names the layer in failure records)."""
    attention: str
    """"kda" (K1) or "mla" (the attention seam here, then the MLA hook)."""
    k1: Optional[K1Views]
    """K1's weight views (KDA layers)."""
    k2: Optional[K2RankWeights]
    """K2's weight views (MoE layers); None: the dense FFN hook (layer 0)."""
    attn_seam: SeamWeights
    """The attention-side seam weights (read here for MLA layers; K1 reads its own copy of the views)."""
    write: bool
    """Block-write layer: the attention seam banks the prefix and restarts the stream."""
    nvb: int
    """Valid bank rows at this layer's attention read."""

    @property
    def nvb_ffn(self) -> int:
        """Valid bank rows at this layer's FFN read."""
        return self.nvb + (1 if self.write else 0)


@dataclass(frozen=True)
class StepModel:
    """Everything a step reads that does not change per width."""

    layers: tuple[LayerRun, ...]
    final_seam: SeamWeights
    """output_attn_res_proj / _norm and model.norm."""
    eps: float
    """rms_norm_eps of every seam norm."""
    isa: str
    """Seam rounding of the pieces computed here ("sm_90" or "gfx950"), as the launches round."""
    hidden: int
    bank_rows: int
    """NB: bank rows a step allocates (ceil(layers / block))."""

    @property
    def nvb_final(self) -> int:
        """Valid bank rows at the final (output) read."""
        last = self.layers[-1]
        return last.nvb_ffn

    def reasons(self) -> list[str]:
        """What this step cannot run (empty: it can)."""
        out = []
        for lr in self.layers:
            if lr.attention == "mla" and lr.write:
                out.append(f"layer {lr.index}: an MLA layer on a block-write boundary; the step writes the bank "
                           "only through K1 (every Kimi-K3 block write is on a KDA layer)")
            if lr.attention == "kda" and lr.k1 is None:
                out.append(f"layer {lr.index}: a KDA layer without K1 views")
            if lr.k2 is None and lr.index != 0:
                out.append(f"layer {lr.index}: a dense FFN after layer 0; the step runs only layer 0's dense MLP "
                           "on SGLang's path (first_k_dense_replace must be 1)")
        if self.layers and self.layers[0].k2 is not None:
            out.append("layer 0 is a MoE layer; the step expects Kimi-K3's dense layer 0")
        return out


def from_model_views(views: list[Any], model_layers: Any, *, eps: float, isa: str, final_seam: SeamWeights,
                     hidden: int, bank_rows: int) -> StepModel:
    """From `model_views` (LayerViews) and SGLang's decoder layers (for the MLA seam weights)."""
    runs = []
    for lv, layer in zip(views, model_layers):
        seam = lv.k1.seam if lv.k1 is not None else SeamWeights(
            layer.self_attention_res_proj.weight.detach(), layer.self_attention_res_norm.weight.detach(),
            layer.input_layernorm.weight.detach())
        runs.append(LayerRun(index=lv.index, attention=lv.attention, k1=lv.k1, k2=lv.k2, attn_seam=seam,
                             write=lv.block_write, nvb=lv.bank_rows_attn))
    return StepModel(tuple(runs), final_seam, eps, isa, hidden, bank_rows)
