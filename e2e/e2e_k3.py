"""The e2e harness: server command lines, GSM8K answer parsing, logprob KL, and timing.
Kept small and plain: it talks to `sglang serve` through its OpenAI-compatible HTTP API
with the standard library only."""

from __future__ import annotations

import json
import math
import re
import time
import urllib.request
from typing import Iterable, Optional

FLAG = "--enable-amd-monokernel"


def server_command(model: str, *, port: int, mono: bool, tp: int = 8, extra: Iterable[str] = ()) -> list[str]:
    """`sglang serve` for the comparison; the two arms differ only by the flag."""
    cmd = ["sglang", "serve", "--model-path", model, "--tp", str(tp), "--port", str(port),
           "--host", "127.0.0.1", *extra]
    return cmd + [FLAG] if mono else cmd


_NUM = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def gsm8k_reference(answer: str) -> Optional[str]:
    """The number after '####' in a GSM8K answer."""
    tail = answer.split("####")[-1]
    m = _NUM.search(tail)
    return m.group(0).replace(",", "") if m else None


def gsm8k_prediction(text: str) -> Optional[str]:
    """The last number in a completion (after '####' if the model wrote one)."""
    nums = _NUM.findall(text.split("####")[-1] if "####" in text else text)
    return nums[-1].replace(",", "").rstrip(".") if nums else None


def kl_divergence(p_logprobs: dict, q_logprobs: dict) -> float:
    """KL(p || q) over p's top-k tokens, both renormalised on that set; a token q did not
    return gets q's smallest logprob (so a missing token still counts)."""
    floor = min(q_logprobs.values()) if q_logprobs else -30.0
    toks = list(p_logprobs)
    lp = [p_logprobs[t] for t in toks]
    lq = [q_logprobs.get(t, floor) for t in toks]
    zp = math.log(sum(math.exp(x) for x in lp))
    zq = math.log(sum(math.exp(x) for x in lq))
    return sum(math.exp(a - zp) * ((a - zp) - (b - zq)) for a, b in zip(lp, lq))


def post(port: int, path: str, body: dict, timeout: float = 600.0) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def complete(port: int, prompt: str, *, max_tokens: int, logprobs: int = 0) -> dict:
    body = {"model": "default", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0}
    if logprobs:
        body["logprobs"] = logprobs
    return post(port, "/v1/completions", body)


def stream_timing(port: int, prompt: str, *, max_tokens: int) -> tuple[float, list[float]]:
    """(seconds to the first token, inter-token gaps) of one streamed greedy completion."""
    body = json.dumps({"model": "default", "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0,
                       "stream": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    t0, stamps = time.perf_counter(), []
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: ") and not line.startswith(b"data: [DONE]"):
                stamps.append(time.perf_counter())
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    return (stamps[0] - t0 if stamps else float("nan")), gaps


def wait_ready(port: int, proc, timeout_s: float = 1800.0) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5):
                return
        except Exception:
            time.sleep(5)
    raise TimeoutError(f"server on port {port} not ready after {timeout_s:.0f} s")
