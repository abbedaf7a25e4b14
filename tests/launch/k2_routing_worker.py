"""K2's route_row against a torch top-k, on tie-heavy scores (quantized logits, zero and
random bias), and the step's expert table (write_expert_table, read back through
table_expert / table_slot) against a Python one. Run as `python k2_routing_worker.py
DEVICE [table]` (TRITON_INTERPRET=1 for "cpu"); prints one JSON line."""

from __future__ import annotations

import json
import sys

import torch
import triton
import triton.language as tl

from sgl_k3_mono.k2.triton.routing import (distinct_experts, route_row, table_expert, table_slot,
                                           write_expert_table)


@triton.jit
def _route_kernel(logits_ptr, bias_ptr, ids_ptr, wts_ptr, E, TOPK: tl.constexpr, BE: tl.constexpr,
                  KB: tl.constexpr):
    r = tl.program_id(0)
    ids, wts = route_row(logits_ptr, bias_ptr, r, E, TOPK, BE, KB)
    kc = tl.arange(0, KB)
    tl.store(ids_ptr + r * TOPK + kc, ids, mask=kc < TOPK)
    tl.store(wts_ptr + r * TOPK + kc, wts, mask=kc < TOPK)


@triton.jit
def _table_kernel(ids_ptr, owner_ptr, tab_ptr, experts_ptr, slots_ptr, M, TOPK: tl.constexpr, BM: tl.constexpr,
                  KB: tl.constexpr, XR: tl.constexpr):
    """One program: the table from the routed ids, then each distinct expert and each
    (expert, x row) slot read back through the accessors experts_down uses."""
    ids, keep, first, number, n_e = distinct_experts(ids_ptr, owner_ptr, M, TOPK, BM, KB)
    write_expert_table(tab_ptr, ids, keep, first, number, n_e, owner_ptr, TOPK, BM, KB, XR)
    tl.debug_barrier()  # the table's stores before this CTA reads them back
    P: tl.constexpr = BM * KB
    q = tl.arange(0, P)
    tl.store(experts_ptr + q, table_expert(tab_ptr, q), mask=q < n_e)
    for tok in tl.static_range(XR):
        tl.store(slots_ptr + q * XR + tok, table_slot(tab_ptr, q, tok, P, XR), mask=q < n_e)


def table_reference(ids: torch.Tensor) -> tuple[list[int], dict]:
    """The distinct experts in (row, slot) order of their first naming, and each one's
    slot in each row that names it."""
    order, slot = [], {}
    for r, row in enumerate(ids.tolist()):
        for k, e in enumerate(row):
            if e not in slot:
                order.append(e)
                slot[e] = {}
            slot[e][r] = k
    return order, slot


def table_main(device: str) -> dict:
    """Random routings with shared experts (rows drawn from a small pool) at Kimi-K3's
    top 16 of 896 and at top 6 of 64, 1-8 rows, at the launch's row tiles (16, and a GEMV
    launch's rows rounded up)."""
    g = torch.Generator().manual_seed(1)
    out = {"cases": 0, "equal": 0}
    for E, top_k in ((896, 16), (64, 6)):
        KB = triton.next_power_of_2(top_k)
        for M in (1, 3, 8):
            for BM in sorted({16, triton.next_power_of_2(M)}):
                pool = torch.randperm(E, generator=g)[: max(top_k + 4, 2 * top_k)]
                ids = torch.stack([pool[torch.randperm(len(pool), generator=g)[:top_k]] for _ in range(M)]).int()
                owner = torch.full((E,), 0x7FFFFFFF, dtype=torch.int32)
                for r in range(M):
                    for k in range(top_k):
                        owner[ids[r, k]] = min(int(owner[ids[r, k]]), r * top_k + k)
                XR = 16
                P = BM * KB
                tab = torch.full((1 + 2 * P + P * XR,), -7, dtype=torch.int32, device=device)
                experts = torch.full((P,), -7, dtype=torch.int32, device=device)
                slots = torch.full((P, XR), -7, dtype=torch.int32, device=device)
                _table_kernel[(1,)](ids.to(device), owner.to(device), tab, experts, slots, M, top_k, BM, KB, XR,
                                    num_warps=8)
                order, slot = table_reference(ids)
                n = len(order)
                want = torch.tensor([[slot[e].get(t, -1) for t in range(XR)] for e in order], dtype=torch.int32)
                ok = (int(tab[0]) == n and experts[:n].cpu().tolist() == order
                      and torch.equal(slots[:n].cpu(), want))
                out["cases"] += 1
                out["equal"] += int(ok)
    return out


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
    print(json.dumps(table_main(sys.argv[1]) if sys.argv[2:] == ["table"] else main(sys.argv[1])))
