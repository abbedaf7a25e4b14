"""Every shipped launch variant, for `sgl-k3-mono compile-check --every` (what CI runs).

A served step launches K1 (decode, or verify) and K2 (MXFP4 or bf16 experts) at one of
the widths SGLang routes to the plugin (isa.WIDTHS: 1..8), at a TP size the spec accepts
on the ISA (isa.PROFILES: 1, 2, 4, 8 on sm_90; 8 on gfx950), each at that TP's per-rank
shapes. That product is enumerated here, each member built through the launches' own
host side on CPU placeholders; members that compile to the same kernel are grouped, and
each group compiles once:

- Triton: the same constexprs and the same argument specialization (Triton specializes
  integer arguments equal to 1, divisible by 16, or past 32 bits, and pointer alignment);
- FlyDSL: the same constants and the same tensor dtypes, shapes and strides (FlyDSL's
  tensors are static by default, so shapes enter its key; the state pools' slot count
  does not, measured: the traced IR does not read it).

On gfx950 K2's MXFP4 experts come in the layouts SGLang 0.5.23 leaves there
(compile_check.AITER_LAYOUTS: AITER's a16w4 by default, its generic preshuffle padded or
not) as well as its plain loaded one: each is a member at every width.

K1's layer kinds (bank write, pending add) are further constexprs: every kind is
compiled at 8 rows and TP 8, the product above uses the kind most layers have (pending
add, no bank write). FlyDSL K2 with bf16 experts is refused by the launch (their TP-8
w13 is past a buffer descriptor's offsets): such members are listed as refusals, not
compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sgl_k3_mono.isa import PROFILES, WIDTHS

FORMATS = ("mxfp4", "bf16")
MODES = ("decode", "verify")
KINDS = {"add": dict(write=False, contribution=True), "write": dict(write=True, contribution=False),
         "writeadd": dict(write=True, contribution=True), "plain": dict(write=False, contribution=False)}
"""K1 layer kinds: bank write at a block's end, pending add of the previous block."""


@dataclass(frozen=True)
class Member:
    """One shipped combination: its name and how to build (kernel, args, meta) for a target."""

    name: str
    build: Callable


def triton_members(target: str) -> list[Member]:
    """Every shipped Triton launch on `target` (its builds take the target as argument)."""
    from sgl_k3_mono.compile_check import AITER_LAYOUTS, _k1_variant, _k2_variant

    out = []
    for tp in PROFILES[target].tp_sizes:
        for m in WIDTHS:
            for fmt in FORMATS:
                out.append(Member(f"k2-{fmt}-tp{tp}-M{m}", lambda t, fmt=fmt, m=m, tp=tp:
                                  _k2_variant(fmt, t, m, t, tp=tp, shapes_tp=tp)))
            for mode in MODES:
                out.append(Member(f"k1-{mode}-add-tp{tp}-M{m}", lambda t, mode=mode, m=m, tp=tp:
                                  _k1_variant(mode, m, t, tp=tp, isa=t, **KINDS["add"])))
    for mode in MODES:
        for kind in KINDS:
            if kind != "add":
                out.append(Member(f"k1-{mode}-{kind}-tp8-M8", lambda t, mode=mode, kind=kind:
                                  _k1_variant(mode, 8, t, tp=8, isa=t, **KINDS[kind])))
    if target == "gfx950":  # the MXFP4 experts as SGLang's AITER post-load leaves them there
        for lay in AITER_LAYOUTS:
            for m in WIDTHS:
                out.append(Member(f"k2-mxfp4-{lay}-tp8-M{m}", lambda t, lay=lay, m=m:
                                  _k2_variant("mxfp4", t, m, t, tp=8, shapes_tp=8, layout=lay)))
    return out


def _spec(a) -> tuple:
    import torch

    if isinstance(a, torch.Tensor):
        return ("tensor", str(a.dtype), a.data_ptr() % 16 == 0)
    if isinstance(a, bool):
        return ("bool", a)
    if isinstance(a, int):
        return ("int", a == 1, a % 16 == 0, -2**31 <= a < 2**31)
    return (type(a).__name__,)


def triton_key(target: str, built) -> tuple:
    """What Triton compiles one kernel for: its constexprs and each argument's value class,
    except the arguments the kernel does not specialise on (do_not_specialize), which
    any value shares (K2's frh moves with the rows inside a tile class)."""
    kernel, args, meta = built
    free = {kernel.arg_names.index(a) if isinstance(a, str) else a for a in getattr(kernel, "do_not_specialize", ())}
    return (kernel.fn.__name__, target, tuple(sorted((k, repr(v)) for k, v in meta.items())),
            tuple(("free",) if i in free else _spec(a) for i, a in enumerate(args)))


