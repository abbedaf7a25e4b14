"""What a cold instruction fetch costs on the H200 (twenty-ninth session): K2's persistent launch
at 1 row spent 16 % of its warp-state samples on `no_inst` (Nsight Compute, bench.sh ncu-src),
in the phases after the front, at the code's first pass. This probe times a launch shaped like
K2 (one program an SM, 8 warps) whose loop body is BODY steps of straight-line integer code
(about 4 SASS instructions a step, 64 bytes), run T times:

- `hbm`: an L2-sized read first, so the code comes from HBM;
- `l2`: the same launch twice, the second timed, so the code comes from L2 (or nearer).

(The twenty-ninth session's run timed `l2` without the spin, so its `l2` column measured Python's
launch, not the kernel; its `hbm` column stands: k2-sm90.md.)

The intercept over T (cold fetch of the body once) against the slope (a warm pass) is the
price of the first pass; hbm against l2 says whether keeping the code in L2 would pay.

    python3 tools/device/icode_probe.py
"""
import statistics
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def _probe(x_ptr, out_ptr, T, BODY: tl.constexpr, NT: tl.constexpr):
    t = tl.arange(0, NT)
    a = tl.load(x_ptr + tl.program_id(0) * NT + t)
    b = a ^ 0x5BD1E995
    for _ in range(T):
        for u in tl.static_range(BODY):  # two chains, a distinct constant each step: no folding
            a = a * (2 * u + 0x343FD) + b
            b = (b ^ (a >> 7)) + u
    tl.store(out_ptr + tl.program_id(0) * NT + t, a + b)


def _time(fn, before, reps: int = 25) -> float:
    """Median us of fn alone, each time after `before` and a ~0.1 ms spin on the GPU, so the
    timed launch is queued before the GPU reaches it (a launch from Python takes longer than
    this kernel runs)."""
    out = []
    for _ in range(reps):
        before()
        torch.cuda._sleep(200_000)
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        out.append(s.elapsed_time(e) * 1e3)
    return statistics.median(out)


def main() -> None:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    nt = 256
    x = torch.randint(0, 1 << 30, (sms * nt,), dtype=torch.int32, device="cuda")
    out = torch.empty_like(x)
    flush = torch.empty(512 << 20, dtype=torch.uint8, device="cuda")
    print(f"ICODE {torch.cuda.get_device_name(0)}, {sms} programs x 8 warps, us (median of 25 launches)")
    for body in (48, 176, 512, 1408):
        k = _probe.warmup(x, out, 1, BODY=body, NT=nt, grid=(sms,), num_warps=8)
        size = len(k.asm["cubin"])
        row = []
        for t in (1, 2, 4, 8):
            run = lambda: _probe[(sms,)](x, out, t, BODY=body, NT=nt, num_warps=8)  # noqa: E731
            run()
            hbm = _time(run, lambda: flush.add_(1))
            l2 = _time(run, run)
            row.append((t, hbm, l2))
        cold = [h - l for _, h, l in row]
        slope = (row[-1][2] - row[0][2]) / (row[-1][0] - row[0][0])
        print(f"ICODE BODY {body:5d} (cubin {size / 1024:.0f} KB) "
              + " ".join(f"T{t}: hbm {h:6.2f} l2 {l:6.2f}" for t, h, l in row)
              + f" | warm pass {slope:.2f} us, first pass extra: l2 {row[0][2] - slope:.2f}, "
              f"hbm {row[0][1] - slope:.2f} (hbm - l2 {statistics.median(cold):.2f})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
