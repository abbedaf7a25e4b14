"""FLATD's and FLATX's premise, on the CPU: their loops over a program's (tile or item, K
step) pairs are worth having only if Triton's software pipeliner pipelines them, and a CTA
barrier in a loop's body (tl.debug_barrier) makes it leave the loop's loads plain. K2 at a
TP-8 rank's shapes, compiled for sm_90 on the CPU (compile_check's stub driver, in a
process of its own): in the pipelined TTGIR, the loads of every flat loop are async copies
into shared memory (MXFP4, FLATD: the front's, with its routing count, and latent_up's;
bf16 with FLATX too: experts_up's gate and up, experts_down's routed items and shared tiles;
FLATX's and FLATD's on the tensor cores, from 2 rows)."""

import json
import os

import pytest
import subprocess
import sys

WORKER = r"""
import json, re, sys
from sgl_k3_mono import compile_check as cc
cc._stub_driver("sm_90")
from sgl_k3_mono.k2.host import K2Launch
from sgl_k3_mono.k2.triton import matmul

orig = K2Launch.launch_args
fmt, block, rows = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
def patched(self, *a, **k):
    self.set_block(**block)
    return orig(self, *a, **k)
K2Launch.launch_args = patched
kernel, args, meta = cc._k2_variant(fmt, "sm_90", rows, "sm_90")
ck = kernel.warmup(*args, PHASE=-1, grid=(132,), **dict(meta, HIP=False))
ir = ck.asm["ttgir"]
locs = dict(re.findall(r"^(#loc\d+) = (loc\(.*\))$", ir, re.M))

def chain(ref, depth=0):
    # the source lines a location and the call sites it was inlined through name
    v = locs.get(ref, "")
    m = re.match(r'loc\("([^"]+)":(\d+):\d+\)', v)
    if m:
        return [(m.group(1).rsplit("/", 1)[-1], int(m.group(2)))]
    m = re.match(r"loc\(callsite\((#loc\d+) at (#loc\d+)\)\)", v)
    if m and depth < 40:
        return chain(m.group(1), depth + 1) + chain(m.group(2), depth + 1)
    m = re.match(r'loc\("[^"]*"\((#loc\d+)\)\)', v)
    return chain(m.group(1), depth + 1) if m else []

steps = [f.fn.__code__.co_firstlineno for f in (matmul.gemv_bf16_step, matmul.dot_bf16_step)]
flat = matmul.bf16_step.fn.__code__.co_firstlineno
found = {"async": set(), "plain": set()}
for line in ir.splitlines():
    kind = "async" if "ttg.async_copy_global_to_local" in line else "plain" if " tt.load " in line else None
    m = re.search(r"loc\((#loc\d+)\)\s*$", line)
    if kind and m:
        c = chain(m.group(1))
        # a load of a K step that a flat loop calls, itself or through bf16_step (gemv_bf16 and
        # dot_bf16 call the steps too: not counted)
        if len(c) > 1 and c[0][0] == "matmul.py" and any(t < c[0][1] < t + 14 for t in steps):
            if c[1][0] == "matmul.py" and flat < c[1][1] < flat + 14:
                c = c[1:]
            if c[1][0] == "kernel.py":
                found[kind].add(c[1][1])  # the call site in the kernel
print(json.dumps({"flatd": meta["FLATD"], "flatx": meta["FLATX"], "async": sorted(found["async"]), "plain": sorted(found["plain"])}))
"""


@pytest.mark.parametrize("fmt,rows,block,sites", [("mxfp4", 1, {"FLATD": 1}, 2),
                                                  ("bf16", 1, {"FLATD": 1, "FLATX": 1}, 6),
                                                  ("bf16", 8, {"FLATX": 1}, 4),
                                                  # FLATD on the tensor cores (an option from 2 rows)
                                                  ("mxfp4", 2, {"FLATD": 1}, 2),
                                                  ("bf16", 8, {"FLATD": 1, "FLATX": 1}, 6)])
def test_flat_loops_are_pipelined(fmt, rows, block, sites):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", WORKER, fmt, json.dumps(block), str(rows)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    print(got)
    assert (got["flatd"], got["flatx"]) == (block.get("FLATD", 0), block.get("FLATX", 0))
    assert len(got["async"]) == sites and got["plain"] == [], got  # each flat loop's call sites
