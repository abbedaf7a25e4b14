"""Serving Kimi-K3 with and without --enable-amd-monokernel (needs the hardware; see README)."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_k3 as h  # noqa: E402

MODEL = os.environ.get("SGL_K3_MONO_E2E_MODEL")
GSM8K = os.environ.get("SGL_K3_MONO_E2E_GSM8K")


def _missing() -> str:
    why = []
    if not MODEL:
        why.append("SGL_K3_MONO_E2E_MODEL (a Kimi-K3 checkpoint path) is not set")
    if not GSM8K:
        why.append("SGL_K3_MONO_E2E_GSM8K (a GSM8K JSONL) is not set")
    try:
        import sgl_kernel  # noqa: F401  (SGLang's GPU runtime)
        import torch

        if torch.cuda.device_count() < 8:
            why.append(f"{torch.cuda.device_count()} GPUs visible, TP 8 needs 8")
    except Exception as e:
        why.append(f"SGLang's GPU runtime does not import ({type(e).__name__}: {e})")
    return "; ".join(why)


pytestmark = pytest.mark.skipif(bool(_missing()), reason=_missing() or "ok")


def _extra() -> list[str]:
    default = "--attention-backend aiter" if os.environ.get("ROCM_PATH") else ""
    return os.environ.get("SGL_K3_MONO_E2E_ARGS", default).split()


def _serve(mono: bool, port: int, env=None):
    proc = subprocess.Popen(h.server_command(MODEL, port=port, mono=mono, extra=_extra()),
                            env={**os.environ, **(env or {})}, stderr=subprocess.PIPE, text=True)
    return proc


@pytest.fixture(scope="module")
def servers():
    procs = {False: _serve(False, 30110), True: _serve(True, 30111)}
    try:
        for mono, p in procs.items():
            h.wait_ready(30111 if mono else 30110, p)
        yield {False: 30110, True: 30111}
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGINT)
            p.wait(timeout=120)


def _questions(n: int = 50):
    with open(GSM8K) as f:
        return [json.loads(line) for line in f][:n]


def test_gsm8k_accuracy_matches(servers):
    acc = {}
    for mono, port in servers.items():
        qs = _questions()
        right = sum(h.gsm8k_prediction(h.complete(port, f"Question: {q['question']}\nAnswer:", max_tokens=512)
                                       ["choices"][0]["text"]) == h.gsm8k_reference(q["answer"]) for q in qs)
        acc[mono] = right / len(qs)
    print(f"GSM8K sample accuracy: off {acc[False]:.3f}, on {acc[True]:.3f}")
    assert acc[True] >= acc[False] - 0.04


def test_logprob_kl_is_small(servers):
    kls = []
    for q in _questions(20):
        prompt = f"Question: {q['question']}\nAnswer:"
        a, b = (h.complete(servers[m], prompt, max_tokens=16, logprobs=5)["choices"][0]["logprobs"]["top_logprobs"]
                for m in (False, True))
        kls += [h.kl_divergence(p, q_) for p, q_ in zip(a, b)]
    print(f"mean KL(off || on) over {len(kls)} positions: {statistics.mean(kls):.4g}")
    assert statistics.mean(kls) < 0.01


def test_decode_speed(servers):
    itl = {}
    for mono, port in servers.items():
        gaps = []
        for q in _questions(5):
            gaps += h.stream_timing(port, f"Question: {q['question']}\nAnswer:", max_tokens=256)[1]
        itl[mono] = statistics.median(gaps)
    print(f"ITL P50: off {itl[False] * 1e3:.2f} ms, on {itl[True] * 1e3:.2f} ms "
          f"(decode steps/s {1 / itl[False]:.1f} -> {1 / itl[True]:.1f})")


def test_stalled_rank_stops_the_server_loudly():
    p = _serve(True, 30112, env={"SGL_K3_MONO_STALL": "1:3:k2:front"})
    t0 = time.time()
    try:
        h.wait_ready(30112, p)
        try:
            h.complete(30112, "Hello", max_tokens=8)
        except Exception:
            pass
        p.wait(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
    err = p.stderr.read()
    assert p.returncode != 0 and "rank 1, layer 3, launch K2, phase 'front'" in err
    print(f"server stopped {time.time() - t0:.0f} s after start")
