"""The drift guard: every SGLang 0.5.23 object whose behaviour the launches and the
torch references reproduce, with a digest of its source.

`sgl-k3-mono drift` recomputes each digest from the installed SGLang and prints a
table (ok / changed / missing / unrecorded); it exits 1 on any drift, printing for
each drifted object what must be re-verified before the digest may be accepted.
`sgl-k3-mono drift --update` then records the new digests in drift_digests.json:
accepting drift is one deliberate command, never an edit of a test.

Digests are taken from the source files, not from imported objects. Many of these
modules cannot be imported on a CPU-only machine (AITER, CUDA libraries), and a
digest must not depend on which machine computed it. So each dotted path is
resolved by walking SGLang's package folders and the module's syntax tree (following
`from x import y` re-exports), and the digest is the sha256 of the object's source
text exactly as it sits in the file, decorators included: for a function the lines
`inspect.getsource` returns, for a Triton kernel the source of its `.fn` with the
`@triton.jit` line, for a class the whole class, for a module constant its
assignment statement. A closure defined inside `__init__` is guarded through that
`__init__`. Non-Python sources (.cu) are hashed as file bytes.

Separately, the table says whether each object imports on this machine, and if it
does, whether the live object's source agrees with the file (a runtime monkeypatch
would not); that column is informational and never fails the run.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

DIGESTS_FILE = Path(__file__).with_name("drift_digests.json")
SGLANG_VERSION = "0.5.23"
_FILE_SUFFIXES = (".cu", ".cuh", ".hip", ".cpp", ".h")


@dataclass(frozen=True)
class Guard:
    """One guarded SGLang object."""

    path: str
    """Dotted import path (sglang.srt.models.kimi_k3.KimiK3MoE.forward), or for a
    non-Python source the file path inside site-packages (sglang/kernels/...cu)."""
    reverify: str
    """What must be re-checked against the launches/references if it changes."""

    @property
    def is_file(self) -> bool:
        return self.path.endswith(_FILE_SUFFIXES)


_K3 = "sglang.srt.models.kimi_k3."
_KDA = _K3 + "KimiK3DeltaAttention."
_MOE = _K3 + "KimiK3MoE."
_MLA = _K3 + "KimiK3MLAAttention."
_AR = "sglang.srt.layers.attn_residual."
_BANK = "sglang.srt.layers.layer_boundary.residual.attn_bank."
_SPEC = "sglang.kernels.plugin_kernels.amd.spec."
_BIND = "sglang.srt.kernel_plugins.amd.binding."
_MXFP4 = "sglang.srt.layers.quantization.mxfp4."

GUARDS: tuple[Guard, ...] = (
    # ---- tier 1: the forward semantics the launches replicate ----------------------
    Guard(_K3 + "KimiK3DecoderLayer.forward",
          "layer step order: attn-res read, attention, seam all-reduce, FFN read, MLP/MoE, "
          "block write; K1/K2 split points and the reference step"),
    Guard(_KDA + "forward",
          "KDA decode data flow (in-proj, f_b, conv, gate, delta rule, o_norm, o_proj) and the "
          "pre-o_proj split point K1 ends at"),
    Guard(_MOE + "_forward_fused",
          "fused MoE front ([shared gate_up | router | latent down]), its rounding, and the tail "
          "add K2 reproduces"),
    Guard(_AR + "AttnResidual.forward",
          "attention-residual aggregation (softmax over bank rows, weighted sum) K1/K2 fuse"),
    Guard(_MLA + "__init__",
          "MLA module set and the _gated_o_proj_forward closure (sigmoid output gate before "
          "o_proj) the K2 seam reproduces"),
    Guard(_KDA + "forward_qkvbfg_fused",
          "merged [q,k,v,g|f_a|b] in-projection path and its split sizes"),
    Guard(_MOE + "forward", "MoE dispatch between fused and unfused front"),
    Guard(_MOE + "_forward_unfused", "unfused MoE order of ops (reference MoE on CPU)"),
    Guard(_MOE + "_forward_shared", "shared-expert path (SiTU MLP) and its output dtype"),
    Guard(_MOE + "_forward_routed", "routed-expert call: top-k, latent experts, scaling"),
    Guard(_MOE + "_reduce_latent", "latent all-reduce before routed_expert_norm"),
    Guard(_MOE + "_reduce_latent_and_shared", "joint reduce of latent and shared partials"),
    Guard(_MOE + "_latent_norm", "routed_expert_norm on the reduced latent (eps, dtype)"),
    Guard(_K3 + "_add3", "three-way tail add (prefix + shared + routed) and its rounding order"),
    Guard(_K3 + "_is_moe_layer", "which layers are MoE (first_k_dense_replace, moe_layer_freq)"),
    Guard(_K3 + "_latent_moe_writes_stream", "which layers' FFN writes the residual stream"),
    Guard(_K3 + "_stage_facts", "per-layer seam facts (who all-reduces, who adds the prefix)"),
    Guard(_K3 + "_fuses_attn_all_reduce", "attention all-reduce fusion condition at the seam"),
    Guard(_MLA + "_compute_output_gate", "MLA output gate = sigmoid(g_proj(h)), dtype"),
    Guard(_MLA + "forward", "MLA forward around the attention core (gate, o_proj, reduce)"),
    Guard(_K3 + "KimiK3MLP.forward", "dense layer-0 MLP and shared experts: SiTU GLU, fp32 math"),
    Guard(_K3 + "KimiK3LinearModel.forward", "model loop, bank allocation, final attn-res read"),
    Guard(_K3 + "KimiK3LinearModel._dspark_capture_stream", "DSpark hidden-state capture points"),
    Guard(_K3 + "KimiK3LinearForCausalLM.forward", "logits path (final norm, lm_head)"),
    # ---- tier 2: numerics of the fused ops -----------------------------------------
    Guard(_AR + "get_cw", "attn-res pseudo-query weight cw (norm weight * proj, fp32)"),
    Guard(_AR + "_aggregate", "attn-res aggregation dispatch and its rounding"),
    Guard(_AR + "_aggregate_fused_add", "aggregation fused with the pending prefix add"),
    Guard(_AR + "_aggregate_hip", "gfx950 aggregation path the AMD launches match bitwise"),
    Guard(_AR + "aggregate_stream", "aggregation entry point (which path per device)"),
    Guard(_AR + "aggregate_stream_torch", "torch oracle of the aggregation used by the CPU reference"),
    Guard("sglang.kernels.ops.attention.attn_res_hip._agg_kernel", "HIP/Triton aggregation kernel numerics"),
    Guard("sglang.kernels.ops.attention.attn_res_hip.attn_res_hip", "aggregation kernel launcher (tiles, dtypes)"),
    Guard(_BANK + "AttnBankState._aggregate", "bank aggregation (rows read, nvb)"),
    Guard(_BANK + "AttnBankState._attn_aggregate", "bank read at the attention input"),
    Guard(_BANK + "AttnBankState.update_and_read_ffn_input", "bank write + FFN input read"),
    Guard(_BANK + "AttnBankOutputRead.__call__", "final bank read before model.norm"),
    Guard("sglang.srt.layers.attention.linear.kda_backend.KDAAttnBackend.forward_decode",
          "KDA decode backend: state layout, gate, delta rule"),
    Guard("sglang.srt.layers.attention.linear.kda_backend.KDAAttnBackend._forward_target_verify",
          "KDA target-verify (T tokens) path and intermediate-state writes"),
    Guard("sglang.kernels.ops.attention.kda_fused_decode_gfx950.covered",
          "when the gfx950 fused KDA decode applies (heads, TP, dtypes)"),
    Guard("sglang.kernels.ops.attention.kda_fused_decode_gfx950.run", "fused KDA decode launcher arguments"),
    Guard("sglang/kernels/kda_kernels/csrc/attention/kda_decode_gfx950.cu",
          "the AMD reference KDA decode numerics (f_b, conv, gate, delta rule, gated RMSNorm)"),
    Guard("sglang.kernels.ops.attention.fla.fused_recurrent.fused_recurrent_kda_packed_decode_kernel",
          "Triton KDA decode recurrence numerics (sm_90 path)"),
    Guard("sglang.kernels.ops.attention.fla.fused_norm_gate.FusedRMSNormGated.forward",
          "KDA o_norm: gated RMSNorm (sigmoid gate, eps, dtype)"),
    Guard("sglang.kernels.ops.attention.fla.fused_norm_gate.rms_norm_gated", "gated RMSNorm entry point"),
    Guard("sglang.kernels.ops.attention.fla.layernorm_gated.rms_norm_ref", "torch oracle of the gated RMSNorm"),
    Guard("sglang.kernels.ops.gemm.kimi_k3.kimi_k3_tiny_gemm", "tiny-GEMM size thresholds (GEMM rounding)"),
    Guard("sglang.srt.models.deepseek_v2.MoEGate.__init__", "router weight/bias dtypes"),
    Guard("sglang.srt.models.deepseek_v2.MoEGate.forward", "router logits dtype (bf16 on HIP/CPU, fp32 GEMM on CUDA)"),
    Guard("sglang.srt.layers.moe.topk.biased_grouped_topk_impl",
          "sigmoid + bias top-k, renormalisation, tie order"),
    Guard("sglang.srt.layers.activation.SituAndMul.forward_native", "SiTU GLU formula (beta 4, linear beta 25)"),
    Guard("sglang.srt.layers.layernorm.RMSNorm.forward_native", "RMSNorm numerics (fp32 math, eps, cast back)"),
    Guard("sglang.kernels.ops.elementwise.mla_output_gate.kimi_k3_mla_output_gate", "MLA output-gate kernel numerics"),
    # ---- tier 3: weight layout the launches read -----------------------------------
    Guard(_K3 + "_is_unquantized_mergeable", "when SGLang merges weights (views vs copies)"),
    Guard(_K3 + "_merge_weights_as_views", "merged-weight layout (row order of the merge)"),
    Guard(_KDA + "_merge_bfa_weights", "[f_a | b | pad] merged weight layout (_bfa_w)"),
    Guard(_KDA + "_merge_kda_inproj_weights_hip", "HIP whole in-projection merge layout"),
    Guard(_KDA + "_may_fuse_kda_inproj", "in-projection merge gate (quantized checkpoints)"),
    Guard(_KDA + "_prepare_fused_decode", "fused-decode weight preparation (conv/A_log/dt_bias layout)"),
    Guard(_KDA + "__init__", "KDA modules, do_fuse_qkvbfg, split sizes, param dtypes"),
    Guard(_MOE + "_merge_front_weights", "fused-front weight [gate_up | router | latent down] layout"),
    Guard(_MOE + "_eligible_for_fused_front", "fused-front eligibility"),
    Guard(_MOE + "_front_fp32", "fp32 vs bf16 router logits from the fused front"),
    Guard(_MOE + "_moe_front_needs_dense_bf16", "dense bf16 requirement of the front"),
    Guard(_MOE + "__init__", "MoE modules, Mxfp4Config swap, expert layer arguments"),
    Guard(_K3 + "KimiK3LinearForCausalLM.post_load_weights", "post-load derived tensors (w_kc/w_vc, _bfa_w)"),
    Guard(_K3 + "KimiK3LinearForCausalLM.load_weights",
          "checkpoint name rules make-checkpoint writes (fusions, weight_packed rename, A_log narrowing)"),
    Guard(_K3 + "KimiK3ForConditionalGeneration.load_weights", "vision/LM split of checkpoint names"),
    Guard(_K3 + "KimiK3ForConditionalGeneration.hf_to_sglang_mapper",
          "HF -> SGLang renames (block_sparse_moe -> mlp) make-checkpoint relies on"),
    Guard("sglang.srt.configs.kimi_k3.KimiK3VisionConfig.__init__",
          "vision defaults make-checkpoint plans the tower from"),
    Guard("sglang.srt.models.kimi_k3_vl.MoonViTEncoderLayer.__init__", "vision block parameter names"),
    Guard("sglang.srt.models.kimi_k3_vl.KimiK3MultiModalProjector.__init__", "projector parameter names"),
    Guard(_MXFP4 + "Mxfp4MoEMethod.create_weights", "MXFP4 expert parameter shapes and padding"),
    Guard(_MXFP4 + "Mxfp4MoEMethod.process_weights_after_loading",
          "MXFP4 post-load layout (AITER preshuffle) the launches decode"),
    Guard(_MXFP4 + "_aiter_situ_uses_gu_interleaved_weights", "gate/up interleaving of the AITER SiTU layout"),
    Guard("sglang.srt.configs.mamba_utils.KimiLinearStateShape.create",
          "KDA state pool layout (conv [K-1, 3P], SSM [H, V, K])"),
    # ---- the plugin contract ---------------------------------------------------------
    Guard(_SPEC + "MONOKERNEL_API_VERSION", "monokernel API version the spec is written against"),
    Guard(_SPEC + "Feature", "Feature names the spec lists and the refusals check"),
    Guard(_SPEC + "MonoSpec", "MonoSpec fields the plugin fills"),
    Guard(_SPEC + "Requirements", "Requirements fields and their meaning"),
    Guard(_SPEC + "DeviceLimits", "DeviceLimits fields (widths, tp sizes, resident blocks)"),
    Guard(_SPEC + "ShapeKey", "ShapeKey fields the build's routing uses"),
    Guard(_SPEC + "BuildContext", "BuildContext fields the build reads"),
    Guard(_SPEC + "register", "spec registration (entry point) semantics"),
    Guard(_SPEC + "find_spec", "spec lookup by backend/architecture/ISA"),
    Guard(_BIND + "monokernel_disable_reasons", "which refusals SGLang adds and in what order"),
    Guard(_BIND + "covered_capture_sizes", "cuda-graph batch sizes the spec must cover"),
    Guard(_BIND + "handle_amd_monokernel", "resolution hook: flag handling and refusal message"),
    Guard(_BIND + "install_monokernel_forward", "install: build call, copies, capture checks"),
    Guard(_BIND + "_install_forward", "forward replacement and routing by ShapeKey"),
    Guard(_BIND + "shape_key", "ShapeKey of a ForwardBatch (modes, tokens per request)"),
    Guard("sglang.srt.arg_groups.model_override_base.get_default_attn_backend",
          "default attention backends the spec's Requirements assume"),
)


# ---------------------------------------------------------------------------------
# source resolution (import-free)
# ---------------------------------------------------------------------------------


class Unresolved(Exception):
    """The path names nothing in the installed SGLang sources."""


def site_root() -> Path:
    """The folder holding the installed `sglang` package (found without importing it)."""
    spec = importlib.util.find_spec("sglang")
    if spec is None or not spec.submodule_search_locations:
        raise Unresolved("sglang is not installed")
    return Path(next(iter(spec.submodule_search_locations))).parent


def _read_source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _module_file(parts: list[str]) -> Path | None:
    """The .py file of a dotted module name, or None."""
    base = site_root().joinpath(*parts)
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    return None


def _split_module(dotted: str) -> tuple[list[str], list[str], Path]:
    """(module parts, attribute parts, module file) for the longest module prefix."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        f = _module_file(parts[:cut])
        if f is not None:
            return parts[:cut], parts[cut:], f
    raise Unresolved(f"no module of {dotted} under {site_root()}")


