"""runtime/triton_smem.reserve on a kernel compiled for sm_90 on the CPU: the drift guard
for the two CompiledKernel fields it rewrites (Triton 3.6 on the H200, 3.8 here)."""

import pytest
import triton

from sgl_k3_mono.runtime.triton_smem import carveout_percent

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


def test_carveout_percent_is_the_smallest_hint_that_holds_a_block():
    """sm_90: 228 KB of shared an SM, 1 KB the driver keeps a block. A hint of p percent
    gives at least p % of the SM's shared bytes, so p must cover the block and p - 1 not."""
    per_sm, rsv = 233472, 1024
    for shared in (0, 40960, 41984, 49153, 83968, 124928, per_sm - rsv):
        p = carveout_percent(shared, per_sm, rsv)
        assert p * per_sm >= 100 * (shared + rsv) > (p - 1) * per_sm and 0 < p <= 100, shared
    with pytest.raises(ValueError, match="passes the SM"):
        carveout_percent(per_sm, per_sm, rsv)


@pytest.mark.gpu
def test_fit_carveout_sets_the_loaded_functions_hint():
    """On the GPU: a kernel past 48 KB (Triton asks for the largest shared part there) is
    loaded, given the fitted hint (read back from the driver), and still runs right; a
    second call is the same hint and loads nothing again."""
    import torch
    import triton.language as tl

    @triton.jit
    def probe_gpu(x_ptr, o_ptr, N: tl.constexpr):
        t = tl.arange(0, N)
        tl.store(o_ptr + t, tl.sum(tl.load(x_ptr + t), 0) + t)

    x = torch.randn(256, device="cuda")
    o = torch.full((256,), float("nan"), device="cuda")
    ck = probe_gpu.warmup(x, o, N=256, grid=(1,), num_warps=8)
    off = triton_smem.reserve(ck, 61440)
    pct = triton_smem.fit_carveout(ck)
    assert pct == carveout_percent(off + 61440, 233472, 1024)  # the H200: 228 KB an SM, 1 KB a block kept
    assert triton_smem.carveout_of(ck) == pct and triton_smem.fit_carveout(ck) == pct
    probe_gpu[(1,)](x, o, N=256, num_warps=8)
    torch.testing.assert_close(o, x.sum() + torch.arange(256, device="cuda", dtype=torch.float32))
