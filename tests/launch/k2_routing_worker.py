"""K2's route_row against a torch top-k, on tie-heavy scores (quantized logits, zero and
random bias). Run as `python k2_routing_worker.py DEVICE` (TRITON_INTERPRET=1 for "cpu");
prints one JSON line."""

from __future__ import annotations

import json
import sys

import torch
import triton
import triton.language as tl

from sgl_k3_mono.k2.triton.routing import route_row


@triton.jit
def _route_kernel(logits_ptr, bias_ptr, ids_ptr, wts_ptr, E, TOPK: tl.constexpr, BE: tl.constexpr,
                  KB: tl.constexpr):
    r = tl.program_id(0)
    ids, wts = route_row(logits_ptr, bias_ptr, r, E, TOPK, BE, KB)
    kc = tl.arange(0, KB)
    tl.store(ids_ptr + r * TOPK + kc, ids, mask=kc < TOPK)
    tl.store(wts_ptr + r * TOPK + kc, wts, mask=kc < TOPK)


def reference(logits: torch.Tensor, bias: torch.Tensor, top_k: int):
    """Descending biased sigmoid score, ties to the lower id (a stable sort); weights the
    unbiased scores of the picks, renormalised."""
    s = torch.sigmoid(logits)
    ids = torch.sort(s + bias, dim=-1, descending=True, stable=True).indices[:, :top_k]
    w = s.gather(1, ids)
    return ids.int(), w / (w.sum(-1, keepdim=True) + 1e-20)


def main(device: str) -> dict:
    g = torch.Generator().manual_seed(0)
    out = {"cases": 0, "ids_equal": 0, "wts_max_rel": 0.0}
    for E, top_k in ((896, 16), (64, 6), (40, 8)):
        BE, KB = triton.next_power_of_2(E), triton.next_power_of_2(top_k)
        for trial in range(4):
            logits = torch.randn(8, E, generator=g)
            if trial % 2:  # many exact ties
                logits = (logits * 2).round() / 2
            bias = (0.01 * torch.randn(E, generator=g)) if trial < 2 else torch.zeros(E)
            ids = torch.full((8, top_k), -1, dtype=torch.int32, device=device)
            wts = torch.full((8, top_k), float("nan"), device=device)
            _route_kernel[(8,)](logits.to(device), bias.to(device), ids, wts, E, top_k, BE, KB, num_warps=8)
            rid, rw = reference(logits, bias, top_k)
            out["cases"] += 1
            out["ids_equal"] += int(torch.equal(ids.cpu(), rid))
            rel = ((wts.cpu() - rw).abs() / rw.abs()).max().item()
            out["wts_max_rel"] = max(out["wts_max_rel"], rel if rel == rel else float("inf"))
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
