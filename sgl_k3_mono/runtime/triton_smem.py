"""Shared memory past Triton's own buffers, for what a kernel manages by hand (mma_fp4's
cp.async ring), and the split of an SM's memory between shared and L1 (the carveout).

Triton sizes a launch's dynamic shared memory (`global_smem`) to its own buffers and
passes that size at every launch. A buffer that inline PTX addresses must not overlap
them, so it goes past their end: this grows the compiled kernel's size by the buffer's
bytes before the kernel is first loaded (loading sets the per-function opt-in limit from
it) and returns the offset where the buffer starts, which the kernel takes as a runtime
scalar. The same CompiledKernel object is what Triton's JIT cache hands every later launch
of that specialisation, so the larger size holds for all of them, CUDA-graph replays too.
Triton 3.6 (the H200's) and 3.8 (this project's pin) keep the size in `metadata.shared`
and in `packed_metadata`, and load the module lazily (`_init_handles`): the drift guard is
`test_reserve_grows_a_compiled_kernels_shared_memory_past_its_own`.

The same shared memory is L1's: at load the driver splits an SM's 256 KB between the two
by a carveout it picks per function. Triton 3.6 asks for the largest shared part
(PREFER_SHARED) for any kernel past 48 KB, which leaves L1 256 - 228 KB on sm_90; below
48 KB the driver's choice varies (Nsight Compute, sixteenth session: 64 KB and 132 KB
shared for two phase launches of K2 of 41 KB each). (Triton 3.8 sets an oversized-shared
mode there instead where the driver has one, which this does not undo.)
`fit_carveout` asks instead for the smallest part that holds one block."""

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


# CUDA driver enums (cuda.h), for the carveout below
_CU_FUNC_CACHE_PREFER_NONE = 0
_CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
_CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81
_CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111


def carveout_percent(shared: int, per_sm: int, reserved: int) -> int:
    """The smallest carveout hint, in percent of an SM's `per_sm` shared bytes, that holds
    one block of `shared` dynamic bytes and the `reserved` bytes the driver keeps a block
    (the driver rounds a hint up to the next shared size the SM supports)."""
    if per_sm <= 0 or shared < 0 or reserved < 0:
        raise ValueError(f"carveout_percent: shared {shared}, per_sm {per_sm}, reserved {reserved}")
    if shared + reserved > per_sm:
        raise ValueError(f"carveout_percent: a block of {shared} + {reserved} B passes the SM's {per_sm} B")
    return -(-100 * (shared + reserved) // per_sm)


def _cuda_call(lib, name: str, *args) -> None:
    rc = getattr(lib, name)(*args)
    if rc != 0:
        raise RuntimeError(f"{name} failed: CUresult {rc}")


def fit_carveout(kernel) -> int:
    """Load compiled `kernel` (triton CompiledKernel, sm_90) if it is not loaded yet, and set
    its carveout to carveout_percent of its shared memory, its cache preference back to
    none: L1 keeps the rest of the SM. Returns the percent (idempotent: the same on a
    second call). Call it after `reserve`, which must come before the load."""
    done = getattr(kernel, "_sgl_k3_mono_carveout", None)
    if done is not None:
        return done
    import ctypes

    kernel._init_handles()
    lib = ctypes.CDLL("libcuda.so.1")
    dev, per_sm, reserved = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
    _cuda_call(lib, "cuCtxGetDevice", ctypes.byref(dev))
    _cuda_call(lib, "cuDeviceGetAttribute", ctypes.byref(per_sm),
               _CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, dev)
    _cuda_call(lib, "cuDeviceGetAttribute", ctypes.byref(reserved),
               _CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, dev)
    pct = carveout_percent(kernel.metadata.shared, per_sm.value, reserved.value)
    fn = ctypes.c_void_p(kernel.function)
    _cuda_call(lib, "cuFuncSetCacheConfig", fn, _CU_FUNC_CACHE_PREFER_NONE)
    _cuda_call(lib, "cuFuncSetAttribute", fn, _CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, pct)
    kernel._sgl_k3_mono_carveout = pct
    return pct


def carveout_of(kernel) -> int:
    """The carveout hint the loaded `kernel`'s function holds (-1: the driver's default)."""
    import ctypes

    lib = ctypes.CDLL("libcuda.so.1")
    v = ctypes.c_int()
    _cuda_call(lib, "cuFuncGetAttribute", ctypes.byref(v), _CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
               ctypes.c_void_p(kernel.function))
    return v.value