@functools.lru_cache(maxsize=64)
def _parse(text: str, filename: str) -> ast.Module:
    """Parsed once per file text: kimi_k3.py alone holds dozens of guards."""
    return ast.parse(text, filename=filename)


def _segment(lines: list[str], node: ast.AST) -> str:
    """The node's source lines as they sit in the file, decorators included."""
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", ())])
    return "".join(lines[first - 1: node.end_lineno])


def _binds(node: ast.stmt, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name
    return False


def _reexport(node: ast.stmt, name: str, module: list[str], is_package: bool) -> str | None:
    """The dotted source of `name` if `node` is `from x import name [as name]`."""
    if not isinstance(node, ast.ImportFrom):
        return None
    for alias in node.names:
        if (alias.asname or alias.name) == name:
            if node.level:
                anchor = module if is_package else module[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            return f"{base}.{alias.name}"
    return None


def source_of(dotted: str, _depth: int = 0) -> tuple[str, str]:
    """(source text, "file:line") of a dotted path, read from the installed files."""
    if _depth > 8:
        raise Unresolved(f"{dotted}: re-export chain too long")
    module, attrs, path = _split_module(dotted)
    if not attrs:
        return _read_source(path), f"{path}"
    text = _read_source(path)
    lines = text.splitlines(keepends=True)
    body: list[ast.stmt] = _parse(text, str(path)).body
    node: ast.stmt | None = None
    for i, name in enumerate(attrs):
        # The last binding wins, as at import time.
        found = [n for n in body if _binds(n, name)]
        if not found and i == 0:
            for n in body:
                target = _reexport(n, name, module, path.name == "__init__.py")
                if target:
                    rest = ".".join([target] + attrs[1:])
                    return source_of(rest, _depth + 1)
        if not found:
            raise Unresolved(f"{dotted}: no {name!r} in {'.'.join(module + attrs[:i])} ({path})")
        node = found[-1]
        body = node.body if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) else []
    assert node is not None
    return _segment(lines, node), f"{path}:{node.lineno}"


def digest_of(guard: Guard) -> tuple[str, str]:
    """(sha256 hex, where) of a guard's current source."""
    if guard.is_file:
        path = site_root() / guard.path
        if not path.is_file():
            raise Unresolved(f"no file {path}")
        return hashlib.sha256(path.read_bytes()).hexdigest(), str(path)
    text, where = source_of(guard.path)
    return hashlib.sha256(text.encode("utf-8")).hexdigest(), where


# ---------------------------------------------------------------------------------
# the live (imported) view, informational
# ---------------------------------------------------------------------------------


def _live_source(obj: object) -> str | None:
    """inspect's source of an imported object; None when it has none (a value)."""
    fn = getattr(obj, "fn", None)  # triton JITFunction wraps the python function
    if fn is not None and callable(fn) and hasattr(obj, "src"):
        obj = fn
    obj = inspect.unwrap(obj) if callable(obj) else obj
    if not (inspect.isfunction(obj) or inspect.isclass(obj) or inspect.ismethod(obj)):
        return None
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return None


def import_status(guard: Guard, file_source: str | None) -> str:
    """"yes", "yes (live source differs)", "n/a" or "unimportable: <reason>"."""
    if guard.is_file:
        return "n/a"
    parts = guard.path.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and name.startswith(e.name) and cut > 1:
                continue  # not a module: an attribute of a shorter prefix
            return f"unimportable: {type(e).__name__}: {e}"
        except Exception as e:  # GPU-only modules raise all sorts at import
            return f"unimportable: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        try:
            for a in parts[cut:]:
                obj = getattr(obj, a)
        except AttributeError as e:
            return f"unimportable: {e}"
        live = _live_source(obj)
        if live is not None and file_source is not None and live.strip() != file_source.strip():
            return "yes (live source differs)"
        return "yes"
    return "unimportable: no module"


# ---------------------------------------------------------------------------------
# checking and recording
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    guard: Guard
    status: str  # ok | changed | missing | unrecorded
    digest: str | None
    recorded: str | None
    where: str
    imported: str | None = None


def load_digests(path: Path = DIGESTS_FILE) -> dict[str, str]:
    """The recorded digests: {dotted path: sha256}."""
    if not Path(path).is_file():
        return {}
    with open(path) as f:
        return dict(json.load(f)["digests"])


def check(guards: Iterable[Guard] = GUARDS, *, digests: dict[str, str] | None = None,
          import_check: bool = False) -> list[Result]:
    """Compare each guard's current digest with the recorded one."""
    recorded = load_digests() if digests is None else digests
    out = []
    for g in guards:
        try:
            digest, where = digest_of(g)
        except (Unresolved, OSError, SyntaxError) as e:
            digest, where = None, str(e)
        want = recorded.get(g.path)
        if digest is None:
            status = "missing"
        elif want is None:
            status = "unrecorded"
        else:
            status = "ok" if want == digest else "changed"
        imported = None
        if import_check:
            src = None if (g.is_file or digest is None) else source_of(g.path)[0]
            imported = import_status(g, src)
        out.append(Result(g, status, digest, want, where, imported))
    return out


def installed_sglang_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:
        return None


def write_digests(path: Path, results: list[Result]) -> None:
    """Record every resolvable guard's current digest (the deliberate --update)."""
    missing = [r.guard.path for r in results if r.digest is None]
    if missing:
        raise Unresolved("cannot record guards that do not resolve: " + ", ".join(missing))
    doc = {
        "sglang": installed_sglang_version(),
        "note": "written by `sgl-k3-mono drift --update`; see sgl_k3_mono/drift.py for what each guards",
        "digests": {r.guard.path: r.digest for r in results},
    }
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def print_table(results: list[Result], stream=None) -> None:
    stream = stream or sys.stdout
    width = max(len(r.guard.path) for r in results)
    for r in results:
        line = f"{r.status:<10} {r.guard.path:<{width}}"
        if r.imported is not None:
            line += f"  import: {r.imported}"
        print(line.rstrip(), file=stream)
        if r.status != "ok":
            print(f"{'':<10}   re-verify: {r.guard.reverify}", file=stream)
            if r.status == "missing":
                print(f"{'':<10}   why: {r.where}", file=stream)
            elif r.status == "changed":
                print(f"{'':<10}   source: {r.where}", file=stream)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + f" of {len(results)} guarded",
          file=stream)


def main(argv: list[str] | None = None) -> int:
    """`sgl-k3-mono drift [--update] [--digests FILE] [--no-import]`."""
    ap = argparse.ArgumentParser(
        prog="sgl-k3-mono drift",
        description="Check that the SGLang functions the launches reproduce are unchanged.",
    )
    ap.add_argument("--update", action="store_true",
                    help="record the installed SGLang's digests (accept the drift, deliberately)")
    ap.add_argument("--digests", type=Path, default=DIGESTS_FILE, help=f"digest file (default {DIGESTS_FILE})")
    ap.add_argument("--no-import", action="store_true",
                    help="skip the informational import column (fast: reads source files only)")
    args = ap.parse_args(argv)
    results = check(digests=load_digests(args.digests), import_check=not args.no_import)
    if args.update:
        try:
            write_digests(args.digests, results)
        except Unresolved as e:
            print(f"drift --update: {e}", file=sys.stderr)
            return 1
        print(f"recorded {len(results)} digests in {args.digests}")
        return 0
    have, pinned = installed_sglang_version(), SGLANG_VERSION
    if have != pinned:
        print(f"note: installed sglang {have}, the guards were written for {pinned}")
    print_table(results)
    return 0 if all(r.status == "ok" for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
