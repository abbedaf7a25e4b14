"""SPASS's premise, on the CPU: K2's split seam run twice (SPASS 2, the probe that separates a
pass's cold code fetch from its work) must be one copy of the seam's code run twice, not a
second copy the compiler unrolled, or its second pass would fetch cold code too. K2 at a
TP-8 rank's shapes, 1 row, traced, compiled for sm_90 on the CPU (compile_check's stub
driver, in a process of its own): the timer reads in the SASS are as many with SPASS 2 as
with the one pass."""

import json
import os
import subprocess
import sys

import pytest

WORKER = r"""
import json, sys
from sgl_k3_mono import compile_check as cc
cc._stub_driver("sm_90")
from sgl_k3_mono.k2.host import K2Launch

over = json.loads(sys.argv[1])
orig = K2Launch.launch_args
def patched(self, *a, **k):
    self.set_block(**over)
    return orig(self, *a, **k)
K2Launch.launch_args = patched
kernel, args, meta = cc._k2_variant("mxfp4", "sm_90", 1, "sm_90")
meta = dict(meta, HIP=False, TRACE=True)
ck = kernel.warmup(*args, PHASE=-1, grid=(132,), **meta)
sass = cc.cuobjdump(ck.asm["cubin"], "-sass")
print(json.dumps({"spass": meta["SPASS"], "timer_reads": sass.count("SR_GLOBALTIMERLO")}))
"""


def _timer_reads(over: dict) -> dict:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", WORKER, json.dumps(over)], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform != "linux", reason="cuobjdump ships with Triton's Linux wheel")
def test_seam_run_twice_is_one_copy_of_its_code():
    one, two = _timer_reads({}), _timer_reads({"SPASS": 2})
    print(one, two)
    assert (one["spass"], two["spass"]) == (1, 2)
    assert two["timer_reads"] == one["timer_reads"] > 0, (one, two)
