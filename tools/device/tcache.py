"""Triton's compile cache for the device machine, built on this CPU, so that a fresh machine
does not spend its device time compiling what a call is about to time.

Why: a device call starts on a bare machine with an empty cache. Before anything is timed it
compiles bench k2's after_code_110kb kernels (five of 256 unrolled bodies, 15-17 s each here, one
after the other), the K2 builds the call compares (6-13 s each here) and the standard path's
Triton kernels (SGLang's fused MoE and seam mix); the fifty-sixth session's K2 MXFP4 8-row row ran
out of its limit while its cold ways compiled. Not built here: the step's K1 / K2 builds (no spec:
`harvest` brings a device call's compiles back and `merge` adds them, under the key they were made
with), SGLang's JIT kernels (nvcc through tvm-ffi) and Triton's launcher stubs (gcc, there).

    .venv-t36/bin/python tools/device/tcache.py build .tcache SPEC...   # here (tools/setup_triton36.sh)
    python3 tools/device/tcache.py install .tcache.txz                  # there: env.sh, when carried
    .venv-t36/bin/python tools/device/tcache.py check .tcache.txz SPEC...  # here: installed under the
                                        # device's key, the specs compile again as cache hits
    python3 tools/device/tcache.py harvest $OUT/tc-harvest.txz         # there, after a call: its misses
    .venv/bin/python tools/device/tcache.py merge .tcache FILE LABEL    # here: into the folder and .txz

(build leaves the folder and its .txz, which is what a call carries: about a tenth of the size.)

SPEC: `code` (l2_stream's code_sweep kernels, bench k2's after_code_110kb / code_22kb);
`sgmoe:ROWS` / `sgmoe-grid:ROWS` (SGLang's fused MoE kernels as bench k2's standard path runs them
with SGLang's default config / as tools/device/sglang_moe_tune.py's grid); `sgseam:ROWS` (SGLang's
attention-residual mix, the standard seam's Triton kernels); or
`k2:FMT:ROWS[:BLOCK][:trace]`: K2 at a TP-8 rank's shapes, TP 1, as bench k2 builds it (FMT bf16 /
mxfp4, BLOCK as its --block, e.g. `k2:bf16:1:WARM=4`, `k2:mxfp4:8`; `trace` as with --trace).
PYTHONPATH chooses the tree (`PYTHONPATH=.ab-probe` builds a probe tree's kernels); a second build into
the same folder adds its entries to the first's.

Triton finds an entry only under the same key. The key covers Triton's own files, among them
libtriton.so, which differs between the device's Python 3.12 wheel of triton 3.6.0 and this
machine's 3.11 one (the Python files are the same): `build` therefore keys entries as the
3.12 wheel would (CP312_LIBTRITON_SHA256; `--cp312-wheel W` reads it from the wheel), and
`install` installs nothing unless the device's own key is the one the entries were built for.
The rest of the key (the kernel's source, its specialisation, ptxas's version, the options)
is what a launch there computes: compile_check's argument builder gives the specialisation a
real launch gets, and SGLang's kernels get the launch options SGLang gives them on sm_90. On an
H100 (fifty-seventh session) the K2 builds and code kernels were found; SGLang's kernels missed
until they got PDL, after which the CPU wrote the very keys the device had compiled under, and a
fresh machine compiled nothing for bench k2 bf16 (docs/evidence/k2-sm90.md). `install` prints
`TCACHE`; env.sh's `tcache_compiled` lists the misses.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = "tcache-manifest.json"
TRITON_VERSION = "3.6.0"
CP312_LIBTRITON_SHA256 = "28daaa70a904e4f8add754e518533e8a69b94ab8b16431ce77d45f1f25282b87"
"""sha256 of triton/_C/libtriton.so in triton-3.6.0-cp312-cp312-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl
(PyPI), the build the device's Python 3.12 runs (read 2026-12-07)."""
KEEP = (".json", ".cubin")  # what a cache hit reads (CompiledKernel: the metadata and the binary)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _key_digest(key: str) -> str:
    return _sha(key.encode())


def _keyed_as_cp312(cp312_lib_sha: str) -> str:
    """This machine's triton_key with its libtriton.so hash replaced by the 3.12 wheel's."""
    import triton
    from triton.runtime import cache

    lib = os.path.join(os.path.dirname(triton.__file__), "_C", "libtriton.so")
    own = _sha(open(lib, "rb").read())
    key = cache.triton_key()
    if key.count(own) != 1:
        raise SystemExit(f"TCACHE build: libtriton's hash is not once in Triton {triton.__version__}'s key")
    key = key.replace(own, cp312_lib_sha)
    cache.triton_key = lambda: key  # (get_cache_key reads the module's name at each compile)
    return key


