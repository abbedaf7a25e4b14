"""`sgl-k3-mono check`: would `--enable-amd-monokernel` serve this setup, and how?

It parses the usual `sglang serve` flags with SGLang's own parser, resolves them with
SGLang's own resolution pipeline (so SGLang's `handle_amd_monokernel`, which calls its
`monokernel_disable_reasons` with this plugin's spec, makes the decision), and prints
the verdict with every reason, the decode graph sizes SGLang would capture, which
launch covers each layer, and the bytes each launch must move per step against the
ISA's bandwidth. No GPU is needed: the one hardware question SGLang asks,
`binding.device_isa()`, is answered with `--isa` for the duration of the resolution.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import os
from dataclasses import dataclass
from typing import Iterator, Optional

from sgl_k3_mono.budget import expert_bytes, step_bytes
from sgl_k3_mono.dims import K3Dims
from sgl_k3_mono.expert_form import expert_format, mxfp4_held_as, served_format
from sgl_k3_mono.isa import PROFILES, WIDTHS, sglang_default_decode_backend

FLAG = "--enable-amd-monokernel"
DEFAULT_CONFIG = "kimi-k3"
# What a CPU machine needs to resolve at all; none of these is read by the monokernel checks.
CPU_RESOLUTION = {
    "--device": "cpu",
    "--mamba-radix-cache-strategy": "no_buffer",
    "--disable-overlap-schedule": None,
    "--skip-tokenizer-init": None,
}


@dataclass
class Verdict:
    """What SGLang's resolution decided for one setup."""

    serves: bool
    reasons: list[str]
    error: Optional[str]
    """A resolution error raised before the monokernel check (bad flags), else None."""
    argv: list[str]
    """The server flags asked about: the user's, with the defaults check filled in."""
    capture_bs: list[int]
    tokens_per_request: int
    mode: str
    hf_config: object
    tp: int


def _has(argv: list[str], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in argv)


def server_argv(user: list[str], isa: str) -> tuple[list[str], list[str]]:
    """The user's server flags with the defaults filled in, and the flags this CPU
    machine adds to resolve them."""
    argv = list(user)
    if not _has(argv, "--model-path") and not _has(argv, "--model"):
        from sgl_k3_mono.configs import config_dir

        argv += ["--model-path", str(config_dir(DEFAULT_CONFIG))]
        # the recipe the plugin is for: real Kimi-K3 at TP 8, MLA on AITER
        if not (_has(argv, "--tp") or _has(argv, "--tp-size")):
            argv += ["--tp", "8"]
        if isa == "gfx950" and not (_has(argv, "--attention-backend") or _has(argv, "--decode-attention-backend")):
            argv += ["--attention-backend", "aiter"]
    if not (_has(argv, FLAG) or _has(argv, "--monokernel-backend")):
        argv.append(FLAG)
    cpu = []
    for flag, value in CPU_RESOLUTION.items():
        if not _has(argv, flag):
            cpu += [flag] if value is None else [flag, value]
    if not (_has(argv, "--attention-backend") or _has(argv, "--decode-attention-backend")):
        argv += ["--attention-backend", _default_backend(argv + cpu, isa)]
    return argv, cpu


def _default_backend(argv: list[str], isa: str) -> str:
    """SGLang's default MLA decode backend on `isa` for this model and TP size."""
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(argv)
    from sglang.srt.configs.model_config import ModelConfig

    heads_local = ModelConfig.from_server_args(sa).get_num_kv_heads(sa.tp_size)
    return sglang_default_decode_backend(isa, heads_local)


@contextlib.contextmanager
def answering_isa(isa: str) -> Iterator[None]:
    """SGLang's binding reports `isa` for the device while resolving."""
    from sglang.srt.kernel_plugins.amd import binding

    real = binding.device_isa
    binding.device_isa = lambda: isa
    try:
        yield
    finally:
        binding.device_isa = real


