"""Make Triton's CPU interpreter compute bf16 the way the GPU does, for the launch tests.

Two gaps in the interpreter (seen with triton 3.8): it keeps bf16 as raw uint16 and
`tl.dot` then multiplies the raw bits; and it truncates fp32 -> bf16 where the GPU
rounds to nearest even. `patch()` fixes both in this process; call it before running a
kernel with TRITON_INTERPRET=1.
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl


def _bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.ascontiguousarray(bits).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def patch() -> None:
    import triton.language as tl
    from triton.runtime import interpreter as ti

    B = ti.InterpreterBuilder
    if getattr(B, "_sgl_k3_mono_patched", False):
        return

    dot = B.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar == tl.bfloat16 or b.dtype.scalar == tl.bfloat16:
            fa = _bf16_bits_to_f32(a.data) if a.dtype.scalar == tl.bfloat16 else a.data.astype(np.float32)
            fb = _bf16_bits_to_f32(b.data) if b.dtype.scalar == tl.bfloat16 else b.data.astype(np.float32)
            # bf16 x bf16 products are exact in fp32; accumulate in float64 like a wide MMA tree
            out = np.matmul(fa.astype(np.float64), fb.astype(np.float64)).astype(np.float32) + d.data
            return ti.TensorHandle(out.astype(d.data.dtype), d.dtype.scalar)
        return dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    def rne(orig):
        def cast(self, src, dst_type, *rest):
            if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
                return ti.TensorHandle(_f32_to_bf16_bits(src.data), dst_type.scalar)
            return orig(self, src, dst_type, *rest)
        return cast

    B.create_dot = create_dot
    B.cast_impl = rne(B.cast_impl)
    B.create_fp_to_fp = rne(B.create_fp_to_fp)
    B.create_fp_trunc = rne(B.create_fp_trunc)
    B._sgl_k3_mono_patched = True


_ticks = [0]


def _tick() -> int:
    _ticks[0] += 1_000_000  # a millisecond a read: a wait that never ends expires, it does not spin
    return _ticks[0]


@triton.jit
def _interp_now_ns(HIP: tl.constexpr = False):
    return tl.full([], _tick(), tl.int64)


def patch_clock() -> None:
    """The launches' timer (runtime.triton_sync.now_ns, a PTX / HIP special register the
    interpreter lacks) as a clock that moves a millisecond each read, so a persistent
    launch runs on one program under the interpreter: its barriers and counted waits are
    then met by that program's own arrivals, or expire."""
    import sgl_k3_mono.k2.triton.kernel as k2
    import sgl_k3_mono.runtime.triton_sync as sync

    sync.now_ns = k2.now_ns = _interp_now_ns