def _build_code() -> None:
    """code_sweep as bench k2 runs it (up to five kernels on every SM), compiled only."""
    import torch

    from sgl_k3_mono.runtime import l2_stream

    with _compile_only():
        l2_stream.code_sweep(torch.zeros(1 << 20), torch.zeros(132, 128), kernels=5)


def _build_k2(fmt: str, rows: int, block: dict, trace: bool) -> None:
    from sgl_k3_mono.compile_check import _k2_variant

    kernel, args, meta = _k2_variant(fmt, "sm_90", rows, "sm_90", block=block, trace=trace)
    kernel.warmup(*args, PHASE=-1, grid=(132,), **meta)


def _build_sgmoe(rows: int, grid: bool) -> None:
    """SGLang's fused MoE kernels as bench k2's standard path (`grid` False: SGLang's default config)
    or the tuner's grid (tools/device/sglang_moe_tune.py) runs them at a TP-8 rank: every
    `kernel[grid](...)` compiles only (Triton's warmup), so the host code runs through to its end."""
    import torch

    from sgl_k3_mono.compile_check import _placeholder
    from sgl_k3_mono.k2.sglang_moe import sglang_routed_experts
    from sgl_k3_mono.k2.synthetic import rank_dims

    d = rank_dims(8)
    E, I, L, K = d.experts, d.expert_inter, d.latent, 16
    w13, w2 = _placeholder((E, 2 * I, L), torch.bfloat16), _placeholder((E, L, I), torch.bfloat16)
    x = torch.zeros(rows, L, dtype=torch.bfloat16)
    ids = torch.arange(rows * K).view(rows, K) % E
    wts = torch.full((rows, K), 1.0 / K)
    configs = [None]
    if grid:
        sys.path.insert(0, HERE)
        from sglang_moe_tune import GRID

        configs = GRID
    with _compile_only(), _sglang_pdl():
        for cfg in configs:
            sglang_routed_experts(w13, w2, top_k=K, rows=rows, beta=4.0, linear_beta=25.0, config=cfg)(x, ids, wts)


def _build_sgseam(rows: int) -> None:
    """SGLang's attention-residual mix (its Triton score and combine kernels) as bench k2's
    standard seam runs it at a TP-8 rank: H 7168, 8 bank rows, 4 of them valid."""
    import torch

    from sgl_k3_mono.k2.synthetic import rank_dims
    from sgl_k3_mono.standard_seam import _import_attn_residual, _Weights

    H, bf = rank_dims(8).hidden, torch.bfloat16
    attn_residual, how = _import_attn_residual()
    if attn_residual is None:
        raise SystemExit(f"TCACHE build: SGLang's attn_residual: {how}")
    with _compile_only(), _sglang_pdl():
        attn_residual._mix_fused(torch.zeros(rows, H, dtype=bf), torch.zeros(rows, 8, H, dtype=bf), 4,
                                 _Weights(torch.ones(1, H, dtype=bf)), _Weights(torch.ones(H, dtype=bf), 1e-6))


@contextlib.contextmanager
def _compile_only():
    """Every `kernel[grid](...)` compiles only (Triton's warmup), so the host code around it
    runs through to its end on the CPU."""
    from triton.runtime.jit import KernelInterface

    real = KernelInterface.__getitem__
    KernelInterface.__getitem__ = lambda self, g: (lambda *a, **k: self.run(*a, grid=g, warmup=True, **k))
    try:
        yield
    finally:
        KernelInterface.__getitem__ = real


@contextlib.contextmanager
def _sglang_pdl():
    """SGLang's kernels take the launch options it gives them on sm_90 (PDL: its
    `is_arch_support_pdl` finds no GPU here; the device's first build had them, 57th)."""
    from sgl_k3_mono.k2.sglang_moe import _sgl_kernel_for_import

    with _sgl_kernel_for_import():
        import sglang.kernels.ops.moe.fused_moe_triton_kernels as fmk
        import sglang.kernels.ops.moe.moe_align_small_numel as msn
    real = fmk.is_arch_support_pdl, msn.is_arch_support_pdl
    fmk.is_arch_support_pdl = msn.is_arch_support_pdl = lambda: True
    try:
        yield
    finally:
        fmk.is_arch_support_pdl, msn.is_arch_support_pdl = real


