"""Kernels bench k2 runs before a launch, to tell what slows a launch that follows another:
a stream that reads a buffer through L2 with a chosen eviction priority (sm_90), and a
kernel of long code that reads next to nothing.

The forty-ninth session read K2's loss after a 256 MB torch read (~12 us at 1 row) as its
code fetched from HBM. The fifty-second found K2 as warm after `stream_read` of the same
256 MB, default policy or evict-first, and as slow after torch's sum of 4 KB: the kernel that
ran before counts, not what L2 holds (k2-sm90.md). The fifty-third added `spin` (a kernel of
next to no code, as long as asked): after it K2 is warm, after 22 KB of `code_sweep` on one
program it is not, so what counts is the other code fetched. The stream's loads are not
pipelined: Triton drops the eviction policy from loads it turns into `cp.async`.
"""

from __future__ import annotations

import triton
import triton.language as tl
from triton.language.extra import cuda as _cuda


@triton.jit
def _stream_read(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EP: tl.constexpr):
    pid = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        acc += tl.load(x_ptr + start + offs, mask=start + offs < n, other=0.0, eviction_policy=EP)
    tl.store(out_ptr + pid * BLOCK + offs, acc)  # (kept, so the loads are not dead code)


def stream_read(x, out, evict_first: bool, carve: bool = False) -> None:
    """Read every element of the fp32 buffer `x` once; `out` ([programs, block] fp32) takes
    each program's partial sums. `evict_first`: the loads carry L2's evict-first policy.
    `carve`: the kernel's carveout fitted to its (tiny) shared memory, so an SM it runs on
    splits its memory mostly to L1 (runtime/triton_smem.fit_carveout), as a kernel that asks
    for no carveout may get from the driver (give it an `out` of another block size: the
    hint stays with the compiled kernel)."""
    programs, block = out.shape
    kernel = _stream_read[(programs,)](x, out, x.numel(), BLOCK=block, EP="evict_first" if evict_first else "",
                                       num_warps=4, num_stages=1)
    if carve:
        from sgl_k3_mono.runtime.triton_smem import fit_carveout

        fit_carveout(kernel)


@triton.jit
def _code_sweep(x_ptr, out_ptr, STEPS: tl.constexpr, SEED: tl.constexpr):
    offs = tl.arange(0, 128)
    acc = tl.zeros((128,), tl.float32)
    for i in tl.static_range(STEPS):  # unrolled: STEPS distinct load-and-fma bodies, straight-line code
        acc = acc * (1.0 + i * 1e-7) + tl.load(x_ptr + (offs * 7 + i * 13 + SEED) % 1024)
    tl.store(out_ptr + tl.program_id(0) * 128 + offs, acc)


def code_sweep(x, out, kernels: int = 1) -> None:
    """Run `kernels` kernels of long straight-line code, each its own (256 unrolled bodies,
    ~22 KB of sm_90 SASS: more bodies take Triton minutes to compile), on `out.shape[0]`
    programs, each reading 4 KB of `x` (fp32, >= 1024 + kernels elements): what they leave in
    L2 is nearly nothing, what they leave in the caches that hold code is theirs.
    `out` [programs, 128] fp32."""
    for seed in range(kernels):
        _code_sweep[(out.shape[0],)](x, out, STEPS=256, SEED=seed, num_warps=4, num_stages=1)


@triton.jit
def _spin(out_ptr, NS: tl.constexpr):
    t0 = _cuda.globaltimer()
    t = t0
    while t - t0 < NS:
        t = _cuda.globaltimer()
    tl.store(out_ptr + tl.program_id(0), (t - t0).to(tl.float32))


def spin(out, ns: int) -> None:
    """`out.numel()` programs of a few instructions each, busy for `ns` nanoseconds by the GPU's
    timer (0: they only store); each stores the time it spun into `out` (fp32). With ns=0 and one
    program it is the smallest kernel there is; with many ns it is a long kernel of next to no
    code and no memory traffic, to tell the kernel that ran last by its length from its code
    and its reads."""
    _spin[(out.numel(),)](out, NS=ns, num_warps=1, num_stages=1)