def group(members, key_of) -> list[tuple]:
    """[(first member, [names it stands for])], members with equal keys together, in order."""
    groups: dict = {}
    for mem in members:
        groups.setdefault(key_of(mem), []).append(mem)
    return [(ms[0], [x.name for x in ms]) for ms in groups.values()]


def fly_members() -> tuple[list, list[str]]:
    """([(FlyVariant, its call builder)] of every shipped FlyDSL persistent launch, refusals)."""
    from sgl_k3_mono.compile_check_fly import (ACQUIRE_SYS, BARRIER, FRAME, MAILBOX, MXFP4, PROJECTION, ROUTE,
                                               FlyVariant)

    k2_isa = FRAME + BARRIER + PROJECTION + MXFP4 + ROUTE
    k1_isa = FRAME + BARRIER + PROJECTION
    out = []

    def add(name, kernel, call, isa):
        out.append((FlyVariant(name, kernel, lambda: call().run(), isa), call))

    from sgl_k3_mono.compile_check import AITER_LAYOUTS

    for tp in PROFILES["gfx950"].tp_sizes:
        for m in WIDTHS:
            for lay in ("plain",) + AITER_LAYOUTS:  # AITER's a16w4 is what SGLang leaves by default
                tag = "" if lay == "plain" else f"-{lay}"
                add(f"fly-every-k2-mxfp4{tag}-tp{tp}-M{m}", "k2_fly_kernel",
                    lambda m=m, tp=tp, lay=lay: _fly_k2(m, tp, lay),
                    k2_isa + ((MAILBOX + ACQUIRE_SYS) if tp > 1 else ()))
            for mode in MODES:
                add(f"fly-every-k1-{mode}-add-tp{tp}-M{m}", "k1_fly_kernel",
                    lambda mode=mode, m=m, tp=tp: _fly_k1(mode, m, tp, "add"), k1_isa)
    for mode in MODES:
        for kind in KINDS:
            if kind != "add":
                add(f"fly-every-k1-{mode}-{kind}-tp8-M8", "k1_fly_kernel",
                    lambda mode=mode, kind=kind: _fly_k1(mode, 8, 8, kind), k1_isa)
    refused = [f"FlyDSL K2 with bf16 experts, every TP and width: refused by the launch ({_fly_bf16_refusal()})"]
    return out, refused


def _fly_k2(rows: int, tp: int, layout: str = "plain"):
    from sgl_k3_mono.compile_check import _k2_variant
    from sgl_k3_mono.k2.flydsl.launch import fly_arguments, persistent_phases

    _, args, meta = _k2_variant("mxfp4", "gfx950", rows, "gfx950", tp=tp, shapes_tp=tp, layout=layout)
    return fly_arguments(args, meta, phases=persistent_phases(tp))


def _fly_k1(mode: str, rows: int, tp: int, kind: str):
    from sgl_k3_mono.k1.flydsl.launch import fly_arguments
    from sgl_k3_mono.k1.flydsl.variants import tp8_launch

    *_, args, meta = tp8_launch(mode, rows, tp=tp, **KINDS[kind])
    return fly_arguments(args, meta)


def _fly_bf16_refusal() -> str:
    from sgl_k3_mono.compile_check import _k2_variant
    from sgl_k3_mono.k2.flydsl.launch import fly_arguments, persistent_phases

    _, args, meta = _k2_variant("bf16", "gfx950", 8, "gfx950", tp=8, shapes_tp=8)
    try:
        fly_arguments(args, meta, phases=persistent_phases(8))
    except (ValueError, NotImplementedError) as e:
        return str(e)[:200]
    return "NOT refused: this list is out of date"


def fly_key(call, kernel: str) -> tuple:
    """FlyDSL's cache key, as far as this project decides it: the constants and every
    tensor's dtype, shape and strides."""
    import torch

    tensors = tuple((str(a.dtype), tuple(a.shape), tuple(a.stride())) for a in call.args
                    if isinstance(a, torch.Tensor))
    return (kernel, tuple(sorted((k, repr(x)) for k, x in call.consts.items())), tensors)


def fly_groups() -> tuple[list[tuple], list[str]]:
    """([(FlyVariant to compile, [names it stands for])], refusals as text). A member the
    FlyDSL launch refuses (fail closed, at build) is a refusal, not a variant."""
    members, refused = fly_members()
    groups: dict = {}
    for v, call in members:
        try:
            k = fly_key(call(), v.kernel)
        except (ValueError, NotImplementedError) as e:
            refused.append(f"{v.name}: refused by the launch: {str(e)[:160]}")
            continue
        groups.setdefault(k, []).append(v)
    return [(vs[0], [x.name for x in vs]) for vs in groups.values()], refused