def _one(spec: str) -> None:
    if spec == "code":
        return _build_code()
    if spec.split(":")[0] in ("sgmoe", "sgmoe-grid"):
        return _build_sgmoe(int(spec.split(":")[1]), spec.startswith("sgmoe-grid"))
    if spec.split(":")[0] == "sgseam":
        return _build_sgseam(int(spec.split(":")[1]))
    parts = spec.split(":")
    if parts[0] != "k2" or len(parts) < 3:
        raise SystemExit(f"TCACHE build: {spec!r} is not `code`, sgmoe[-grid]:ROWS, sgseam:ROWS or k2:FMT:ROWS[:BLOCK][:trace]")
    trace = parts[-1] == "trace"
    rest = parts[3:-1] if trace else parts[3:]
    block = {k: int(v) for k, v in (kv.split("=") for kv in (rest[0] if rest else "").split(",") if kv)}
    _build_k2(parts[1], int(parts[2]), block, trace)


def build(out: str, specs: list[str], cp312_wheel: str | None) -> int:
    import triton

    from sgl_k3_mono.compile_check import _stub_driver

    if triton.__version__ != TRITON_VERSION:
        raise SystemExit(f"TCACHE build: Triton {triton.__version__} here; the device runs {TRITON_VERSION} "
                         "(tools/setup_triton36.sh makes .venv-t36)")
    lib_sha = CP312_LIBTRITON_SHA256
    if cp312_wheel:
        with zipfile.ZipFile(cp312_wheel) as z:
            lib_sha = _sha(z.read("triton/_C/libtriton.so"))
    key = _keyed_as_cp312(lib_sha)
    work = os.path.abspath(out) + ".work"  # (Triton's own cache here, pruned into `out` below)
    os.environ["TRITON_CACHE_DIR"] = work
    _stub_driver("sm_90")
    for spec in specs:
        t = time.time()
        _one(spec)
        print(f"TCACHE built {spec} in {time.time() - t:.1f} s", flush=True)
    entries = _copy_entries(work, out)
    manifest = {"triton": TRITON_VERSION, "key_sha256": _key_digest(key), "cp312_libtriton_sha256": lib_sha,
                "specs": specs, "entries": entries}
    _add_to(out, manifest)
    return 0


def _copy_entries(cache: str, out: str, newer_than: float = 0.0) -> dict:
    """Each compiled kernel of Triton's cache folder `cache` (its group file newer than
    `newer_than`) into `out`: metadata and cubin, its group naming them relatively."""
    os.makedirs(out, exist_ok=True)
    entries = {}
    for h in sorted(os.listdir(cache)):
        src = os.path.join(cache, h)
        if not os.path.isdir(src):
            continue
        grp = [f for f in os.listdir(src) if f.startswith("__grp__")]
        if len(grp) != 1 or os.path.getmtime(os.path.join(src, grp[0])) <= newer_than:
            continue  # (a launcher's .so, a half-written entry, or one there before: the device builds launchers)
        dst = os.path.join(out, h)
        os.makedirs(dst, exist_ok=True)
        kept = [f for f in os.listdir(src) if f.endswith(KEEP) and not f.startswith("__grp__")]
        for f in kept:
            shutil.copyfile(os.path.join(src, f), os.path.join(dst, f))
        json.dump({"child_paths": {f: f for f in kept}}, open(os.path.join(dst, grp[0]), "w"))
        entries[h] = sorted(kept)
    return entries


def _add_to(out: str, manifest: dict) -> None:
    """Write `manifest` for the entries in `out`, after those a manifest there already lists
    under the same key (a second build, or a merge, adds to the first), then pack `out`."""
    path = os.path.join(out, MANIFEST)
    if os.path.exists(path):
        old = json.load(open(path))
        if old["key_sha256"] == manifest["key_sha256"]:
            manifest["specs"] = old["specs"] + [s for s in manifest["specs"] if s not in old["specs"]]
            manifest["entries"] = {**old["entries"], **manifest["entries"]}
    json.dump(manifest, open(path, "w"), indent=1)
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(out) for f in fs)
    # what travels: xz takes the cubins to about a tenth (the call's tree and carries share 64 MiB)
    with tarfile.open(out.rstrip("/") + ".txz", "w:xz") as tar:
        tar.add(out, arcname=".")
    print(f"TCACHE {len(manifest['entries'])} entries, {size / 2**20:.1f} MiB in {out}, "
          f"{os.path.getsize(out.rstrip('/') + '.txz') / 2**20:.2f} MiB in {out.rstrip('/')}.txz")


def _cache_dir() -> str:
    return os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")