def resolve(user_argv: list[str], isa: str) -> Verdict:
    from sglang.kernels.plugin_kernels.amd.spec import FLAG as SGLANG_FLAG
    from sglang.srt.arg_groups.overrides import model_config_of, resolving_view
    from sglang.srt.plugins import load_plugins
    from sglang.srt.server_args import prepare_server_args

    load_plugins()  # as every SGLang process does: through the installed entry point
    argv, cpu = server_argv(user_argv, isa)
    sa = prepare_server_args(argv + cpu)
    reasons, error = [], None
    with answering_isa(isa):
        try:
            sa.resolve_once()
        except ValueError as e:
            text = str(e)
            if text.startswith(f"{SGLANG_FLAG} cannot run this setup:"):
                reasons = [line.strip()[2:] for line in text.splitlines()[1:] if line.strip().startswith("- ")]
            else:
                error = f"{type(e).__name__}: {e}"
        except Exception as e:  # any other resolution failure is the flags', not ours
            error = f"{type(e).__name__}: {e}"
        view = resolving_view(sa)
        if error is not None:
            # resolution stopped before SGLang's hook: ask SGLang's monokernel check directly
            from sglang.srt.kernel_plugins.amd.binding import monokernel_disable_reasons

            _, reasons = monokernel_disable_reasons(cfg=view, model_config=model_config_of(sa), isa=isa)
    hf_config = model_config_of(sa).hf_config
    spec_algo = view.speculative_algorithm
    tokens = int(view.speculative_num_draft_tokens or 1) if spec_algo else 1
    graph = view.cuda_graph_config
    capture = sorted(set(graph.decode.bs or [])) if graph is not None and graph.decode.bs else []
    return Verdict(
        serves=not reasons and error is None,
        argv=argv,
        reasons=reasons,
        error=error,
        capture_bs=capture,
        tokens_per_request=tokens,
        mode="target_verify" if spec_algo else "decode",
        hf_config=hf_config,
        tp=int(view.tp_size),
    )


def _ranges(xs: list[int]) -> str:
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


def layer_plan(d: K3Dims) -> list[tuple[str, list[int]]]:
    """(what runs it, layers) for every kind of layer in the schedule."""
    groups: dict[str, list[int]] = {}
    for i in range(d.layers):
        attn = "K1 (KDA front)" if d.is_kda(i) else "SGLang MLA attention"
        ffn = "K2 (layer launch)" if d.is_moe(i) else "SGLang o_proj + dense MLP"
        groups.setdefault(f"{attn} + {ffn}", []).append(i)
    return sorted(groups.items(), key=lambda kv: -len(kv[1]))


def expert_layout_line(isa: str, inter: int, env=None) -> str:
    """Where SGLang 0.5.23 will leave the MXFP4 experts, as this environment selects it
    (mxfp4_held_as): AITER's preshuffle (its kind from the same variables SGLang reads at
    load), or bf16 rows after its post-load dequantization; K2 reads either in place
    (k2/expert_layout.py; the bf16 expert path)."""
    env = os.environ if env is None else env
    if mxfp4_held_as(isa, env) == "bf16":
        why = "CUDA" if isa != "gfx950" else "SGLANG_USE_AITER is not set here"
        who = "K2 reads the bf16 experts in place" if isa != "gfx950" else \
            "the FlyDSL K2 refuses them, the Triton one reads them in place"
        return (f"MXFP4 in the checkpoint, dequantized to bf16 by SGLang's post-load ({why}: "
                f"Mxfp4MoEMethod under the triton runner); {who}")
    from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout

    lay = AiterLayout.from_env(inter, env)
    return (f"MXFP4, {lay.describe()} as SGLang's AITER post-load leaves them under this environment "
            "(SGLANG_USE_AITER, AITER_SITUV2_A4W4 / _A8W4, SGLANG_AITER_K3_OPT); K2 reads it in place")


