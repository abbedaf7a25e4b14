"""Bytes each launch must move per decode step and rank: the floor every timing is
judged against (floor time = bytes / bandwidth). Pure Python.

Weights are counted once per step (every row shares them); states, the bank and the
routed experts a step touches scale with the rows. Verify steps read the committed
KDA state once and write one post-state per token, as SGLang's verify path does.
"""

from __future__ import annotations

from dataclasses import dataclass

from sgl_k3_mono.dims import K3Dims

BF16, FP32 = 2, 4


@dataclass(frozen=True)
class LaunchBytes:
    """One launch's bytes for one layer and one step, split by what they are."""

    weights: int
    """Weights read once a step."""
    state: int
    """KDA recurrent and conv state read and written (K1), or 0."""
    experts: int
    """Routed-expert bytes for the experts the rows touch (K2), or 0."""
    activations: int
    """Inputs, outputs, bank rows and reduce traffic."""

    @property
    def total(self) -> int:
        return self.weights + self.state + self.experts + self.activations


def expected_experts(d: K3Dims, rows: int) -> float:
    """Distinct experts `rows` independent uniformly routed rows touch (M=1: top_k)."""
    E, k = d.experts, d.top_k
    return E * (1.0 - (1.0 - k / E) ** rows) if E else 0.0


def expert_bytes(d: K3Dims, fmt: str) -> int:
    """One routed expert's slice on one rank (w13 and w2), in bf16 or MXFP4."""
    I, L = d.expert_inter_local, d.latent
    if fmt == "bf16":
        return 3 * I * L * BF16
    if fmt == "mxfp4":  # two e2m1 a byte, one ue8m0 scale a 32-group
        return (2 * I * L + L * I) // 2 + (2 * I * L + L * I) // 32
    raise ValueError(f"expert format {fmt!r}: bf16 or mxfp4")


def k1_bytes(d: K3Dims, layer: int, rows: int, mode: str) -> LaunchBytes:
    H, P, h, f, hd = d.hidden, d.kda_proj_local, d.kda_heads_local, d.kda_f_rank, d.kda_head_dim
    bfa_rows = f + h + (-(f + h)) % 8
    weights = ((4 * P + bfa_rows) * H + P * f + hd + 3 * H) * BF16 + (3 * P * d.conv_width + P + h) * FP32
    ssm = h * hd * hd * FP32
    conv = (d.conv_width - 1) * 3 * P * BF16
    if mode == "decode":  # each request reads and writes its own state
        state = rows * 2 * (ssm + conv)
    elif mode == "target_verify":  # one committed state read, one post-state a token written
        state = (1 + rows) * (ssm + conv)
    else:
        raise ValueError(f"mode {mode!r}: decode or target_verify")
    nvb = d.bank_rows_at_attn(layer)
    acts = rows * (nvb * H + 3 * H + P) * BF16
    return LaunchBytes(weights=weights, state=state, experts=0, activations=acts)


def k2_bytes(d: K3Dims, layer: int, rows: int, fmt: str, o_in: int) -> LaunchBytes:
    H, L, S, E = d.hidden, d.latent, d.shared_inter_local, d.experts
    weights = (H * o_in + 2 * S * H + E * H + L * H + H * S + H * L + L + 3 * H) * BF16 + E * FP32
    experts = round(expected_experts(d, rows) * expert_bytes(d, fmt))
    nvb = layer // d.attn_res_block + 1 if d.attn_res_block else 0
    # input, bank rows, prefix, output; then both reduces: every rank's partial read
    acts = rows * (o_in + nvb * H + 2 * H) * BF16 + d.tp * rows * (H + L + H) * BF16
    return LaunchBytes(weights=weights, state=0, experts=experts, activations=acts)


@dataclass(frozen=True)
class StepBytes:
    """Per rank, one step of `rows` rows: the bytes each launch moves over all its layers."""

    rows: int
    k1: int
    k2: int
    k1_layers: int
    k2_layers: int

    def floor_us(self, which: str, bandwidth_tb_s: float) -> float:
        return getattr(self, which) / (bandwidth_tb_s * 1e12) * 1e6


def step_bytes(d: K3Dims, rows: int, *, mode: str = "decode", fmt: str = "mxfp4") -> StepBytes:
    k1_layers = [i for i in d.kda_layers]
    k2_layers = [i for i in range(d.layers) if d.is_moe(i)]
    k1 = sum(k1_bytes(d, i, rows, mode).total for i in k1_layers)
    k2 = sum(
        k2_bytes(d, i, rows, fmt, d.kda_proj_local if d.is_kda(i) else d.mla_out_local).total
        for i in k2_layers
    )
    return StepBytes(rows=rows, k1=k1, k2=k2, k1_layers=len(k1_layers), k2_layers=len(k2_layers))
