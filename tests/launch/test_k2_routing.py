"""K2's routing top-k (k2/triton/routing.route_row) against torch's, ties included: the
same ids in the same order (lower id first among equal scores) and the same weights to
an ulp of the renormalising sum, at Kimi-K3's 896 experts / top 16 and at small widths;
and the step's expert table (routing.write_expert_table, which experts_down reads with
XET) against a Python one, exactly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _run(device: str, env: dict, *mode: str) -> dict:
    done = subprocess.run([sys.executable, str(HERE / "k2_routing_worker.py"), device, *mode], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _check(res: dict) -> None:
    assert res["ids_equal"] == res["cases"] == 12, res
    assert res["wts_max_rel"] <= 1e-6, res  # renormalized in another order: fp32 ulps


def test_route_row_interpreted_matches_torch_topk():
    _check(_run("cpu", {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}))


@pytest.mark.gpu
def test_route_row_gpu_matches_torch_topk():
    res = _run("cuda", dict(os.environ))
    print(f"\nK2ROUTE {res}")
    _check(res)


def test_expert_table_interpreted_matches_python():
    res = _run("cpu", {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}, "table")
    assert res["equal"] == res["cases"] == 12, res


@pytest.mark.gpu
def test_expert_table_gpu_matches_python():
    res = _run("cuda", dict(os.environ), "table")
    print(f"\nK2TABLE {res}")
    assert res["equal"] == res["cases"] == 12, res
