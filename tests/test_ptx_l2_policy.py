"""`runtime/ptx_l2_policy`: the PTX rewrite that puts a marked kernel's `cp.async` copies
under L2's evict-first policy (K1Plan.l2_evict_first), on PTX text; the hook it installs into
Triton; and the CPU compile of K1 with it (the rewritten PTX assembles for sm_90, no GPU)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sgl_k3_mono.runtime import ptx_l2_policy as pol

_PTX = """//
.version 8.4
.target sm_90a
.visible .entry k1_kernel(
\t.param .u64 .ptr .global .align 1 k1_kernel_param_0
)
.reqntid 128
{
\t.reg .b32 \t%r<9>;
\tmov.u32 %r1, 0; {mark}
\tcp.async.cg.shared.global [ %r2 + 0 ], [ %rd1 + 0 ], 0x10, %r3;
\t@%p1 cp.async.cg.shared.global [ %r4 + 0 ], [ %rd2 + 0 ], 0x10;
\tcp.async.ca.shared.global.L2::128B [ %r5 + 0 ], [ %rd3 + 0 ], 4, %r6;
\tcp.async.commit_group;
\tld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd4];
\tret;
}
"""


def test_an_unmarked_kernel_is_left_as_it_is():
    ptx = _PTX.replace("{mark}", "")
    assert pol.rewrite(ptx) is ptx


def test_every_copy_of_a_marked_kernel_takes_the_policy_made_once_at_its_entry():
    out = pol.rewrite(_PTX.replace("{mark}", pol.MARK))
    assert out.count("createpolicy.fractional.L2::evict_first.b64 \t%sgl_ef, 1.0;") == 1
    assert out.index("createpolicy") < out.index("cp.async")  # made before the first copy
    assert "cp.async.cg.shared.global.L2::cache_hint [ %r2 + 0 ], [ %rd1 + 0 ], 0x10, %r3, %sgl_ef;" in out
    assert "@%p1 cp.async.cg.shared.global.L2::cache_hint [ %r4 + 0 ], [ %rd2 + 0 ], 0x10, %sgl_ef;" in out
    # the prefetch-size hint stays, after the cache hint (PTX's order of the qualifiers)
    assert "cp.async.ca.shared.global.L2::cache_hint.L2::128B [ %r5 + 0 ], [ %rd3 + 0 ], 4, %r6, %sgl_ef;" in out
    assert "cp.async.commit_group;" in out and "ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd4];" in out  # untouched


@pytest.mark.parametrize("change,why", [
    (lambda p: p + "\n.func helper()\n{\n\tret;\n}\n", "func"),
    (lambda p: p.replace("0x10, %r3;", "0x10, %r3, %rd9;").replace(".global [ %r2", ".global.L2::cache_hint [ %r2"),
     "already"),
    (lambda p: "\n".join(line for line in p.splitlines() if "cp.async." not in line or "commit" in line),
     "no cp.async"),
])
def test_a_marked_kernel_it_cannot_rewrite_whole_is_refused(change, why):
    with pytest.raises(ValueError, match=why):
        pol.rewrite(change(_PTX.replace("{mark}", pol.MARK)))


def test_the_hook_adds_its_version_to_the_cache_key_and_wraps_only_the_ptx_stage(monkeypatch):
    from triton import knobs

    calls = []
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook",
                        lambda *a: ("prev", "prevd") if not a else calls.append(a))
    monkeypatch.setattr(pol, "_installed", False)
    pol.install()
    pol.install()  # idempotent: wrapped once
    hook = knobs.runtime.add_stages_inspection_hook
    assert hook() == ("prev" + pol.VERSION, "prevd" + pol.VERSION)
    stages = {"ttir": lambda src, md: "ttir", "ptx": lambda src, md: _PTX.replace("{mark}", pol.MARK)}
    hook(None, stages, None, None, 90)
    assert len(calls) == 1  # the hook set before ran first
    assert stages["ttir"](None, {}) == "ttir" and "%sgl_ef" in stages["ptx"](None, {})
    monkeypatch.setattr(pol, "_installed", False)


def test_a_triton_without_the_hook_is_refused_not_left_unrewritten(monkeypatch):
    import types

    from triton import knobs

    monkeypatch.setattr(knobs, "runtime", types.SimpleNamespace())
    monkeypatch.setattr(pol, "_installed", False)
    with pytest.raises(RuntimeError, match="add_stages_inspection_hook"):
        pol.install()


_COMPILE = """
import re
from sgl_k3_mono import compile_check as cc
cc._stub_driver("sm_90")
for efw in (False, True):
    kernel, args, meta = cc._k1_variant("decode", 1, "sm_90")
    meta = dict(meta, HIP=False, PHASE=-1, EFW=efw)
    if efw:
        from sgl_k3_mono.runtime.ptx_l2_policy import install
        install()
    ck = kernel.warmup(*args, grid=(132,), **meta)
    ptx = ck.asm["ptx"]
    copies = len(re.findall(r"cp[.]async[.]c[ag][.]shared", ptx))
    print(efw, copies, ptx.count(".L2::cache_hint"), ptx.count("createpolicy"), len(ck.asm["cubin"]) > 0)
"""


def test_k1_with_the_policy_compiles_for_sm90_with_every_copy_rewritten():
    """(In a process of its own: the stub driver and the hook would stay for the tests after it.)"""
    r = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    (f0, n0, h0, c0, b0), (f1, n1, h1, c1, b1) = (line.split() for line in r.stdout.strip().splitlines()[-2:])
    assert (f0, h0, c0, b0) == ("False", "0", "0", "True") and int(n0) > 0
    assert (f1, c1, b1) == ("True", "1", "True") and h1 == n1 == n0