def harvest(dst: str, since: str = "/tmp/tcache-installed") -> int:
    """There, after a call: the kernels this machine compiled after `since` was touched (env.sh
    touches it at install: the call's misses) as an archive `dst` (.txz), keyed as this Triton
    keys them, for `merge` into the folder a later call carries."""
    import triton
    from triton.runtime.cache import triton_key

    t0 = os.path.getmtime(since) if os.path.exists(since) else 0.0
    with tempfile.TemporaryDirectory() as tmp:
        entries = _copy_entries(_cache_dir(), tmp, newer_than=t0)
        json.dump({"triton": triton.__version__, "key_sha256": _key_digest(triton_key()), "entries": entries},
                  open(os.path.join(tmp, MANIFEST), "w"), indent=1)
        with tarfile.open(dst, "w:xz") as tar:
            tar.add(tmp, arcname=".")
    print(f"TCACHE harvested {len(entries)} entries into {dst}")
    return 0


def merge(out: str, src: str, label: str) -> int:
    """Here: a device's harvest `src` into the build folder `out` (and its .txz), if its key is
    the folder's; listed in the manifest's specs as `harvest:LABEL` (a rebuild of the folder
    from its specs drops these: merge them again)."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(src, "r:xz") as tar:
            tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        got = json.load(open(os.path.join(tmp, MANIFEST)))
        have = json.load(open(os.path.join(out, MANIFEST)))
        if got["key_sha256"] != have["key_sha256"]:
            raise SystemExit(f"TCACHE merge: {src} was compiled under key {got['key_sha256'][:12]}, "
                             f"{out} is keyed {have['key_sha256'][:12]}")
        entries = _copy_entries(tmp, out)
    _add_to(out, {**have, "specs": [f"harvest:{label}"], "entries": entries})
    print(f"TCACHE merged {len(entries)} entries from {src}")
    return 0


def install(src: str) -> int:
    """Copy the entries (a build's folder, or its .txz) into this machine's Triton cache
    (TRITON_CACHE_DIR, else Triton's default), their groups pointing at the copies, if this
    Triton's key is theirs."""
    from triton.runtime.cache import triton_key

    if src.endswith(".txz"):
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(src, "r:xz") as tar:
                tar.extractall(tmp, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
            return install(tmp)
    m = json.load(open(os.path.join(src, MANIFEST)))
    own = _key_digest(triton_key())
    if own != m["key_sha256"]:
        print(f"TCACHE not installed: this Triton's key {own[:12]} is not the entries' {m['key_sha256'][:12]} "
              f"(built for triton {m['triton']}, Python 3.12's libtriton {m['cp312_libtriton_sha256'][:12]})")
        return 0
    cache = os.environ.get("TRITON_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".triton", "cache")
    new = 0
    for h, files in m["entries"].items():
        dst = os.path.join(cache, h)
        if os.path.isdir(dst):
            continue
        os.makedirs(dst)
        for f in files:
            shutil.copyfile(os.path.join(src, h, f), os.path.join(dst, f))
        grp = [f for f in os.listdir(os.path.join(src, h)) if f.startswith("__grp__")][0]
        json.dump({"child_paths": {f: os.path.join(dst, f) for f in files}}, open(os.path.join(dst, grp), "w"))
        new += 1
    print(f"TCACHE installed {new} of {len(m['entries'])} entries into {cache} (key {own[:12]}): {' '.join(m['specs'])}")
    return 0


def check(src: str, specs: list[str]) -> int:
    """Here, after a build: install `src` into an empty cache under the key the device will compute,
    then compile `specs` again (this tree's); each compile must be a cache hit."""
    import triton

    from sgl_k3_mono.compile_check import _stub_driver

    _keyed_as_cp312(json.load(tarfile.open(src, "r:xz").extractfile("./" + MANIFEST))["cp312_libtriton_sha256"])
    with tempfile.TemporaryDirectory() as cache:
        os.environ["TRITON_CACHE_DIR"] = cache
        install(src)
        hits: list = []
        triton.knobs.compilation.listener = lambda **kw: hits.append(kw["cache_hit"])
        _stub_driver("sm_90")
        for spec in specs:
            _one(spec)
    print(f"TCACHE check: {len(hits)} compiles, {sum(hits)} cache hits")
    return 0 if hits and all(hits) else 1


def main(argv: list[str] | None = None) -> int:
    a = list(sys.argv[1:] if argv is None else argv)
    if len(a) >= 2 and a[0] == "install":
        return install(a[1])
    if len(a) >= 3 and a[0] == "check":
        return check(a[1], a[2:])
    if len(a) >= 2 and a[0] == "harvest":
        return harvest(a[1])
    if len(a) >= 4 and a[0] == "merge":
        return merge(a[1], a[2], a[3])
    if len(a) >= 3 and a[0] == "build":
        wheel = None
        if "--cp312-wheel" in a:
            i = a.index("--cp312-wheel")
            wheel = a[i + 1]
            del a[i:i + 2]
        return build(a[1], a[2:], wheel)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
