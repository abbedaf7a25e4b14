"""Shared memory past Triton's own buffers, for what a kernel manages by hand (mma_fp4's
cp.async ring).

Triton sizes a launch's dynamic shared memory (`global_smem`) to its own buffers and
passes that size at every launch. A buffer that inline PTX addresses must not overlap
them, so it goes past their end: this grows the compiled kernel's size by the buffer's
bytes before the kernel is first loaded (loading sets the per-function opt-in limit from
it) and returns the offset where the buffer starts, which the kernel takes as a runtime
scalar. The same CompiledKernel object is what Triton's JIT cache hands every later launch
of that specialisation, so the larger size holds for all of them, CUDA-graph replays too.
Triton 3.6 (the H200's) and 3.8 (this project's pin) keep the size in `metadata.shared`
and in `packed_metadata`, and load the module lazily (`_init_handles`): the drift guard is
`test_reserve_grows_a_compiled_kernels_shared_memory_past_its_own`."""

from __future__ import annotations

ALIGN = 128
"""Byte alignment of the reserved buffer's start (cp.async wants 16; 128 keeps whole lines)."""

MAX_SHARED_SM90 = 232448
"""The opt-in shared memory a block may take on sm_90 (227 KB)."""


def start_past(shared: int) -> int:
    """Where a buffer reserved past `shared` bytes of Triton's own begins (ALIGN-ed)."""
    return -(-shared // ALIGN) * ALIGN


def reserve(kernel, nbytes: int, *, limit: int = MAX_SHARED_SM90) -> int:
    """Grow compiled `kernel` (triton CompiledKernel, not yet loaded) by `nbytes` of shared
    memory past Triton's own and return the buffer's offset. Idempotent for the same size.
    Raises if the kernel was already loaded or the total passes `limit`."""
    from triton.compiler.compiler import make_backend

    done = getattr(kernel, "_sgl_k3_mono_reserved", None)
    if done is not None:
        if done[1] != nbytes:
            raise RuntimeError(f"{kernel.name}: shared memory already reserved for {done[1]} bytes, not {nbytes}")
        return done[0]
    if getattr(kernel, "module", None) is not None or getattr(kernel, "_run", None) is not None:
        raise RuntimeError(f"{kernel.name}: loaded before its shared memory was reserved")
    meta = kernel.metadata
    off = start_past(meta.shared)
    total = off + nbytes
    if total > limit:
        raise ValueError(f"{kernel.name}: {meta.shared} B of Triton's shared memory and {nbytes} B reserved "
                         f"pass the {limit} B a block may take")
    kernel.metadata = meta._replace(shared=total)
    kernel.packed_metadata = make_backend(meta.target).pack_metadata(kernel.metadata)
    kernel._sgl_k3_mono_reserved = (off, nbytes)
    return off