def report(v: Verdict, isa: str) -> str:
    from sgl_k3_mono.build import STATUS

    profile = PROFILES.get(isa)
    d = K3Dims.from_config(v.hf_config, tp=v.tp)
    lines = []
    gpu = profile.gpu if profile else "an ISA this plugin does not serve"
    lines.append(f"sgl-k3-mono check: {d.layers}-layer Kimi-K3 text model at TP {v.tp} on {isa} ({gpu})")
    lines.append("as: sglang serve " + " ".join(v.argv))
    if v.error:
        lines.append("verdict: UNRESOLVED: SGLang's resolution stopped on this machine before its monokernel check:")
        lines.append(f"  - {v.error}")
        lines.append("  SGLang's monokernel_disable_reasons alone, on the flags as far as they resolved, says:")
        lines += [f"  - {r}" for r in v.reasons] or ["  - no reason: accepted"]
    elif v.serves:
        lines.append(f"verdict: SERVE: SGLang accepts {FLAG} for this setup")
        lines.append(f"  note: {STATUS}")
    else:
        lines.append(f"verdict: REFUSE: SGLang stops at startup with {len(v.reasons)} reason(s):")
        lines += [f"  - {r}" for r in v.reasons]
    t = v.tokens_per_request
    rows = [w for w in WIDTHS if w % t == 0]
    served_bs = [w // t for w in rows]
    step = "decode steps (1 token a request)" if t == 1 else f"verify steps ({t} tokens a request)"
    lines.append(f"steps: {step}; launch widths {rows} rows")
    if v.capture_bs:
        covered = [b for b in v.capture_bs if b in served_bs]
        rest = [b for b in v.capture_bs if b not in served_bs]
        lines.append(f"decode graphs SGLang captures (batch sizes): {v.capture_bs}")
        lines.append(f"  monokernels: {covered or 'none'}; standard path: {rest or 'none'} "
                     "(sizes as resolved on this machine; a GPU server may size the list from its memory)")
    else:
        lines.append("decode graphs: off; every served width runs eagerly")
    lines.append("layers:")
    for what, layers in layer_plan(d):
        lines.append(f"  {what}: {len(layers)} layer(s): {_ranges(layers)}")
    writes = [i for i in d.kda_layers if d.is_block_write(i)]
    lines.append(f"  attn-res bank writes inside K1: {_ranges(writes)}")
    lines.append("  SGLang: embedding, final attn-res read and norm, lm_head and logits")
    if expert_format(v.hf_config) == "mxfp4":
        lines.append(f"routed experts: {expert_layout_line(isa, d.expert_inter_local)}")
    fmt = served_format(v.hf_config, isa)  # the bytes the launches read
    held = d.experts * expert_bytes(d, fmt) * sum(1 for i in range(d.layers) if d.is_moe(i))
    if fmt == "mxfp4" and isa == "gfx950":  # AITER's padded expert width
        from sgl_k3_mono.reference.mxfp4_aiter import AiterLayout

        held = held * AiterLayout.from_env(d.expert_inter_local, os.environ).inter_pad // d.expert_inter_local
    lines.append(f"  {fmt} routed experts held: {held / 1e9:.1f} GB a rank")
    if profile and held > profile.memory_gb * 1e9:
        lines.append(f"  more than the {profile.gpu}'s {profile.memory_gb:g} GB: SGLang cannot hold them at this TP")
    if profile:
        bw = profile.bandwidth_tb_s
        lines.append(f"bytes per step per rank ({fmt} experts, {v.mode}; floor = bytes / {bw:g} TB/s datasheet):")
        lines.append("  rows |  K1 GB  K1 floor ms |  K2 GB  K2 floor ms | K1+K2 floor ms")
        for r in rows:
            s = step_bytes(d, r, mode=v.mode, fmt=fmt)
            k1, k2 = s.floor_us("k1", bw) / 1e3, s.floor_us("k2", bw) / 1e3
            lines.append(f"  {r:4d} | {s.k1 / 1e9:6.2f}  {k1:11.3f} | {s.k2 / 1e9:6.2f}  {k2:11.3f} | {k1 + k2:14.3f}")
        lines.append(f"  K1 runs {s.k1_layers} layers, K2 {s.k2_layers}; routed experts counted as the "
                     "distinct experts uniformly routed rows touch")
        ran = "executed and measured" if profile.executed else "NOT executed on this hardware by this project"
        lines.append(f"device code on {isa}: {profile.device_code}, {ran}")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sgl-k3-mono check",
        description="Would --enable-amd-monokernel serve this setup? Takes the usual `sglang serve` "
        "flags (default: the real Kimi-K3 config at --tp 8) and needs no GPU.")
    parser.add_argument("--isa", default="gfx950", help="the GPU ISA to ask about: gfx950 (MI355X) or sm_90 (H200)")
    parser.add_argument("--verbose", action="store_true", help="show SGLang's resolution log")
    args, server_flags = parser.parse_known_args(argv)
    quiet = contextlib.ExitStack()
    if not args.verbose:  # SGLang's resolution logs a lot that is not the answer
        logging.disable(logging.WARNING)
        quiet.callback(logging.disable, logging.NOTSET)
        quiet.enter_context(contextlib.redirect_stderr(io.StringIO()))
    with quiet:
        verdict = resolve(server_flags, args.isa)
    print(report(verdict, args.isa))
    if verdict.error:
        return 2
    return 0 if verdict.serves else 1
