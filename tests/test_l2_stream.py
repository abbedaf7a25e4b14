"""`runtime/l2_stream` (the benchmarks' reads before a launch) under Triton's CPU
interpreter: every element read exactly once, with either policy; and its sm_90 build carries
L2's evict-first hint on plain loads (the CPU compile, no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys

_RUN = """
import torch
from sgl_k3_mono.runtime.l2_stream import stream_read
x = torch.arange(10_000, dtype=torch.float32) % 97
for ef in (False, True):
    out = torch.full((3, 256), float("nan"))
    stream_read(x, out, evict_first=ef)
    print(ef, float(out.sum()), float(x.sum()))
"""


def test_the_stream_reads_every_element_once():
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [line.split() for line in r.stdout.strip().splitlines()]
    assert [line[0] for line in lines] == ["False", "True"]
    assert all(float(a) == float(b) for _, a, b in lines), lines


_COMPILE = """
import torch
from sgl_k3_mono.compile_check import _stub_driver
_stub_driver("sm_90")
from sgl_k3_mono.runtime.l2_stream import _stream_read
for ep in ("", "evict_first"):
    ptx = _stream_read.warmup(torch.empty(1 << 16), torch.empty(8, 1024), 1 << 16, BLOCK=1024, EP=ep, grid=(8,),
                              num_warps=4, num_stages=1).asm["ptx"]
    print(repr(ep), "L2::cache_hint" in ptx, "createpolicy.fractional.L2::evict_first" in ptx, "cp.async" in ptx)
"""


def test_the_sm90_stream_carries_the_l2_evict_first_hint():
    """(In a process of its own: the stub driver would stay active for the GPU tests after it.)"""
    r = subprocess.run([sys.executable, "-c", _COMPILE], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["'' False False False", "'evict_first' True True False"], r.stdout


_SWEEP = """
import torch
from sgl_k3_mono.runtime.l2_stream import code_sweep
x = torch.arange(2048, dtype=torch.float32) % 5
out = torch.full((3, 128), float("nan"))
code_sweep(x, out, kernels=2)  # the last kernel's (SEED 1) sums are what stays
offs = torch.arange(128)
acc = torch.zeros(128, dtype=torch.float64)
for i in range(256):
    acc = acc * (1.0 + i * 1e-7) + x[(offs * 7 + i * 13 + 1) % 1024].double()
print(float((out - acc).abs().max()), float(acc.abs().max()))
"""


def test_the_code_sweep_computes_its_sums():
    """`code_sweep` (bench k2's `code_22kb` / `code_110kb`: long code, 4 KB of data) under the
    interpreter: every program's 128 sums are the unrolled loop's."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", _SWEEP], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    err, scale = map(float, r.stdout.split())
    assert scale > 100 and err <= 1e-5 * scale, (err, scale)


_SPIN = """
import torch
from sgl_k3_mono.compile_check import _stub_driver
_stub_driver("sm_90")
from sgl_k3_mono.runtime.l2_stream import _spin
for ns in (0, 100_000):
    k = _spin.warmup(torch.empty(4), NS=ns, grid=(4,), num_warps=1, num_stages=1)
    ptx = k.asm["ptx"]
    print(ns, "globaltimer" in ptx, ptx.count("ld.global"), ptx.count("st.global") >= 1)
"""


def test_the_sm90_spin_reads_the_timer_and_nothing_else():
    """l2_stream.spin (bench k2's few-instruction kernel before a launch) builds for sm_90,
    its only memory access the final store, its wait on the GPU's timer."""
    r = subprocess.run([sys.executable, "-c", _SPIN], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split("\n")[:2] == ["0 True 0 True", "100000 True 0 True"], r.stdout


def test_bench_k2_refuses_a_cold_way_that_is_none_before_any_work():
    """`bench k2 --cold-ways` names the reads before a launch to time; a misspelt one is refused
    at the command line (it used to be a way silently left out), listing every way there is,
    the l2_stream kernels' among them."""
    r = subprocess.run([sys.executable, "-m", "sgl_k3_mono.k2.bench", "--l2-cold", "--cold-ways",
                        "after_spin_1,after_spin_one"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "['after_spin_one'] are none of" in r.stderr
    for way in ("after_stream_4kb", "after_spin_sms_100us", "after_code_22kb_1", "l2_cold"):
        assert way in r.stderr
