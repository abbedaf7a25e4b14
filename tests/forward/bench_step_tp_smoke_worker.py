"""One rank of `bench step --tp` run through on the CPU (torchrun, gloo) with every GPU-only
piece stood in: K1 and K2 compile and run nothing (K2's out is its prefix), the
symmetric-memory peers are a placeholder, a timing is one call returning 1 us. What runs
for real: the script's control flow, the rank's weights and step model (real TP-8 rank
widths, 16 experts), its plans, the warm-up's two passes and barrier, the step with the
harness's fp32 hooks over gloo, the standard step (torch KDA chain, SGLang's fused MoE
under Triton's interpreter, K2's reduces over gloo), the floor and the table line.
argv: the bench's arguments."""

import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parents[2])]

import torch  # noqa: E402
from support.gpu_stand_ins import stand_in  # noqa: E402

from sgl_k3_mono.forward import bench, harness, launches, warm  # noqa: E402

_calls = []


def one_call(fn, iters, reps=5, graph=True):  # a timing: one call, "taking" 10, 20, 30... us (full > bare)
    fn()
    _calls.append(None)
    return 10.0 * len(_calls)


stand_in(one_call)
warm.wait = lambda *a, **k: None
launches.k1 = lambda plan, bufs, views, io, *, layer, deadline_s: None


def gather(self, part):  # gloo's all_gather_into_tensor takes no stacked [tp, ...] output (NCCL's does)
    import torch.distributed as dist

    parts = [torch.empty_like(part) for _ in range(self.tp)]
    dist.all_gather(parts, part.contiguous(), group=self.group)
    return torch.stack(parts)


harness.HarnessHooks._gather = gather
sys.exit(bench.main(sys.argv[1:]))
