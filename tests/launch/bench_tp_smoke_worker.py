"""One rank of `bench k2-tp` run through on the CPU (torchrun, gloo) with every GPU-only piece
stood in: the launches compile and run nothing (out is filled), the symmetric-memory
peers are a placeholder, a timing is one call returning 1 us, and the rank's shapes are
k3-small's. What runs for real: the script's control flow, the rank-built weights, the
plans, SGLang's fused MoE composition with its NCCL reduces (gloo here; Triton's
interpreter), the floor and the table line. Prints the lines rank 0 would print.
argv: the bench's arguments."""

import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent), str(HERE.parents[1])]

import torch  # noqa: E402
from support.gpu_stand_ins import stand_in  # noqa: E402

from k2_cases import dims  # noqa: E402
from sgl_k3_mono.k2 import bench_tp, synthetic  # noqa: E402

stand_in(lambda fn, iters, reps=5, graph=True: (fn(), 1.0)[1])
torch.cuda.synchronize = lambda *a: None
torch.cuda.get_device_properties = lambda d: types.SimpleNamespace(multi_processor_count=4)
torch.cuda.get_device_name = lambda d: "CPU smoke"
synthetic.rank_dims = lambda n: dims("k3-small")
sys.exit(bench_tp.main(sys.argv[1:]))
