"""runtime/triton_smem.reserve on a kernel compiled for sm_90 on the CPU: the drift guard
for the two CompiledKernel fields it rewrites (Triton 3.6 on the H200, 3.8 here)."""

import pytest
import triton

from sgl_k3_mono.runtime import triton_smem


def _compiled():
    import triton.language as tl
    from triton.backends.compiler import GPUTarget

    @triton.jit
    def probe(x_ptr, o_ptr, N: tl.constexpr):
        t = tl.arange(0, N)
        tl.store(o_ptr + t, tl.sum(tl.load(x_ptr + t), 0) + t)  # a cross-warp sum: some shared memory of Triton's

    src = triton.compiler.ASTSource(fn=probe, signature={"x_ptr": "*fp32", "o_ptr": "*fp32", "N": "constexpr"},
                                    constexprs={"N": 256})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})


def test_reserve_grows_a_compiled_kernels_shared_memory_past_its_own():
    """The buffer starts past Triton's own bytes (aligned), the launch size and the packed
    launch metadata both grow by it, a second call of the same size is the same offset, and
    another size, an overflow of the SM's limit or an already loaded kernel are refused."""
    ck = _compiled()
    own = ck.metadata.shared
    assert own > 0 and ck.packed_metadata[2] == own
    off = triton_smem.reserve(ck, 61440)
    assert off == triton_smem.start_past(own) >= own and off % triton_smem.ALIGN == 0
    assert ck.metadata.shared == off + 61440 and ck.packed_metadata[2] == off + 61440
    assert triton_smem.reserve(ck, 61440) == off
    with pytest.raises(RuntimeError, match="already reserved"):
        triton_smem.reserve(ck, 1024)
    with pytest.raises(ValueError, match="pass the"):
        triton_smem.reserve(_compiled(), triton_smem.MAX_SHARED_SM90)
    loaded = _compiled()
    loaded._run = object()  # what _init_handles leaves once the module is loaded
    with pytest.raises(RuntimeError, match="loaded before"):
        triton_smem.reserve(loaded, 1024)
