"""The e2e harness on the CPU: its command lines and parsing (the suite itself needs the
hardware and skips here)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import e2e_k3 as h  # noqa: E402


def test_server_commands_differ_only_by_the_flag():
    off = h.server_command("/m/K3", port=30000, mono=False, extra=["--attention-backend", "aiter"])
    on = h.server_command("/m/K3", port=30000, mono=True, extra=["--attention-backend", "aiter"])
    assert off == ["sglang", "serve", "--model-path", "/m/K3", "--tp", "8", "--port", "30000", "--host",
                   "127.0.0.1", "--attention-backend", "aiter"]
    assert on == off + ["--enable-amd-monokernel"]


def test_gsm8k_parsing():
    assert h.gsm8k_reference("She has 3 + 4 = 7 apples.\n#### 1,234") == "1234"
    assert h.gsm8k_prediction("So the answer is 42.") == "42"
    assert h.gsm8k_prediction("... #### -3.5") == "-3.5"
    assert h.gsm8k_prediction("no number") is None


def test_kl():
    p = {"a": -0.1, "b": -2.5}
    assert h.kl_divergence(p, p) == 0.0
    assert h.kl_divergence(p, {"a": -0.2, "b": -2.0}) > 0
    assert h.kl_divergence(p, {"a": -0.1}) > 0  # a missing token counts, at q's floor


def test_the_suite_skips_here_with_its_reason():
    import subprocess

    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", str(Path(h.__file__).parent)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "SGL_K3_MONO_E2E_MODEL" in done.stdout and "skipped" in done.stdout
